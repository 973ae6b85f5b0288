package fuzz

import (
	"errors"
	"testing"

	"github.com/sluice-gw/sluice/core/router"
)

// fuzzRequest is a fixed request the fuzzed rules are evaluated against.
type fuzzRequest struct{}

func (fuzzRequest) MethodBytes() []byte { return []byte("POST") }
func (fuzzRequest) HostBytes() []byte   { return []byte("API.example.com:8080") }
func (fuzzRequest) PathBytes() []byte   { return []byte("/v1/chat/completions") }
func (fuzzRequest) HeaderValue(name string) ([]byte, bool) {
	if name == "X-Canary" || name == "x-canary" {
		return []byte("1"), true
	}
	return nil, false
}
func (fuzzRequest) QueryValue(name string) ([]byte, bool) {
	if name == "stream" {
		return []byte("true"), true
	}
	return nil, false
}

// ruleCost bounds the work of parsing a rule and matching it once (a regexp's compilation
// and matching are the standard library's, and not counted). Fixed covers the "did you mean"
// of an unknown matcher: edit distances to the matchers within two bytes of its length, at
// most about 650 steps whatever the rule.
var ruleCost = linearCost{PerByte: 16, Fixed: 1024}

// FuzzRuleParse checks that router.Parse never panics, that every error is a
// *router.SyntaxError whose offset lies within the input, that a rule
// that parses can be matched, and that the work grows linearly with the rule.
func FuzzRuleParse(f *testing.F) {
	for _, s := range []string{
		"Host(`a.com`)",
		"PathPrefix(`/v1`) && Method(`POST`)",
		"Host(`a`, `b`) || !(Path(`/x`) && Header(`K`, `V`))",
		"HeaderRegexp(`User-Agent`, `^curl/[0-9]+`) && Query(`stream`, `true`) && Query(`debug`)",
		`Host("a.com") && Path("/\x41")`,
		"!!!Method(`GET`)",
		"((((Path(`/`))))",
		"Host(`a`) &",
		"Header(`K`)",
		"HeaderRegexp(`K`, `(`)",
		"Host(`[::1]`)",
		"HostRegexp(`^.+\\.example\\.com$`) || PathRegexp(`^/v[0-9]+/`) || QueryRegexp(`k`, `^a+$`)",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rule string) {
		checkCost(t, ruleCost, []byte(rule), func(b []byte) {
			if r, err := router.Parse(string(b)); err == nil {
				r.Match(fuzzRequest{})
			}
		})
		r, err := router.Parse(rule)
		if err != nil {
			var se *router.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): error %T is not *SyntaxError", rule, err)
			}
			if se.Offset < 0 || se.Offset > len(rule) {
				t.Fatalf("Parse(%q): offset %d outside [0,%d]", rule, se.Offset, len(rule))
			}
			_ = err.Error()
			return
		}
		r.Match(fuzzRequest{})
		if r.String() != rule {
			t.Fatalf("String() = %q, want %q", r.String(), rule)
		}
	})
}
