package router

import "strings"

// testRequest is a plain Request for tests and benchmarks: headers and query
// parameters as name/value pairs, looked up without allocation.
type testRequest struct {
	method, host, path []byte
	headers            [][2][]byte
	query              [][2][]byte
}

func newReq(method, host, target string, headers ...string) *testRequest {
	r := &testRequest{method: []byte(method), host: []byte(host)}
	path, query, _ := strings.Cut(target, "?")
	r.path = []byte(path)
	if query != "" {
		for _, kv := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			r.query = append(r.query, [2][]byte{[]byte(k), []byte(v)})
		}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.headers = append(r.headers, [2][]byte{[]byte(headers[i]), []byte(headers[i+1])})
	}
	return r
}

func (r *testRequest) MethodBytes() []byte { return r.method }
func (r *testRequest) HostBytes() []byte   { return r.host }
func (r *testRequest) PathBytes() []byte   { return r.path }

func (r *testRequest) HeaderValue(name string) ([]byte, bool) {
	for _, h := range r.headers {
		if len(h[0]) == len(name) && equalFoldString(h[0], name) {
			return h[1], true
		}
	}
	return nil, false
}

func (r *testRequest) QueryValue(name string) ([]byte, bool) {
	for _, q := range r.query {
		if string(q[0]) == name {
			return q[1], true
		}
	}
	return nil, false
}

func equalFoldString(b []byte, s string) bool {
	for i := range b {
		x, y := b[i]|0x20, s[i]|0x20
		if x != y || (b[i] != s[i] && (x < 'a' || x > 'z')) {
			return false
		}
	}
	return true
}
