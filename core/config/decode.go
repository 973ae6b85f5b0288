package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/internal/steps"
	"github.com/sluice-gw/sluice/internal/suggest"
)

// decoder turns go-toml's generic values into the Config structs, checking
// every key against the schema (unknown keys are errors), every value's TOML
// type, and expanding ${VAR} in every string. It reports all problems it
// finds, each at the position of its key or value.
type decoder struct {
	cfg    *Config
	lookup func(string) (string, bool)
	errs   *errs
}

var durationType = reflect.TypeOf(time.Duration(0))

// tomlType names the TOML type of a decoded value for error messages.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return "a date/time"
	}
}

func quote(s string) string { return strconv.Quote(s) }

func (d *decoder) keyPos(path []string) Position { return d.cfg.Pos(path...) }
func (d *decoder) valPos(path []string) Position { return d.cfg.ValuePos(path...) }

func child(path []string, k string) []string {
	return append(append(make([]string, 0, len(path)+1), path...), k)
}

// schemaPath replaces table names and array indexes by "*", for plannedKeys.
func schemaPath(path []string) string {
	out := make([]string, len(path))
	for i, s := range path {
		out[i] = s
		if i == 1 && collections[path[0]] {
			out[i] = "*"
		}
		if _, err := strconv.Atoi(s); err == nil && i > 1 {
			out[i] = "*"
		}
	}
	return strings.Join(out, ".")
}

type field struct {
	index int
	typ   reflect.Type
}

// fields maps TOML key -> struct field, and returns the ",remain" field index (or -1).
func fields(t reflect.Type) (map[string]field, int, []string) {
	m := map[string]field{}
	remain := -1
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		switch {
		case !f.IsExported() || tag == "-" || tag == "":
		case tag == ",remain":
			remain = i
		default:
			m[tag] = field{index: i, typ: f.Type}
			names = append(names, tag)
		}
	}
	sort.Strings(names)
	return m, remain, names
}

func sortedKeys(m map[string]any) []string {
	steps.Add(len(m) + 1)
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// decodeStruct decodes table m at path into the struct rv (addressable).
func (d *decoder) decodeStruct(path []string, m map[string]any, rv reflect.Value) {
	fs, remain, names := fields(rv.Type())
	for _, k := range sortedKeys(m) {
		kp := child(path, k)
		f, ok := fs[k]
		if !ok {
			if remain >= 0 {
				r := rv.Field(remain)
				if r.IsNil() {
					r.Set(reflect.MakeMap(r.Type()))
				}
				r.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(d.raw(kp, m[k])))
				continue
			}
			d.unknown(kp, names)
			continue
		}
		d.decodeValue(kp, m[k], rv.Field(f.index))
	}
}

func (d *decoder) unknown(path []string, names []string) {
	k := path[len(path)-1]
	where := "the top level"
	if len(path) > 1 {
		where = "[" + dotted(path[:len(path)-1]) + "]"
	}
	if what, ok := plannedKeys[schemaPath(path)]; ok {
		d.errs.add(d.keyPos(path), "unknown key %q in %s: %s is not implemented in this version", k, where, what)
		return
	}
	msg := fmt.Sprintf("unknown key %q in %s", k, where)
	if s := nearestName(k, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	} else if len(names) > 0 {
		msg += " (known keys: " + strings.Join(names, ", ") + ")"
	}
	d.errs.add(d.keyPos(path), "%s", msg)
}

// nearestName returns the known name closest to k by edit distance (at most 2), or "".
func nearestName(k string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if dd := suggest.Distance(k, n); dd < bestD {
			best, bestD = n, dd
		}
	}
	return best
}

// typeError reports a value of the wrong TOML type. example, when not "", is the value
// written as the key wants it ("30s" for drain_timeout = 30), so that the message says what
// to write instead.
func (d *decoder) typeError(path []string, want, example string, v any) {
	if example != "" {
		d.errs.addType(d.valPos(path), "%s must be %s such as %s, not %s", dotted(path), want, example, tomlType(v))
		return
	}
	d.errs.addType(d.valPos(path), "%s must be %s, not %s", dotted(path), want, tomlType(v))
}

// tomlLiteral writes a scalar as a TOML value, or "" for an array, a table or a date/time.
// Go's quoting suits TOML basic strings: its escapes are TOML's, but for \x, which it uses
// only for bytes that are not UTF-8, and a decoded TOML string has none.
func tomlLiteral(v any) string {
	switch x := v.(type) {
	case string:
		return quote(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		return ""
	}
}

// elementExample is v, a scalar given as an element of an array of tables of type t, written
// as a table holding it under t's first key: { url = "http://h" } for a server.
func elementExample(t reflect.Type, v any) string {
	lit := tomlLiteral(v)
	if lit == "" {
		return ""
	}
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("toml"); tag != "" && tag != "-" && tag != ",remain" {
			return "{ " + tag + " = " + lit + " }"
		}
	}
	return ""
}

// durationExample is v, a value given for a duration key, written as a duration string.
func durationExample(v any) string {
	switch x := v.(type) {
	case int64:
		if x > 0 {
			return quote(strconv.FormatInt(x, 10) + "s")
		}
	case float64:
		if x > 0 && !math.IsInf(x, 0) {
			return quote(strconv.FormatFloat(x, 'f', -1, 64) + "s")
		}
	}
	return `"30s"`
}

// intExample is v written as an integer, when it is one in another type: "100" or 100.0.
func intExample(v any) string {
	switch x := v.(type) {
	case string:
		if n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(x), "_", ""), 10, 64); err == nil {
			return strconv.FormatInt(n, 10)
		}
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10)
		}
	}
	return ""
}

// sizeUnits are the multiples of a byte that a size written as a string may end in: the IEC
// binary units, short or whole, and nginx's single letters, which mean the same. "KB" and its
// kin are left out: they mean 1000 to some and 1024 to others.
var sizeUnits = map[string]int64{
	"B": 1,
	"k": 1 << 10, "K": 1 << 10, "Ki": 1 << 10, "KiB": 1 << 10,
	"m": 1 << 20, "M": 1 << 20, "Mi": 1 << 20, "MiB": 1 << 20,
	"g": 1 << 30, "G": 1 << 30, "Gi": 1 << 30, "GiB": 1 << 30,
}

// sizeExample is v, a string giving a size with a unit ("16KiB", "16 MiB", "1.5M", "64k"),
// written as the integer count of bytes it means, or "" when v is no such string or the count
// is not whole.
func sizeExample(v any) string {
	x, ok := v.(string)
	if !ok {
		return ""
	}
	x = strings.TrimSpace(x)
	i := strings.IndexFunc(x, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '_' })
	if i <= 0 {
		return ""
	}
	unit, ok := sizeUnits[strings.TrimSpace(x[i:])]
	if !ok {
		return ""
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(x[:i], "_", ""), 64)
	if err != nil || f*float64(unit) != math.Trunc(f*float64(unit)) || f*float64(unit) >= 1<<53 {
		return ""
	}
	return strconv.FormatInt(int64(f*float64(unit)), 10)
}

// isSizeKey reports whether the integer key named k counts bytes (max_body_bytes, a
// body-limit's max_bytes), so that a size written with a unit is answered with its count.
func isSizeKey(k string) bool {
	return strings.HasSuffix(k, "bytes")
}

// numberExample is v written as a number, when it is a string holding one.
func numberExample(v any) string {
	if x, ok := v.(string); ok {
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	return ""
}

// boolExample is v written as a boolean, when it spells one in another type.
func boolExample(v any) string {
	switch x := v.(type) {
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "yes", "on", "1":
			return "true"
		case "false", "no", "off", "0":
			return "false"
		}
	case int64:
		if x == 0 || x == 1 {
			return strconv.FormatBool(x == 1)
		}
	}
	return ""
}

// stringExample is v, a scalar, written as a string.
func stringExample(v any) string {
	switch v.(type) {
	case int64, float64, bool:
		return quote(tomlLiteral(v))
	}
	return ""
}

// arrayExample is v, given where an array is wanted, written as an array of one element.
func arrayExample(v any) string {
	if m, ok := v.(map[string]any); ok {
		parts := make([]string, 0, len(m))
		for _, k := range sortedKeys(m) {
			lit := tomlLiteral(m[k])
			if lit == "" {
				return "[{ … }]"
			}
			parts = append(parts, k+" = "+lit)
		}
		return "[{ " + strings.Join(parts, ", ") + " }]"
	}
	if lit := tomlLiteral(v); lit != "" {
		return "[" + lit + "]"
	}
	return ""
}

// str decodes a string value and expands ${VAR} in it.
func (d *decoder) str(path []string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		if q := stringExample(v); q != "" {
			// The value quoted is how to write it as a string, not a value the key takes
			// (address = 8080 quoted is still no address): say which of the two it is.
			d.errs.addType(d.valPos(path), "%s must be a string, not %s (a TOML string is quoted: %s)", dotted(path), tomlType(v), q)
			return "", false
		}
		d.typeError(path, "a string", "", v)
		return "", false
	}
	if !strings.Contains(s, "${") {
		return s, true
	}
	var vars []envVar
	out, msg := expandEnv(s, func(name string) (string, bool) {
		v, ok := d.lookup(name)
		if ok {
			vars = append(vars, envVar{name: name, value: v})
		}
		return v, ok
	})
	if msg != "" {
		d.errs.add(d.valPos(path), "%s: %s", dotted(path), msg)
		return "", false
	}
	d.cfg.expanded[joinPath(path)] = expansion{written: s, value: out, vars: vars}
	return out, true
}

// setDefaults calls the setDefaults method of *T when T has one.
func setDefaults(p reflect.Value) {
	if s, ok := p.Interface().(interface{ setDefaults() }); ok {
		s.setDefaults()
	}
}

// overflowsDuration reports whether s is well formed as a duration but too long for one
// (time.ParseDuration refuses both with the same error): every number in it a decimal one,
// every unit one it knows.
func overflowsDuration(s string) bool {
	s = strings.TrimPrefix(strings.TrimSpace(s), "+")
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		j := i
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		if i == 0 || j == i {
			return false
		}
		switch s[i:j] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[j:]
	}
	return true
}

func (d *decoder) decodeValue(path []string, v any, rv reflect.Value) {
	steps.Add(len(path) + 1)
	t := rv.Type()
	if t == durationType {
		if _, ok := v.(string); !ok {
			// A bare number is the commonest slip: say which string to write instead.
			d.typeError(path, "a duration string", durationExample(v), v)
			return
		}
		s, ok := d.str(path, v)
		if !ok {
			return
		}
		dur, err := time.ParseDuration(s)
		if err != nil || dur <= 0 {
			want := `want a positive duration such as "500ms", "15s" or "5m"`
			if f, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil {
				want = "a duration needs a unit: write " + durationExample(f)
			} else if err != nil && strings.Contains(err.Error(), "invalid duration") && overflowsDuration(s) {
				want = "too long: a duration is at most 2562047h47m16s, about 292 years"
			}
			d.errs.add(d.valPos(path), "%s: invalid duration %q (%s)", dotted(path), d.cfg.shown(s, path...), want)
			return
		}
		rv.SetInt(int64(dur))
		return
	}
	switch t.Kind() {
	case reflect.String:
		if s, ok := d.str(path, v); ok {
			rv.SetString(s)
		}
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			if ex := boolExample(v); ex != "" {
				d.typeError(path, "a boolean", ex, v)
			} else {
				d.typeError(path, "a boolean (true or false)", "", v)
			}
			return
		}
		rv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			// The key's range, so that 1e12 for a key that takes 1024..1048576 says so rather
			// than suggesting 1000000000000, which would be refused in turn.
			r := rangeOf(path)
			d.typeError(path, r.want(), r.example(v, isSizeKey(path[len(path)-1])), v)
			return
		}
		if t.Kind() == reflect.Int && (n > math.MaxInt || n < math.MinInt) {
			d.errs.add(d.valPos(path), "%s: %d is out of range", dotted(path), n)
			return
		}
		rv.SetInt(n)
	case reflect.Float64:
		switch n := v.(type) {
		case float64:
			rv.SetFloat(n)
		case int64:
			rv.SetFloat(float64(n)) // 1 for 1.0: TOML integers are numbers too
		default:
			d.typeError(path, "a number", numberExample(v), v)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			d.typeError(path, "an array", arrayExample(v), v)
			return
		}
		out := reflect.MakeSlice(t, 0, len(arr))
		for i, e := range arr {
			ep := child(path, strconv.Itoa(i))
			ev := reflect.New(t.Elem())
			if t.Elem().Kind() == reflect.Struct {
				m, ok := e.(map[string]any)
				if !ok {
					d.typeError(ep, "a table", elementExample(t.Elem(), e), e)
					continue
				}
				setDefaults(ev)
				d.decodeStruct(ep, m, ev.Elem())
			} else {
				d.decodeValue(ep, e, ev.Elem())
			}
			out = reflect.Append(out, ev.Elem())
		}
		rv.Set(out)
	case reflect.Pointer:
		m, ok := v.(map[string]any)
		if !ok {
			d.typeError(path, "a table (["+dotted(path)+"] or { … })", "", v)
			return
		}
		p := reflect.New(t.Elem())
		setDefaults(p)
		d.decodeStruct(path, m, p.Elem())
		rv.Set(p)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			d.typeError(path, "a table (["+dotted(path)+"] or { … })", "", v)
			return
		}
		d.decodeStruct(path, m, rv)
	case reflect.Map: // map[string]*T: named tables
		m, ok := v.(map[string]any)
		if !ok {
			d.typeError(path, "a table of named tables (["+dotted(path)+".<name>])", "", v)
			return
		}
		if rv.IsNil() {
			rv.Set(reflect.MakeMap(t))
		}
		for _, name := range sortedKeys(m) {
			np := child(path, name)
			tm, ok := m[name].(map[string]any)
			if !ok {
				d.errs.add(d.keyPos(np), "%s must be a table ([%s]), not %s", dotted(np), dotted(np), tomlType(m[name]))
				continue
			}
			p := reflect.New(t.Elem().Elem())
			setDefaults(p)
			if nf := p.Elem().FieldByName("Name"); nf.IsValid() {
				nf.SetString(name)
			}
			d.decodeStruct(np, tm, p.Elem())
			rv.SetMapIndex(reflect.ValueOf(name), p)
		}
	default:
		panic("config: unsupported field type " + t.String())
	}
}

// raw returns v with ${VAR} expanded in every string, for Middleware.Options.
func (d *decoder) raw(path []string, v any) any {
	switch x := v.(type) {
	case string:
		s, _ := d.str(path, x)
		return s
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = d.raw(child(path, strconv.Itoa(i)), e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range sortedKeys(x) {
			out[k] = d.raw(child(path, k), x[k])
		}
		return out
	default:
		return v
	}
}
