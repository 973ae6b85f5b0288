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
	value   string   // the value expanded
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
	s := c.shown(v, path...)
	if !strings.Contains(s, "://") && strings.Contains(s, "@") {
		// Written without its scheme (an error says to add it): its user information is
		// masked all the same.
		if r := redactURL("http://" + s); r != "http://"+s {
			return strings.TrimPrefix(r, "http://")
		}
	}
	return redactURL(s)
}

// MaskEnv returns s with every value that came from a variable substituted into a string at
// keyPath, or anywhere under it, replaced by its ${NAME} reference: the value of the variable,
// the string it was substituted into (by the string as written), and for a URL its host:port
// and its host, which errors about reaching it quote apart from the URL. It is for text
// derived from such values that Written cannot give back — the message of an error found in
// a rule, a URL or a file named by the configuration. A value shorter than maskAnywhereBytes
// is replaced only where it stands as a whole token of s, not inside a longer word, number
// or dotted name (maskToken): a short value (a port, a letter) would otherwise garble
// unrelated text and so point at itself; a value written glued to other text is masked
// within the string it is part of. A longer value (a key, a token) is replaced wherever it
// occurs. With no keyPath it masks every variable the configuration used. Empty values are
// left alone.
func (c *Config) MaskEnv(s string, keyPath ...string) string {
	prefix := joinPath(keyPath)
	seen := map[string]bool{}
	var pairs []envVar // value: what s may hold; name: what replaces it
	for p, x := range c.expanded {
		if len(keyPath) > 0 && p != prefix && !strings.HasPrefix(p, prefix+pathSep) {
			continue
		}
		used := false
		for _, v := range x.vars {
			if v.value == "" {
				continue
			}
			used = true
			if seen[v.name] {
				continue
			}
			seen[v.name] = true
			ref := "${" + v.name + "}"
			pairs = append(pairs, envVar{name: ref, value: v.value})
			// A URL's address is quoted apart from the URL (a dial's "dial tcp HOST:PORT", a
			// lookup's host): it names the variable too.
			for _, part := range urlAddress(v.value) {
				pairs = append(pairs, envVar{name: ref, value: part})
			}
		}
		if used {
			pairs = append(pairs, envVar{name: x.written, value: x.value})
			pairs = append(pairs, writtenAddress(x.value, x.written)...)
		}
	}
	if len(pairs) == 0 {
		return s
	}
	// The same values inside a %q-quoted fragment of a message.
	for _, v := range pairs[:len(pairs):len(pairs)] {
		if q := strconv.Quote(v.value); q[1:len(q)-1] != v.value {
			pairs = append(pairs, envVar{name: v.name, value: q[1 : len(q)-1]})
		}
	}
	// Longest first: the longer value must win where one contains another.
	sort.Slice(pairs, func(i, j int) bool {
		if len(pairs[i].value) != len(pairs[j].value) {
			return len(pairs[i].value) > len(pairs[j].value)
		}
		return pairs[i].name < pairs[j].name
	})
	return maskTokens(s, pairs)
}

// maskAnywhereBytes is the length from which MaskEnv masks a value wherever it occurs, not only
// as a whole token: a secret's length (an API key, a token), which text the value did not
// produce holds by chance no more than the value as a whole token, while a context the token
// rule does not know (an encoding, a value glued to another in a message) could show it.
const maskAnywhereBytes = 16

// maskTokens returns s with each value of pairs replaced by its name where it stands as a
// whole token (maskToken), or anywhere when it is maskAnywhereBytes long or longer, the
// first pair that does winning at each position.
func maskTokens(s string, pairs []envVar) string {
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		n := 0
		for _, p := range pairs {
			if strings.HasPrefix(s[i:], p.value) && (len(p.value) >= maskAnywhereBytes || maskToken(s, i, i+len(p.value))) {
				b.WriteString(s[done:i])
				b.WriteString(p.name)
				n = len(p.value)
				break
			}
		}
		if n == 0 {
			i++
			continue
		}
		i += n
		done = i
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// maskToken reports whether s[i:j] stands as a whole token of s: where it begins or ends with a
// word byte (a letter, digit, '_' or a byte of a multi-byte character), the byte beside it is
// not one, nor a '.' or '-' that joins a word byte to it (as in 10.0.0.80 or gpu-7, where 80
// and 7 are parts of another name). A percent-escape before it (a URL's "%3D" for '=') is a
// separator, not part of a word.
func maskToken(s string, i, j int) bool {
	if wordByte(s[i]) && i > 0 && !(i > 2 && s[i-3] == '%' && hexByte(s[i-2]) && hexByte(s[i-1])) {
		if c := s[i-1]; wordByte(c) || (c == '.' || c == '-') && i > 1 && wordByte(s[i-2]) {
			return false
		}
	}
	if wordByte(s[j-1]) && j < len(s) {
		if c := s[j]; wordByte(c) || (c == '.' || c == '-') && j+1 < len(s) && wordByte(s[j+1]) {
			return false
		}
	}
	return true
}

func hexByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func wordByte(c byte) bool {
	return c >= 0x80 || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// writtenAddress pairs the host:port and the host of value, a URL expanded from written, with
// the same parts of written, when a variable was substituted into them: "gpu7.internal" with
// "${HOST}${N}.internal" for http://${HOST}${N}.internal:8000.
func writtenAddress(value, written string) []envVar {
	parts := urlAddress(value)
	if len(parts) == 0 {
		return nil
	}
	_, auth, ok := strings.Cut(written, "://")
	if !ok {
		return nil
	}
	if k := strings.IndexAny(auth, "/?#"); k >= 0 {
		auth = auth[:k]
	}
	if k := strings.LastIndexByte(auth, '@'); k >= 0 {
		auth = auth[k+1:]
	}
	if !strings.Contains(auth, "${") {
		return nil // the address is as written: no variable in it
	}
	out := []envVar{{name: auth, value: parts[0]}}
	if len(parts) > 1 {
		host := auth
		if k := strings.LastIndexByte(auth, ':'); k >= 0 && !strings.HasSuffix(auth, "]") {
			host = auth[:k]
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		out = append(out, envVar{name: host, value: parts[1]})
	}
	return out
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
