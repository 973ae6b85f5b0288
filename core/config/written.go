package config

import (
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A value read from the environment may be a secret (an API key in a rule, a password in a
// middleware option, a private host in a URL), so whatever shows the configuration — the
// admin API, metric labels, error messages — shows such a string as written in the file,
// with its ${NAME} references. The decoder records that text for every string value that
// had a "${".

// expansion is a string value written with "${" in the file.
type expansion struct {
	written string   // the value as written, before expansion
	vars    []envVar // the variables substituted into it
}

type envVar struct{ name, value string }

// Written returns the string value at keyPath as written in the file, before ${NAME}
// expansion, and true, when it was written with a "${" (a variable reference or a "$${"
// escape); otherwise "", false. Use it wherever a configured string is shown, so that a
// value read from the environment never is:
//
//	rule := cfg.Routers["api"].Rule
//	if w, ok := cfg.Written("routers", "api", "rule"); ok {
//		rule = w
//	}
func (c *Config) Written(keyPath ...string) (string, bool) {
	x, ok := c.expanded[joinPath(keyPath)]
	return x.written, ok
}

// shown is v, the decoded string at path, as messages and displays quote it.
func (c *Config) shown(v string, path ...string) string {
	if w, ok := c.Written(path...); ok {
		return w
	}
	return v
}

// shownURL is shown for a URL, with its credentials masked (RedactURL): an error about a URL
// goes to the log and to the caller of a reload, who is not shown the configuration's
// credentials otherwise.
func (c *Config) shownURL(v string, path ...string) string {
	return redactURL(c.shown(v, path...))
}

// MaskEnv returns s with the value of every environment variable that was substituted into
// a string at keyPath, or anywhere under it, replaced by its ${NAME} reference. It is for
// text derived from such values that Written cannot give back — the message of an error
// found in a rule, a URL or a file named by the configuration. A value that is a URL with a
// host is masked in its host:port and its host too, which errors about reaching it quote
// apart from the URL. With no keyPath it masks every variable the configuration used. Empty
// values are left alone.
func (c *Config) MaskEnv(s string, keyPath ...string) string {
	prefix := joinPath(keyPath)
	seen := map[string]bool{}
	var vars []envVar
	for p, x := range c.expanded {
		if len(keyPath) > 0 && p != prefix && !strings.HasPrefix(p, prefix+pathSep) {
			continue
		}
		for _, v := range x.vars {
			if v.value != "" && !seen[v.name] {
				seen[v.name] = true
				vars = append(vars, v)
			}
		}
	}
	if len(vars) == 0 {
		return s
	}
	// A URL's address is quoted apart from the URL (a dial's "dial tcp HOST:PORT", a lookup's
	// host): it names the variable too.
	for _, v := range vars[:len(vars):len(vars)] {
		for _, part := range urlAddress(v.value) {
			vars = append(vars, envVar{name: v.name, value: part})
		}
	}
	// Longest first: a Replacer tries its pairs in order at each position, and the longer
	// value must win where one variable's value contains another's.
	sort.Slice(vars, func(i, j int) bool {
		if len(vars[i].value) != len(vars[j].value) {
			return len(vars[i].value) > len(vars[j].value)
		}
		return vars[i].name < vars[j].name
	})
	pairs := make([]string, 0, 4*len(vars))
	for _, v := range vars {
		ref := "${" + v.name + "}"
		pairs = append(pairs, v.value, ref)
		// The same value inside a %q-quoted fragment of a message.
		if q := strconv.Quote(v.value); q[1:len(q)-1] != v.value {
			pairs = append(pairs, q[1:len(q)-1], ref)
		}
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// urlAddress returns the host:port and the host of s when s is a URL with a host, as errors
// about reaching it quote them; nil otherwise.
func urlAddress(s string) []string {
	if !strings.Contains(s, "://") {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil
	}
	parts := []string{u.Host}
	if h := u.Hostname(); h != "" && h != u.Host {
		parts = append(parts, h)
	}
	return parts
}

// Document returns the configuration in force as a tree shaped like a TOML file of it: the
// TOML key names, defaults and computed defaults filled in, durations as Go duration
// strings ("1m30s"), middleware options inline in their table, and every string value that
// was written with a "${" as written (see Written), so that the tree holds no value read
// from the environment. Admin.Token, not a TOML key, is left out. Values are string, int64,
// bool, []any and map[string]any, plus what Middleware.Options holds. It holds the secrets
// written in the files: show RedactedDocument.
func (c *Config) Document() map[string]any {
	return c.docTable(nil, reflect.ValueOf(c).Elem(), docAsWritten)
}

// RedactedDocument is Document with every string that may be a credential shown as Redacted,
// its key kept (secrets.go): what the admin API shows. Numbers and booleans are shown.
func (c *Config) RedactedDocument() map[string]any {
	return c.docTable(nil, reflect.ValueOf(c).Elem(), docRedacted)
}

// docMode is how a document shows the strings of the configuration.
type docMode uint8

const (
	docAsWritten docMode = iota // as written (Document)
	docRedacted                 // with the secrets redacted (RedactedDocument)
	docAllSecret                // under a key SecretName flags: every string is a secret
)

// A struct field's `secrets` tag says how RedactedDocument finds the secrets in a value that
// is not one as a whole: "args" for a list of program arguments or NAME=value assignments
// (redactArgs), "rule" for a router rule (RedactRule).
const secretsTag = "secrets"

func (c *Config) docTable(path []string, rv reflect.Value, mode docMode) map[string]any {
	out := map[string]any{}
	t := rv.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		switch {
		case !f.IsExported() || tag == "-" || tag == "":
		case tag == ",remain":
			opts, _ := rv.Field(i).Interface().(map[string]any)
			// What a rate limit counts by is named key, and is no secret.
			rateLimit := rv.FieldByName("Type").String() == MiddlewareRateLimit
			for k, v := range opts {
				x := c.docRaw(child(path, k), v)
				switch {
				case mode == docAllSecret:
					x = redactAll(x)
				case mode == docRedacted && !(rateLimit && k == "key"):
					x = redactTree(k, x)
				}
				out[k] = x
			}
		default:
			fmode := mode
			if mode == docRedacted && SecretName(tag) {
				fmode = docAllSecret
			}
			if v, ok := c.docValue(child(path, tag), rv.Field(i), fmode); ok {
				out[tag] = redactField(f, tag, v, fmode)
			}
		}
	}
	return out
}

// redactField returns v, the value of field f (TOML key tag) as docValue rendered it, as
// mode shows it. Tables in v were rendered in that mode already.
func redactField(f reflect.StructField, tag string, v any, mode docMode) any {
	switch mode {
	case docAsWritten:
		return v
	case docAllSecret:
		return redactAll(v)
	}
	switch x := v.(type) {
	case string:
		if f.Tag.Get(secretsTag) == "rule" {
			return RedactRule(x)
		}
		return redactString(tag, x)
	case []any:
		if f.Tag.Get(secretsTag) == "args" {
			return redactArgs(x)
		}
		out := make([]any, len(x))
		for i, e := range x {
			if s, ok := e.(string); ok {
				e = redactString(tag, s)
			}
			out[i] = e
		}
		return out
	}
	return v
}

// redactAll returns v with every string in it, at any depth, Redacted, but for those that
// hold no secret of their own (noLiteral).
func redactAll(v any) any {
	switch x := v.(type) {
	case string:
		if noLiteral(x) {
			return x
		}
		return Redacted
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactAll(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = redactAll(e)
		}
		return out
	}
	return v
}

// docValue renders one schema field; false for a nil table (a key that is absent).
func (c *Config) docValue(path []string, rv reflect.Value, mode docMode) (any, bool) {
	if rv.Type() == durationType {
		if w, ok := c.Written(path...); ok {
			return w, true
		}
		if rv.Int() == 0 {
			return nil, false // a deadline left unset (none): written durations are positive
		}
		return time.Duration(rv.Int()).String(), true
	}
	switch rv.Kind() {
	case reflect.String:
		return c.shown(rv.String(), path...), true
	case reflect.Bool:
		return rv.Bool(), true
	case reflect.Int, reflect.Int64:
		return rv.Int(), true
	case reflect.Float64:
		return rv.Float(), true
	case reflect.Slice:
		out := make([]any, 0, rv.Len())
		for i := 0; i < rv.Len(); i++ {
			v, _ := c.docValue(child(path, strconv.Itoa(i)), rv.Index(i), mode)
			out = append(out, v)
		}
		return out, true
	case reflect.Pointer:
		if rv.IsNil() {
			return nil, false
		}
		return c.docValue(path, rv.Elem(), mode)
	case reflect.Struct:
		return c.docTable(path, rv, mode), true
	case reflect.Map: // map[string]*T: named tables
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			name := it.Key().String()
			if v, ok := c.docValue(child(path, name), it.Value(), mode); ok {
				out[name] = v
			}
		}
		return out, true
	default:
		panic("config: unsupported field type " + rv.Type().String())
	}
}

// docRaw renders a value of Middleware.Options.
func (c *Config) docRaw(path []string, v any) any {
	switch x := v.(type) {
	case string:
		return c.shown(x, path...)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = c.docRaw(child(path, strconv.Itoa(i)), e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = c.docRaw(child(path, k), e)
		}
		return out
	default:
		return v
	}
}
