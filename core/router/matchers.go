package router

import (
	"bytes"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-gw/sluice/internal/steps"
	"github.com/sluice-gw/sluice/internal/suggest"
)

// matcherKind identifies one matcher function of the rule language.
type matcherKind uint8

const (
	mHost matcherKind = iota
	mPath
	mPathPrefix
	mMethod
	mHeader
	mHeaderRegexp
	mQuery
	mHostRegexp
	mPathRegexp
	mQueryRegexp
)

// matcherSpec describes how a matcher is called in rule text.
type matcherSpec struct {
	name    string // canonical spelling, as in Traefik
	kind    matcherKind
	minArgs int
	maxArgs int // 0 means up to MaxMatcherArgs
	cost    int // relative evaluation cost; cheaper operands of && and || run first
}

// matcherSpecs is the matcher table. Names are looked up case-insensitively.
var matcherSpecs = [...]matcherSpec{
	{name: "Host", kind: mHost, minArgs: 1, cost: 2},
	{name: "Path", kind: mPath, minArgs: 1, cost: 1},
	{name: "PathPrefix", kind: mPathPrefix, minArgs: 1, cost: 1},
	{name: "Method", kind: mMethod, minArgs: 1, cost: 0},
	{name: "Header", kind: mHeader, minArgs: 2, maxArgs: 2, cost: 3},
	{name: "HeaderRegexp", kind: mHeaderRegexp, minArgs: 2, maxArgs: 2, cost: 5},
	{name: "Query", kind: mQuery, minArgs: 1, maxArgs: 2, cost: 3},
	{name: "HostRegexp", kind: mHostRegexp, minArgs: 1, maxArgs: 1, cost: 5},
	{name: "PathRegexp", kind: mPathRegexp, minArgs: 1, maxArgs: 1, cost: 5},
	{name: "QueryRegexp", kind: mQueryRegexp, minArgs: 2, maxArgs: 2, cost: 6},
}

func lookupMatcher(name string) *matcherSpec {
	for i := range matcherSpecs {
		if strings.EqualFold(matcherSpecs[i].name, name) {
			return &matcherSpecs[i]
		}
	}
	return nil
}

// nearestMatcher is " (did you mean NAME?)" for the matcher within two edits of name (case
// aside, as matcher names are matched), else "".
func nearestMatcher(name string) string {
	names := make([]string, len(matcherSpecs))
	for i := range matcherSpecs {
		names[i] = strings.ToLower(matcherSpecs[i].name)
	}
	if i := slices.Index(names, suggest.Nearest(strings.ToLower(name), names...)); i >= 0 {
		return " (did you mean " + matcherSpecs[i].name + "?)"
	}
	return ""
}

func matcherNames() string {
	var b strings.Builder
	for i := range matcherSpecs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(matcherSpecs[i].name)
	}
	return b.String()
}

// matcher is one compiled matcher call. It holds everything precomputed so
// that match neither allocates nor converts case.
type matcher struct {
	kind   matcherKind
	values [][]byte       // Host (lower case, no port), Path, PathPrefix, Method (upper case): any equal/prefix
	name   string         // Header / HeaderRegexp / Query: header field or query parameter name
	value  []byte         // Header / Query: wanted value; nil for Query(`k`) (presence only)
	re     *regexp.Regexp // HeaderRegexp, HostRegexp, PathRegexp, QueryRegexp
}

// match reports whether req satisfies the matcher. It does not allocate
// (regexp matching of a warm Regexp reuses pooled machines).
func (m *matcher) match(req Request) bool {
	steps.Add(len(m.values) + 1)
	switch m.kind {
	case mHost:
		h := hostWithoutPort(req.HostBytes())
		for _, v := range m.values {
			if equalFoldASCII(h, v) {
				return true
			}
		}
		return false
	case mPath:
		p := req.PathBytes()
		for _, v := range m.values {
			if bytes.Equal(p, v) {
				return true
			}
		}
		return false
	case mPathPrefix:
		p := req.PathBytes()
		for _, v := range m.values {
			if bytes.HasPrefix(p, v) {
				return true
			}
		}
		return false
	case mMethod:
		meth := req.MethodBytes()
		for _, v := range m.values {
			if bytes.Equal(meth, v) {
				return true
			}
		}
		return false
	case mHeader:
		v, ok := req.HeaderValue(m.name)
		return ok && bytes.Equal(v, m.value)
	case mHeaderRegexp:
		v, ok := req.HeaderValue(m.name)
		return ok && m.re.Match(v)
	case mQuery:
		v, ok := req.QueryValue(m.name)
		if !ok {
			return false
		}
		return m.value == nil || bytes.Equal(v, m.value)
	case mHostRegexp:
		return m.re.Match(hostWithoutPort(req.HostBytes()))
	case mPathRegexp:
		return m.re.Match(req.PathBytes())
	case mQueryRegexp:
		v, ok := req.QueryValue(m.name)
		return ok && m.re.Match(v)
	}
	return false
}

// hostWithoutPort strips an optional ":port" and one trailing "." (fully
// qualified form) from a Host header value (RFC 9110 §7.2: uri-host [":" port]).
// An IPv6 literal keeps its brackets: "[::1]:8080" gives "[::1]".
func hostWithoutPort(h []byte) []byte {
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte(h, ']'); i >= 0 {
			return h[:i+1]
		}
		return h
	}
	if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	if n := len(h); n > 1 && h[n-1] == '.' {
		h = h[:n-1]
	}
	return h
}

// equalFoldASCII reports whether a equals lower, ignoring ASCII case in a;
// lower must already be lower case.
func equalFoldASCII(a, lower []byte) bool {
	if len(a) != len(lower) {
		return false
	}
	for i, c := range a {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c is a tchar of RFC 9110 §5.6.2 (the characters
// allowed in header field names and methods).
func isTokenChar(c byte) bool {
	if isLetter(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}
