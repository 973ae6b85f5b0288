package http1

import (
	"errors"
	"testing"
)

const chatHead = "POST /v1/chat/completions?api-version=2024-01&stream HTTP/1.1\r\n" +
	"Host: api.example.com:8080\r\n" +
	"User-Agent: openai-python/1.40.0\r\n" +
	"Authorization: Bearer sk-test-0123456789abcdef\r\n" +
	"Content-Type: application/json\r\n" +
	"Accept: text/event-stream\r\n" +
	"Content-Length: 1234\r\n" +
	"X-Request-Id: 7f1c2a9e-3b4d-4e5f-8a6b-7c8d9e0f1a2b\r\n" +
	"Connection: keep-alive\r\n" +
	"\r\n"

func TestParseRequestHeadChatPost(t *testing.T) {
	r, err := parseReq(t, chatHead, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	check("Method", string(r.Method), "POST")
	check("URI", string(r.URI), "/v1/chat/completions?api-version=2024-01&stream")
	check("Path", string(r.Path), "/v1/chat/completions")
	check("RawQuery", string(r.RawQuery), "api-version=2024-01&stream")
	check("Host", string(r.Host), "api.example.com:8080")
	check("HostBytes", string(r.HostBytes()), "api.example.com")
	if r.Major != 1 || r.Minor != 1 {
		t.Errorf("version %d.%d", r.Major, r.Minor)
	}
	if r.ContentLength != 1234 || r.Chunked || !r.KeepAlive || r.ExpectContinue || r.Upgrade {
		t.Errorf("framing: cl=%d chunked=%v ka=%v expect=%v upgrade=%v",
			r.ContentLength, r.Chunked, r.KeepAlive, r.ExpectContinue, r.Upgrade)
	}
	if len(r.Headers) != 8 {
		t.Fatalf("got %d headers", len(r.Headers))
	}
	check("Headers[1].Key", string(r.Headers[1].Key), "User-Agent")
	if v, ok := r.HeaderValue("authorization"); !ok || string(v) != "Bearer sk-test-0123456789abcdef" {
		t.Errorf("HeaderValue(authorization) = %q, %v", v, ok)
	}
	if v, ok := r.QueryValue("api-version"); !ok || string(v) != "2024-01" {
		t.Errorf("QueryValue(api-version) = %q, %v", v, ok)
	}
	if v, ok := r.QueryValue("stream"); !ok || len(v) != 0 {
		t.Errorf("QueryValue(stream) = %q, %v", v, ok)
	}
	if _, ok := r.QueryValue("missing"); ok {
		t.Error("QueryValue(missing) found")
	}
}

func TestParseRequestHeadCopiesInput(t *testing.T) {
	b := []byte(chatHead)
	var r Request
	if err := r.ParseRequestHead(b, nil); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'X'
	}
	if string(r.Path) != "/v1/chat/completions" || string(r.HostBytes()) != "api.example.com" {
		t.Fatalf("request aliases the caller's buffer: path %q host %q", r.Path, r.HostBytes())
	}
}

func TestRequestReuseAfterError(t *testing.T) {
	var r Request
	if err := r.ParseRequestHead([]byte("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n"), nil); statusOf(err) != 400 {
		t.Fatalf("err = %v", err)
	}
	if err := r.ParseRequestHead([]byte("GET /ok HTTP/1.1\r\nHost: b\r\n\r\n"), nil); err != nil {
		t.Fatal(err)
	}
	if string(r.Path) != "/ok" || r.ContentLength != -1 || string(r.HostBytes()) != "b" {
		t.Fatalf("stale state: path %q cl %d host %q", r.Path, r.ContentLength, r.HostBytes())
	}
}

func TestRequestLine(t *testing.T) {
	tests := []struct {
		name, line string
		status     int
		path, q    string
	}{
		{"origin-form", "GET /a/b HTTP/1.1", 0, "/a/b", ""},
		{"query", "GET /a?x=1 HTTP/1.1", 0, "/a", "x=1"},
		{"empty query", "GET /a? HTTP/1.1", 0, "/a", ""},
		{"asterisk-form", "OPTIONS * HTTP/1.1", 0, "*", ""},
		{"absolute-form", "GET http://example.com/x?y HTTP/1.1", 0, "/x", "y"},
		{"absolute-form no path", "GET HTTPS://example.com HTTP/1.1", 0, "/", ""},
		// Tunnels are not proxied: CONNECT must not be forwarded upstream.
		{"authority-form", "CONNECT example.com:443 HTTP/1.1", 501, "", ""},
		{"CONNECT origin-form", "CONNECT /v1/ok HTTP/1.1", 501, "", ""},
		{"asterisk-form not OPTIONS", "GET * HTTP/1.1", 400, "", ""},
		{"custom method", "PROPFIND /x HTTP/1.1", 0, "/x", ""},
		{"http/1.0", "GET / HTTP/1.0", 0, "/", ""},
		{"double space", "GET  / HTTP/1.1", 400, "", ""},
		{"tab separator", "GET\t/ HTTP/1.1", 400, "", ""},
		{"trailing space", "GET / HTTP/1.1 ", 400, "", ""},
		{"leading space", " GET / HTTP/1.1", 400, "", ""},
		{"no version", "GET /", 400, "", ""},
		{"http/0.9 style", "GET", 400, "", ""},
		{"lowercase version", "GET / http/1.1", 400, "", ""},
		{"version two digits", "GET / HTTP/1.10", 400, "", ""},
		{"http/2.0", "GET / HTTP/2.0", 505, "", ""},
		{"http/1.2", "GET / HTTP/1.2", 0, "/", ""},
		{"http/1.9", "GET / HTTP/1.9", 0, "/", ""},
		{"http/3.0", "GET / HTTP/3.0", 505, "", ""},
		{"http/0.9", "GET / HTTP/0.9", 505, "", ""},
		{"fragment", "GET /a#frag HTTP/1.1", 400, "", ""},
		{"non-ascii target", "GET /\xc3\xa9 HTTP/1.1", 400, "", ""},
		{"ctl in target", "GET /\x01 HTTP/1.1", 400, "", ""},
		{"relative target", "GET a/b HTTP/1.1", 400, "", ""},
		{"bad method char", "GE(T / HTTP/1.1", 400, "", ""},
		{"absolute-form userinfo", "GET http://u@example.com/ HTTP/1.1", 400, "", ""},
		{"absolute-form empty authority", "GET http:///x HTTP/1.1", 400, "", ""},
		{"bare CR in line", "GET /\r HTTP/1.1", 400, "", ""},
		{"space in target", "GET /v1/mod els HTTP/1.1", 400, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseReq(t, tt.line+"\r\nHost: example.com\r\n\r\n", nil)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
			if err != nil {
				return
			}
			if string(r.Path) != tt.path || string(r.RawQuery) != tt.q {
				t.Errorf("path %q query %q, want %q %q", r.Path, r.RawQuery, tt.path, tt.q)
			}
		})
	}
}

// A request of a later HTTP/1 minor version is processed as HTTP/1.1, the highest this
// server implements (RFC 9110 §2.5, RFC 9112 §2.3): Host is required, chunked framing is
// taken, and what the gateway sends on says 1.1. Only another major version gets 505.
func TestLaterMinorVersionIsProcessedAsHTTP11(t *testing.T) {
	for _, v := range []string{"HTTP/1.2", "HTTP/1.9"} {
		r, err := parseReq(t, "POST /x "+v+"\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", nil)
		if err != nil {
			t.Fatalf("%s with chunked framing: %v", v, err)
		}
		if r.Major != 1 || r.Minor != 1 || !r.Chunked {
			t.Fatalf("%s: version %d.%d chunked %v, want 1.1 chunked", v, r.Major, r.Minor, r.Chunked)
		}
		if want := int(v[7] - '0'); r.SentMinor != want {
			t.Fatalf("%s: SentMinor %d, want %d as the line has it", v, r.SentMinor, want)
		}
		if _, err := parseReq(t, "GET /x "+v+"\r\n\r\n", nil); statusOf(err) != 400 {
			t.Fatalf("%s without Host: %v, want 400 as for HTTP/1.1", v, err)
		}
	}
	for _, line := range []string{"GET / HTTP/2.0", "GET / HTTP/2.1", "GET / HTTP/0.9", "GET / HTTP/9.9"} {
		if _, err := parseReq(t, line+"\r\nHost: a\r\n\r\n", nil); statusOf(err) != 505 {
			t.Fatalf("%q: %v, want 505", line, err)
		}
	}
}

func TestAbsoluteFormHostReplacesHostHeader(t *testing.T) {
	r, err := parseReq(t, "GET http://upstream.example:81/x HTTP/1.1\r\nHost: other\r\n\r\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Host) != "upstream.example:81" || string(r.HostBytes()) != "upstream.example" {
		t.Fatalf("Host %q HostBytes %q", r.Host, r.HostBytes())
	}
}

func TestAbsoluteFormStillNeedsHostHeader(t *testing.T) {
	if _, err := parseReq(t, "GET http://a/x HTTP/1.1\r\n\r\n", nil); statusOf(err) != 400 {
		t.Fatalf("missing Host: %v, want 400", err)
	}
	if _, err := parseReq(t, "GET http://a/x HTTP/1.1\r\nHost: a b\r\n\r\n", nil); statusOf(err) != 400 {
		t.Fatalf("invalid Host: %v, want 400", err)
	}
	r, err := parseReq(t, "GET http://a:1/x HTTP/1.0\r\n\r\n", nil)
	if err != nil || string(r.HostBytes()) != "a" {
		t.Fatalf("1.0 absolute-form: %v host %q", err, r.HostBytes())
	}
}

// TestSpaceInTargetIsNamed: a request line whose target holds an unencoded space is refused
// with a message that says so, not as a malformed version; other extra spaces still read as
// what they break.
func TestSpaceInTargetIsNamed(t *testing.T) {
	for line, want := range map[string]*Error{
		"GET /v1/mod els HTTP/1.1":  errTargetSpace,
		"GET /a b c HTTP/1.0":       errTargetSpace,
		"GET / HTTP/1.1 ":           errVersionSyntax,
		"GET /a b":                  errVersionSyntax,
		"GET /a HTTP/1.1 HTTP/1.1x": errVersionSyntax,
	} {
		_, err := parseReq(t, line+"\r\nHost: example.com\r\n\r\n", nil)
		if err != want {
			t.Errorf("%q: got %v, want %v", line, err, want)
		}
	}
}

// A request carries one set of credentials: a second Authorization or Proxy-Authorization
// field (neither is a list, RFC 9110 §11.6.2, §11.7.2) is refused, so that the gateway and an
// upstream it forwards credentials to cannot read different ones.
func TestTwoSetsOfCredentialsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		status       int
	}{
		{"one of each", "Authorization: Bearer a\r\nProxy-Authorization: Basic b\r\n", 0},
		{"two Authorization", "Authorization: Bearer a\r\nAuthorization: Bearer b\r\n", 400},
		{"two Authorization, any case", "authorization: Bearer a\r\nAUTHORIZATION: Bearer a\r\n", 400},
		{"two Proxy-Authorization", "Proxy-Authorization: Basic a\r\nproxy-authorization: Basic b\r\n", 400},
		{"an empty second", "Authorization: Bearer a\r\nAuthorization:\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Request
			err := r.ParseRequestHead([]byte("GET /v1/models HTTP/1.1\r\nHost: h\r\n"+tc.fields+"\r\n"), nil)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var he *Error
			if !errors.As(err, &he) || he.Status != tc.status {
				t.Fatalf("got %v, want a %d", err, tc.status)
			}
		})
	}
}
