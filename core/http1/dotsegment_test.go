package http1

import "testing"

func TestDotSegmentsAreRefused(t *testing.T) {
	cases := map[string]bool{
		"/v1/models":           false,
		"/v1/a.b/..c/...":      false,
		"/v1/%2e%2efoo":        false,
		"/x/../v1/models":      true,
		"/x/./v1":              true,
		"/x/..":                true,
		"/x/%2e%2e/v1":         true,
		"/x/%2E./v1":           true,
		"/x/.%2e":              true,
		"/.":                   true,
		"/v1/models?q=/../../": false, // the query is not a path
	}
	for uri, refused := range cases {
		var r Request
		err := r.ParseRequestHead([]byte("GET "+uri+" HTTP/1.1\r\nHost: a\r\n\r\n"), nil)
		if got := err == errDotSegment; got != refused {
			t.Errorf("%s: refused=%v (err %v), want %v", uri, got, err, refused)
		}
	}
}
