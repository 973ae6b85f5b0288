package http1

import "github.com/sluice-gw/sluice/internal/steps"

// MethodBytes returns the request method as received (case-sensitive, RFC 9110 §9.1).
// Router view: does not allocate.
func (r *Request) MethodBytes() []byte { return r.Method }

// HostBytes returns the Host without its port, as received (an IPv6 literal keeps its
// brackets); the router compares it case-insensitively. Nil when there is no Host.
func (r *Request) HostBytes() []byte { return r.hostName }

// PathBytes returns the request path: the target up to '?', with unreserved characters decoded,
// other percent-encodings in upper case and runs of '/' merged (RFC 3986 §6.2.2).
func (r *Request) PathBytes() []byte { return r.Path }

// HeaderValue returns the value of the first field named name (ASCII case-insensitive) and
// whether there was one.
func (r *Request) HeaderValue(name string) ([]byte, bool) {
	return headerValue(r.Headers, name)
}

// HeaderValueOnly returns the value of the first field named name (ASCII case-insensitive),
// whether there was one, and whether it was the only one: for a field that is not a list,
// where a second value would leave which one counts to whoever reads it.
func (r *Request) HeaderValueOnly(name string) (v []byte, ok, only bool) {
	steps.Add(len(r.Headers) + 1)
	for i := range r.Headers {
		if !equalFoldAny(r.Headers[i].Key, name) {
			continue
		}
		if ok {
			return v, true, false
		}
		v, ok = r.Headers[i].Value, true
	}
	return v, ok, ok
}

// QueryValue returns the raw (not unescaped) value of the first parameter named name in
// RawQuery (pairs separated by '&', name and value by '='; a parameter without '=' has an empty
// value) and whether there was one. Names compare byte for byte.
func (r *Request) QueryValue(name string) ([]byte, bool) {
	q := r.RawQuery
	steps.Add(len(q) + 1)
	for len(q) > 0 {
		var pair []byte
		pair, q = q, nil
		for i, c := range pair {
			if c == '&' {
				pair, q = pair[:i], pair[i+1:]
				break
			}
		}
		k, v := pair, pair[len(pair):]
		for i, c := range pair {
			if c == '=' {
				k, v = pair[:i], pair[i+1:]
				break
			}
		}
		if string(k) == name {
			return v, true
		}
	}
	return nil, false
}

func headerValue(hs []HeaderField, name string) ([]byte, bool) {
	steps.Add(len(hs) + 1)
	for i := range hs {
		if equalFoldAny(hs[i].Key, name) {
			return hs[i].Value, true
		}
	}
	return nil, false
}
