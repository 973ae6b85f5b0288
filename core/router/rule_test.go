package router

import (
	"errors"
	"strings"
	"testing"
)

func TestRuleMatch(t *testing.T) {
	post := newReq("POST", "api.example.com:8080", "/v1/chat/completions?stream=true&debug",
		"Content-Type", "application/json", "X-Canary", "1", "User-Agent", "OpenAI/Python 1.40.0")
	get := newReq("GET", "Example.COM", "/health")
	v6 := newReq("GET", "[::1]:9000", "/")

	cases := []struct {
		rule string
		req  *testRequest
		want bool
	}{
		{"Host(`api.example.com`)", post, true},
		{"Host(`API.Example.com`)", post, true},
		{"Host(`example.com`)", get, true},
		{"Host(`example.com.`)", get, true},
		{"Host(`other.com`)", get, false},
		{"Host(`other.com`, `example.com`)", get, true},
		{"Host(`[::1]`)", v6, true},
		{"Path(`/health`)", get, true},
		{"Path(`/Health`)", get, false},
		{"Path(`/health/`)", get, false},
		{"PathPrefix(`/v1`)", post, true},
		{"PathPrefix(`/v1/`)", post, true},
		{"PathPrefix(`/v2`, `/v1/chat`)", post, true},
		{"PathPrefix(`/v2`)", post, false},
		{"Method(`POST`)", post, true},
		{"Method(`post`)", post, true}, // rule argument upper-cased
		{"Method(`POST`)", newReq("post", "a", "/"), false},
		{"Method(`GET`, `HEAD`)", get, true},
		{"Header(`content-type`, `application/json`)", post, true},
		{"Header(`Content-Type`, `application/JSON`)", post, false},
		{"Header(`X-Missing`, ``)", post, false},
		{"HeaderRegexp(`User-Agent`, `^OpenAI/`)", post, true},
		{"HeaderRegexp(`User-Agent`, `^curl/`)", post, false},
		{"Query(`stream`, `true`)", post, true},
		{"Query(`stream`, `false`)", post, false},
		{"Query(`debug`)", post, true},
		{"Query(`debug`)", get, false},
		{"HostRegexp(`^[a-z]+\\.example\\.com$`)", post, true},
		{"HostRegexp(`^api\\.example\\.com$`)", newReq("GET", "API.EXAMPLE.COM:443", "/"), true},
		{"HostRegexp(`^www\\.`)", post, false},
		{"PathRegexp(`^/v[0-9]+/chat/`)", post, true},
		{"PathRegexp(`^/v[0-9]+/embeddings`)", post, false},
		{"QueryRegexp(`stream`, `^(true|1)$`)", post, true},
		{"QueryRegexp(`stream`, `^0$`)", post, false},
		{"QueryRegexp(`nope`, `.*`)", post, false},
		{"PathPrefix(`/v1`) && Method(`POST`)", post, true},
		{"PathPrefix(`/v1`) && Method(`GET`)", post, false},
		{"PathPrefix(`/v2`) || Method(`POST`)", post, true},
		{"!Method(`POST`)", post, false},
		{"!!Method(`POST`)", post, true},
		{"!!!Method(`POST`)", post, false},
		// precedence: ! > && > ||
		{"Method(`GET`) && Path(`/x`) || Host(`api.example.com`)", post, true},
		{"Method(`GET`) && (Path(`/x`) || Host(`api.example.com`))", post, false},
		{"!Method(`GET`) && Host(`api.example.com`)", post, true},
		{"!(Method(`POST`) && Host(`api.example.com`))", post, false},
		{"Host(`x`) || Host(`y`) || Path(`/health`) && Method(`GET`)", get, true},
		{"(((Path(`/health`))))", get, true},
		{"host(`example.com`) && pathprefix(`/`)", get, true},
		{`Host("example.com") && Path("/he\x61lth")`, get, true},
		{"  Host( `example.com` , `b` )\n&&\tPath(`/health`)  ", get, true},
	}
	for _, c := range cases {
		r, err := Parse(c.rule)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.rule, err)
		}
		if got := r.Match(c.req); got != c.want {
			t.Errorf("%q on %s %s%s: got %v, want %v", c.rule, c.req.method, c.req.host, c.req.path, got, c.want)
		}
		if r.String() != c.rule {
			t.Errorf("String() = %q", r.String())
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		rule   string
		offset int
		msg    string
	}{
		{"", 0, "empty rule"},
		{"   ", 3, "empty rule"},
		{"Host(`a`", 8, "expected ',' or ')'"},
		{"Host(`a`) &&", 12, "expected a matcher"},
		{"Host(`a`) & Path(`/`)", 10, "expected '&&'"},
		{"Host(`a`) | Path(`/`)", 10, "expected '||'"},
		{"Host(`a`) Path(`/`)", 10, "expected '&&', '||' or end of rule"},
		{"Hots(`a`)", 0, `unknown matcher "Hots" (did you mean Host?) (valid: `},
		{"PathPrefx(`/a`)", 0, `unknown matcher "PathPrefx" (did you mean PathPrefix?)`},
		{"pathprefx(`/a`)", 0, `unknown matcher "pathprefx" (did you mean PathPrefix?)`},
		{"Nope(`a`)", 0, `unknown matcher "Nope" (valid: `},
		{"Host(`a)", 5, "unterminated"},
		{`Host("a)`, 5, "unterminated"},
		{"Host()", 5, "expected a `string` argument"},
		{"Host(`a`,)", 9, "expected a `string` argument"},
		{"Host", 4, "expected '(' after Host"},
		{"(Host(`a`)", 10, "expected ')'"},
		{"Host(`a`))", 9, "found ')'"},
		{"Host(``)", 5, "empty host"},
		{"Host(`a.com:80`)", 5, "port"},
		{"Path(`x`)", 5, "must start with '/'"},
		{"PathPrefix(`/a`, `b`)", 17, "must start with '/'"},
		{"Method(`P O`)", 7, "invalid method"},
		{"Header(`K`)", 10, "takes 2 argument(s), got 1"},
		{"Header(`K`, `a`, `b`)", 20, "takes 2 argument(s), got 3"},
		{"Query(`a`, `b`, `c`)", 19, "takes 1 or 2 argument(s)"},
		{"Header(`bad name`, `v`)", 7, "invalid header field name"},
		{"HeaderRegexp(`K`, `(`)", 18, "HeaderRegexp: error parsing regexp"},
		{"Query(``)", 6, "empty parameter name"},
		{"HostRegexp(`[`)", 11, "HostRegexp: error parsing regexp"},
		{"PathRegexp(`/a`, `/b`)", 21, "takes 1 argument(s), got 2"},
		{"QueryRegexp(`k`, `+`)", 17, "QueryRegexp: error parsing regexp"},
		{"Host(`a`) && $", 13, "unexpected character \"$\""},
		{"Host(`a`) && \xff", 13, `unexpected character "\xff"`},
		{"!", 1, "expected a matcher"},
		{"()", 1, "expected a matcher"},
	}
	for _, c := range cases {
		_, err := Parse(c.rule)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q): got %v, want *SyntaxError", c.rule, err)
			continue
		}
		if se.Offset != c.offset || !strings.Contains(se.Msg, c.msg) || se.Rule != c.rule {
			t.Errorf("Parse(%q): got offset %d msg %q, want offset %d msg containing %q", c.rule, se.Offset, se.Msg, c.offset, c.msg)
		}
		if !strings.HasPrefix(err.Error(), "cannot parse rule ") {
			t.Errorf("Error() = %q", err.Error())
		}
	}
}

func TestParseLimits(t *testing.T) {
	deep := strings.Repeat("(", MaxNestingDepth+1) + "Path(`/`)" + strings.Repeat(")", MaxNestingDepth+1)
	if _, err := Parse(deep); err == nil || !strings.Contains(err.Error(), "nesting") {
		t.Errorf("deep parens: %v", err)
	}
	ok := strings.Repeat("(", MaxNestingDepth) + "Path(`/`)" + strings.Repeat(")", MaxNestingDepth)
	if _, err := Parse(ok); err != nil {
		t.Errorf("max depth parens: %v", err)
	}
	nots := strings.Repeat("!", MaxNestingDepth+1) + "Path(`/`)"
	if _, err := Parse(nots); err == nil || !strings.Contains(err.Error(), "nesting") {
		t.Errorf("deep nots: %v", err)
	}
	many := strings.Repeat("Path(`/`) || ", MaxMatchers) + "Path(`/`)"
	if _, err := Parse(many); err == nil || !strings.Contains(err.Error(), "matchers") {
		t.Errorf("many matchers: %v", err)
	}
	args := "Host(" + strings.Repeat("`a`,", MaxMatcherArgs) + "`a`)"
	if _, err := Parse(args); err == nil || !strings.Contains(err.Error(), "arguments") {
		t.Errorf("many args: %v", err)
	}
	long := "Path(`/" + strings.Repeat("a", MaxRuleBytes) + "`)"
	var se *SyntaxError
	if _, err := Parse(long); !errors.As(err, &se) || se.Offset > len(long) {
		t.Errorf("long rule: %v", err)
	}
	// A pathological but legal rule (a million-deep stack in a naive
	// parser) is bounded: it must fail fast, not crash.
	bomb := strings.Repeat("(!", 100000)
	if _, err := Parse(bomb); err == nil {
		t.Errorf("paren bomb parsed")
	}
}

func TestNilRuleMatchesNothing(t *testing.T) {
	var r *Rule
	if r.Match(newReq("GET", "a", "/")) {
		t.Fatal("nil rule matched")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	r := MustParse("Host(`api.example.com`) && PathPrefix(`/v1`) && Method(`POST`) && HeaderRegexp(`User-Agent`, `^OpenAI/`) && !Query(`debug`, `1`)")
	req := newReq("POST", "api.example.com", "/v1/chat/completions", "User-Agent", "OpenAI/Python 1.40.0")
	if !r.Match(req) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(1000, func() { r.Match(req) }); n != 0 {
		t.Fatalf("Match allocates %v times", n)
	}
}

// Arguments written without quotes, the usual slip of a first rule, are answered with what to
// write, at the argument, rather than with the character or token the parser stopped at.
func TestParseSaysArgumentsGoInBackquotes(t *testing.T) {
	cases := []struct {
		rule   string
		offset int
		msg    string
	}{
		{"PathPrefix(/v1)", 11, "PathPrefix's arguments go in backquotes: write PathPrefix(`/v1`)"},
		{"PathPrefix('/v1')", 11, "PathPrefix's arguments go in backquotes: write PathPrefix(`/v1`)"},
		{"Method(POST)", 7, "Method's arguments go in backquotes: write Method(`POST`)"},
		{"Method( POST , 'GET' )", 8, "Method's arguments go in backquotes: write Method(`POST`, `GET`)"},
		{"Host(example.com) && Path(`/`)", 5, "Host's arguments go in backquotes: write Host(`example.com`)"},
		{"Path(`/`) && Method(POST)", 20, "Method's arguments go in backquotes: write Method(`POST`)"},
		{"Method(`POST`, GET)", 15, "Method's arguments go in backquotes, as in Method(`…`)"},
		{"PathRegexp(^/v1/(a|b)$)", 11, "PathRegexp's arguments go in backquotes, as in PathRegexp(`…`)"},
		{"Method(POST", 7, "Method's arguments go in backquotes, as in Method(`…`)"},
		{"Header('X-A', 'a,b')", 7, "Header's arguments go in backquotes: write Header(`X-A`, `a,b`)"},
		{"Header(X-A, 'a, b' )", 7, "Header's arguments go in backquotes: write Header(`X-A`, `a, b`)"},
		{"Header('X-A, a)", 7, "Header's arguments go in backquotes, as in Header(`…`)"},
		{"Header(X-A, it's)", 7, "Header's arguments go in backquotes: write Header(`X-A`, `it's`)"},
		{"Header('X-A' b, c)", 7, "Header's arguments go in backquotes, as in Header(`…`)"},
		// Not an argument written bare: the parser's own words.
		{"Method()", 7, "expected a `string` argument to Method, found ')'"},
		{"Method(,)", 7, "expected a `string` argument to Method, found ','"},
		{"Method($)", 7, `unexpected character "$"`},
	}
	for _, c := range cases {
		_, err := Parse(c.rule)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q): got %v, want *SyntaxError", c.rule, err)
			continue
		}
		if se.Offset != c.offset || se.Msg != c.msg {
			t.Errorf("Parse(%q): got offset %d msg %q, want offset %d msg %q", c.rule, se.Offset, se.Msg, c.offset, c.msg)
		}
	}
}
