package http1

import (
	"errors"
	"testing"
)

func TestRequestPathIsNormalised(t *testing.T) {
	for _, c := range []struct {
		target, path string
		status       int // 0: accepted
		allowSlash   bool
	}{
		{"/v1/chat/completions", "/v1/chat/completions", 0, false},
		{"/v1//admin/x", "/v1/admin/x", 0, false},
		{"//v1///admin//", "/v1/admin/", 0, false},
		{"/v1/%61dmin/x", "/v1/admin/x", 0, false},
		{"/v1/%7e%2D%2e%5F%30", "/v1/~-._0", 0, false},
		{"/a%20b%3a?q=%61", "/a%20b%3A", 0, false}, // reserved and other characters stay encoded, hex upper-cased
		{"/v1%2fadmin", "", 400, false},
		{"/v1%2Fadmin", "", 400, false},
		{"/v1%5cadmin", "", 400, false},
		{"/v1\\admin", "", 400, false}, // read as /v1/admin by some servers
		{"/v1\\admin", "/v1\\admin", 0, true},
		{"/v1?q=a\\b", "/v1", 0, false}, // the query is not the path
		{"/v1/models/org%2fmodel", "/v1/models/org%2Fmodel", 0, true},
		// Dot segments between separators an upstream may decode.
		{"/v1/x%2f%2e%2e%2fadmin", "", 400, true},
		{"/v1/x%5C..%5Cadmin", "", 400, true},
		{"/v1/x\\.\\admin", "", 400, true},
		{"/v1/x%2F..", "", 400, true},
		{"/v1/x%2F...%2Fy", "/v1/x%2F...%2Fy", 0, true},
		{"/v1/a.b%2F.c", "/v1/a.b%2F.c", 0, true},
		{"/a%00b", "", 400, true},
		{"/a%zz", "", 400, false},
		{"/a%4", "", 400, false},
		{"/a%", "", 400, false},
		{"/%2e%2E/admin", "", 400, false}, // encoded dot segment
		{"http://h/v1//x", "/v1/x", 0, false},
	} {
		var r Request
		head := "GET " + c.target + " HTTP/1.1\r\nHost: h\r\n\r\n"
		err := r.ParseRequestHead([]byte(head), &Limits{AllowEncodedSlash: c.allowSlash})
		var he *Error
		switch {
		case c.status != 0 && (!errors.As(err, &he) || he.Status != c.status):
			t.Errorf("%s: err %v, want %d", c.target, err, c.status)
		case c.status == 0 && err != nil:
			t.Errorf("%s: err %v", c.target, err)
		case c.status == 0 && string(r.Path) != c.path:
			t.Errorf("%s: path %q, want %q", c.target, r.Path, c.path)
		case c.status == 0 && string(r.URI) != c.target:
			t.Errorf("%s: URI %q, want the target as received", c.target, r.URI)
		}
	}
}

// TestNormalisedPathSurvivesReuse: the normal form lives in the request's own buffer, which is
// reused by the next parse; a path that needs no change costs no copy.
func TestNormalisedPathSurvivesReuse(t *testing.T) {
	var r Request
	for i := 0; i < 3; i++ {
		if err := r.ParseRequestHead([]byte("GET /a//%62?x=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n"), nil); err != nil {
			t.Fatal(err)
		}
		if string(r.Path) != "/a/b" || string(r.RawQuery) != "x=1" || string(r.Headers[1].Value) != "1" {
			t.Fatalf("round %d: path %q query %q header %q", i, r.Path, r.RawQuery, r.Headers[1].Value)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		_ = r.ParseRequestHead([]byte("GET /a//%62?x=1 HTTP/1.1\r\nHost: h\r\n\r\n"), nil)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per parse once warm, want 0", allocs)
	}
}
