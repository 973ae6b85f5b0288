package config

import (
	"net/url"
	"strings"

	"github.com/sluice-gw/sluice/core/router"
)

// Whatever shows the configuration (the admin API's GET /api/gateway/config) shows a value
// that may be a credential as Redacted, keeping its key, when it holds text of its own; one
// made of ${NAME} references is shown as written, as every value from the environment is.
// The test is by name, so that a key, header field or flag added later is covered without a
// list to keep up: a value is a secret when the name it is given under looks like a
// credential's (SecretName), and wherever it is, the user information of a URL, a query
// parameter of such a name and a field value with an authentication scheme are.

// Redacted is what RedactedDocument shows in place of a value that may be a credential.
const Redacted = "<redacted>"

// secretWords are the parts of a name that say its value may be a credential: api_key,
// X-Api-Key, Ocp-Apim-Subscription-Key, token, X-Auth-Token, client_secret, password,
// Authorization, Proxy-Authorization, Cookie, Set-Cookie, X-Session-Id, credentials.
var secretWords = []string{"key", "token", "secret", "password", "passwd", "passphrase", "credential", "auth", "cookie", "session"}

// pointerSuffixes end names whose values point at a secret without holding it: an
// environment variable's name, a file's path, a digest.
var pointerSuffixes = []string{"_env", "_file", "_path", "_sha256"}

// SecretName reports whether a value given under name may be a credential: name is a key of
// the configuration, a header field name, an environment variable's name or a command-line
// flag, compared case-insensitively with '-' as '_'. It is when name contains one of
// secretWords or is "value" (the HMAC secret of a jwt middleware), unless it ends in one of
// pointerSuffixes (token_env, key_file, api_key_sha256).
func SecretName(name string) bool {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimLeft(name, "-")), "-", "_")
	for _, s := range pointerSuffixes {
		if strings.HasSuffix(n, s) {
			return false
		}
	}
	if n == "value" {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// authSchemes are HTTP authentication schemes (the IANA registry's common ones) whose
// credentials follow them in a field value: "Bearer sk-…" is a secret under any field name.
var authSchemes = []string{"basic", "bearer", "digest", "negotiate", "token", "apikey", "aws4-hmac-sha256"}

// secretValue reports whether s, given under a name SecretName does not flag, still holds a
// credential as a whole: a field value of an authentication scheme with its credentials.
func secretValue(s string) bool {
	sp := strings.IndexAny(s, " \t")
	if sp <= 0 || strings.TrimSpace(s[sp:]) == "" {
		return false
	}
	scheme := strings.ToLower(s[:sp])
	for _, a := range authSchemes {
		if scheme == a {
			return true
		}
	}
	return false
}

// RedactURL returns s with the credentials of a URL in it masked as Redacted: its user
// information, and the values of query parameters whose names SecretName flags; s as it is
// when it is not such a URL or holds none.
func RedactURL(s string) string { return redactURL(s) }

// RedactField returns value, an HTTP field's value given under the field name, as a report
// that may be shared shows it: value when neither name (SecretName) nor value (an
// authentication scheme with its credentials) says it may be a credential; else
// "<scheme> <redacted>" for a value that opens with an authentication scheme (so that a
// reader sees which kind of credential to give again), and Redacted for any other.
func RedactField(name, value string) string {
	if secretValue(value) {
		sp := strings.IndexAny(value, " \t")
		return value[:sp] + " " + Redacted
	}
	if SecretName(name) && strings.TrimSpace(value) != "" {
		return Redacted
	}
	return value
}

// redactString returns s, a string as written, as shown under name: Redacted when it may be
// a credential, else s with the credentials of a URL in it masked.
func redactString(name, s string) string {
	if (SecretName(name) || secretValue(s)) && !noLiteral(s) {
		return Redacted
	}
	return redactURL(s)
}

// noLiteral reports whether s, a string as written, holds no secret of its own: it is empty,
// or made of ${NAME} references (which are shown as written, never with their values) and at
// most an authentication scheme ("Bearer ${TOKEN}").
func noLiteral(s string) bool {
	var rest strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "${") {
			if end := strings.IndexByte(s[i+2:], '}'); end >= 0 && isEnvName(s[i+2:i+2+end]) {
				i += 3 + end
				continue
			}
		}
		if strings.HasPrefix(s[i:], "$${") {
			rest.WriteString("${")
			i += 3
			continue
		}
		rest.WriteByte(s[i])
		i++
	}
	lit := strings.ToLower(strings.TrimSpace(rest.String()))
	if lit == "" {
		return true
	}
	for _, a := range authSchemes {
		if lit == a && len(rest.String()) < len(s) {
			return true
		}
	}
	return false
}

// redactURL returns s with the user information of an absolute URL and the values of its
// query parameters of secret names masked (https://<redacted>@idp.example/jwks,
// https://idp.example/jwks?tenant=a&api_key=<redacted>), and those of a path's query
// (/health?token=<redacted>); s itself when it is neither or holds no such part.
func redactURL(s string) string {
	if strings.HasPrefix(s, "/") {
		if p, q, ok := strings.Cut(s, "?"); ok {
			if rq, changed := redactQuery(q); changed {
				return p + "?" + rq
			}
		}
		return s
	}
	if i := strings.Index(s, "://"); i <= 0 {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil && tokenCutByDelimiter(s) {
		return redactUserinfo(s)
	}
	if u.Scheme == "" || u.Host == "" && u.User == nil {
		return s
	}
	rq, changed := redactQuery(u.RawQuery)
	u.RawQuery = rq
	if u.User != nil {
		// A user name alone may be a token (https://<token>@host): the whole of it goes.
		u.User = url.User(Redacted)
		changed = true
	}
	if !changed {
		return s
	}
	// url.URL.String escapes the mask in the user information; it is shown as written.
	return strings.Replace(u.String(), url.PathEscape(Redacted), Redacted, 1)
}

// tokenCutByDelimiter reports whether s, a URL that parsed without user information, holds
// an '@' after a '#' or '?' that ends its authority: user information whose unencoded '#' or
// '?' made the parser read its start as the host and the rest, '/' included, as a fragment
// or query (https://tok#en@host, https://tok#e/n@host). An authority ended by '/' is
// followed by a path, whose '@' is the path's.
func tokenCutByDelimiter(s string) bool {
	i := strings.Index(s, "://") + len("://")
	j := strings.IndexAny(s[i:], "/?#")
	return j >= 0 && s[i+j] != '/' && strings.IndexByte(s[i+j:], '@') >= 0
}

// redactUserinfo returns s, text with "://" that does not parse as a URL (a host with a
// placeholder such as {pod_ip}, a bad port, a password with an unencoded '#'), with its user
// information masked (userinfoSpan); s itself when it has none.
func redactUserinfo(s string) string {
	i, at, ok := userinfoSpan(s)
	if !ok {
		return s
	}
	return s[:i] + Redacted + s[at:]
}

// userinfoSpan returns where the user information of s, text with "://" that need not parse
// as a URL, lies: s[i:at], before the '@' at s[at]; ok is false when s has none. It runs to
// the last '@' before the first '/', '?' or '#' that follows an '@': a '#', '?' or '/'
// written unencoded in a password, as people write them, is taken as part of it, not as the
// end of the authority (which would leave the password's end shown). An '@' in the path or
// query of text that does not parse masks the text before it too: more than the credentials,
// never less.
func userinfoSpan(s string) (i, at int, ok bool) {
	i = strings.Index(s, "://")
	if i < 0 {
		return 0, 0, false
	}
	i += len("://")
	first := strings.IndexByte(s[i:], '@')
	if first < 0 {
		return 0, 0, false
	}
	end := len(s)
	if j := strings.IndexAny(s[i+first:], "/?#"); j >= 0 {
		end = i + first + j
	}
	return i, i + strings.LastIndexByte(s[i:end], '@'), true
}

// redactQuery returns q, a URL's query, with the values of its parameters of secret names
// masked, and whether it masked any.
func redactQuery(q string) (string, bool) {
	if q == "" {
		return q, false
	}
	changed := false
	var b strings.Builder
	// Parameters are split at '&' and at ';', which some servers still take as a separator
	// (the HTML 4 recommendation), so that a credential after either is masked.
	for q != "" {
		end := strings.IndexAny(q, "&;")
		if end < 0 {
			end = len(q)
		}
		p := q[:end]
		k, v, ok := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if ok && SecretName(name) && !noLiteral(v) {
			p = k + "=" + Redacted
			changed = true
		}
		b.WriteString(p)
		if end < len(q) {
			b.WriteByte(q[end])
			end++
		}
		q = q[end:]
	}
	return b.String(), changed
}

// redactArgs returns args as shown: a program's arguments or a list of NAME=value
// assignments (an environment). The value of an assignment or "--flag=value" whose name
// SecretName flags is masked, and so is the argument after such a flag written alone
// ("--api-key", "sk-…") unless it is itself a flag.
func redactArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			out[i] = a
			continue
		}
		if i > 0 {
			if prev, ok := args[i-1].(string); ok && strings.HasPrefix(prev, "-") && !strings.Contains(prev, "=") &&
				SecretName(prev) && !strings.HasPrefix(s, "-") {
				out[i] = Redacted
				continue
			}
		}
		if name, v, ok := strings.Cut(s, "="); ok && name != "" && !strings.ContainsAny(name, " \t/") {
			out[i] = name + "=" + redactString(name, v)
			continue
		}
		out[i] = redactString("", s)
	}
	return out
}

// redactTree returns v, a value of the document given under name, with every string in it
// shown as redactString shows it under that name (a table's strings under their own keys).
func redactTree(name string, v any) any {
	switch x := v.(type) {
	case string:
		return redactString(name, x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactTree(name, e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if SecretName(name) {
				// Every string of a table under a secret name is one.
				out[k] = redactTree(name, e)
			} else {
				out[k] = redactTree(k, e)
			}
		}
		return out
	default:
		return v
	}
}

// RedactRule returns rule as shown: with the value of a Header, HeaderRegexp, Query or
// QueryRegexp matcher masked where the field's name or the value is a secret's, as in
// Header(`X-Api-Key`, `<redacted>`).
func RedactRule(rule string) string {
	return router.MaskValues(rule, func(name, value string) bool {
		return (SecretName(name) || secretValue(value)) && !noLiteral(value)
	}, Redacted)
}
