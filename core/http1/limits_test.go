package http1

import (
	"strings"
	"testing"
)

func TestRequestLimits(t *testing.T) {
	manyFields := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString("X-F: v\r\n")
		}
		return b.String()
	}
	small := &Limits{MaxHeaderBytes: 200, MaxHeaderCount: 5, MaxBodyBytes: 1000}
	tests := []struct {
		name   string
		raw    string
		lim    *Limits
		status int
	}{
		{"default count ok", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(99) + "\r\n", nil, 0},
		{"default count over", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(100) + "\r\n", nil, 431},
		{"default bytes over", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", DefaultMaxHeaderBytes) + "\r\n\r\n", nil, 431},
		{"small count ok", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(4) + "\r\n", small, 0},
		{"small count over", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(5) + "\r\n", small, 431},
		{"small bytes over in fields", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 200) + "\r\n\r\n", small, 431},
		{"small bytes over in target", "GET /" + strings.Repeat("a", 200) + " HTTP/1.1\r\nHost: h\r\n\r\n", small, 414},
		{"default bytes over in target", "GET /" + strings.Repeat("a", DefaultMaxHeaderBytes) + " HTTP/1.1\r\nHost: h\r\n\r\n", nil, 414},
		{"body at limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n", small, 0},
		{"body over limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n", small, 413},
		{"default body over", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16777217\r\n\r\n", nil, 413},
		{"default body at", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16777216\r\n\r\n", nil, 0},
		{"huge CL is 413 not overflow", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999999999\r\n\r\n", nil, 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseReq(t, tt.raw, tt.lim)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
		})
	}
}

func TestCheckPartialHead(t *testing.T) {
	field := "GET / HTTP/1.1\r\nX: "
	if err := CheckPartialHead([]byte(field+strings.Repeat("a", DefaultMaxHeaderBytes-len(field))), nil); statusOf(err) != -1 {
		t.Fatalf("at limit: %v", err)
	}
	if err := CheckPartialHead([]byte(field+strings.Repeat("a", DefaultMaxHeaderBytes+1-len(field))), nil); statusOf(err) != 431 {
		t.Fatalf("over limit in a field line: %v, want 431", err)
	}
	if err := CheckPartialHead([]byte("GET /"+strings.Repeat("a", DefaultMaxHeaderBytes)), nil); statusOf(err) != 414 {
		t.Fatalf("over limit in the request line: %v, want 414", err)
	}
	if err := CheckPartialHead([]byte("GET /aaaaaa"), &Limits{MaxHeaderBytes: 10}); statusOf(err) != 414 {
		t.Fatalf("custom: %v", err)
	}
	// A refused request line wins over the size of what follows it, in a partial head and in a
	// whole one: the answer must not depend on how much of the stream had arrived when the
	// line was judged.
	over := "G(T / HTTP/1.1\r\n" + strings.Repeat("0", DefaultMaxHeaderBytes)
	if err := CheckPartialHead([]byte(over), nil); statusOf(err) != 400 {
		t.Fatalf("refused request line, then more than the limit: %v, want 400", err)
	}
	var r Request
	if err := r.ParseRequestHead([]byte(over+"\r\n\r\n"), nil); statusOf(err) != 400 {
		t.Fatalf("whole head over the limit with a refused request line: %v, want 400", err)
	}
	// A whole request line is judged before the head ends: the HTTP/2 connection preface's
	// field block never comes (binary frames follow it, RFC 9113 §3.4).
	for _, tc := range []struct {
		head   string
		status int
	}{
		{"PRI * HTTP/2.0\r\n", 505},
		{"PRI * HTTP/2.0\r\n\r\nSM", 505},
		{"GET / HTTP/2.0\r\nHost: gw\r\n", 505},
		{"GET / HTTP/1.1\r\n", -1},
		{"GET / HTTP/1.1\r\nHost: gw\r\nX: 1\n", -1}, // a bare LF in a field line: the whole head judges it
		{"GET / HTTP/1.1\nHost: gw\r\n", -1},         // a bare LF ends the request line: likewise
		{"G(T / HTTP/1.1\r\n", 400},
		{"\x16\x03\x01\x00\xa5", 400}, // a TLS ClientHello: refused before any line end
		{"GET\x01", 400},
		{" GET / HTTP/1.1", 400},
		{"GET", -1},
		{"GET\r", -1},
		{"CONNECT gw:443 HTTP/1.1\r\n", 501},
		{"GET / HTTP/1.1", -1},
	} {
		if err := CheckPartialHead([]byte(tc.head), nil); statusOf(err) != tc.status {
			t.Errorf("%q: %v, want status %d", tc.head, err, tc.status)
		}
	}
	if err := CheckPartialHead([]byte("PRI * HTTP/2.0\r\n"), nil); err != errH2Preface {
		t.Errorf("preface: %v, want the preface's own message", err)
	}
}

// The limit that runs out decides the status: a request line whose LF is the limit's last
// byte fits (the fields then overflow: 431); one byte longer and it does not (414).
func TestHeadTooLargeRequestLineBoundary(t *testing.T) {
	const limit = 64
	lim := &Limits{MaxHeaderBytes: limit}
	line := func(n int) string { // a request line of n bytes, CRLF included
		return "GET /" + strings.Repeat("a", n-len("GET / HTTP/1.1\r\n")) + " HTTP/1.1\r\n"
	}
	for _, tc := range []struct {
		lineBytes int
		status    int
	}{{limit, 431}, {limit + 1, 414}, {limit - 1, 431}} {
		head := line(tc.lineBytes) + "Host: h\r\nX: " + strings.Repeat("b", limit) + "\r\n\r\n"
		if _, err := parseReq(t, head, lim); statusOf(err) != tc.status {
			t.Errorf("complete head, request line of %d bytes: %v, want %d", tc.lineBytes, err, tc.status)
		}
		partial := []byte(head[:limit+1])
		if err := CheckPartialHead(partial, lim); statusOf(err) != tc.status {
			t.Errorf("partial head, request line of %d bytes: %v, want %d", tc.lineBytes, err, tc.status)
		}
	}
}

func TestLimitsDefaults(t *testing.T) {
	var nilLim *Limits
	zero := &Limits{}
	for _, l := range []*Limits{nilLim, zero} {
		if l.HeaderBytes() != 16384 || l.HeaderCount() != 100 || l.BodyBytes() != 16<<20 {
			t.Fatalf("defaults: %d %d %d", l.HeaderBytes(), l.HeaderCount(), l.BodyBytes())
		}
	}
}

func TestHeaderBytesBoundary(t *testing.T) {
	base := "GET / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n"
	lim := &Limits{MaxHeaderBytes: 100}
	at := "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 100-len(base)) + "\r\n\r\n"
	if len(at) != 100 {
		t.Fatalf("len %d", len(at))
	}
	if _, err := parseReq(t, at, lim); err != nil {
		t.Fatalf("head of exactly the limit: %v", err)
	}
	over := "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 101-len(base)) + "\r\n\r\n"
	if _, err := parseReq(t, over, lim); statusOf(err) != 431 {
		t.Fatalf("head one byte over the limit: %v, want 431", err)
	}
}
