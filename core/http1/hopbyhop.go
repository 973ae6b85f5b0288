package http1

// IsHopByHop reports whether the field named key must not be forwarded by a proxy: the
// connection-specific fields of RFC 9110 §7.6.1 (Connection, Keep-Alive, Proxy-Connection, TE,
// Transfer-Encoding, Upgrade), Trailer, Proxy-Authenticate and Proxy-Authorization (as Go's
// net/http/httputil does), plus every field named in this request's Connection header.
// The comparison ignores ASCII case.
func (r *Request) IsHopByHop(key []byte) bool { return isHopByHop(key, r.connTokens) }

// IsHopByHop is Request.IsHopByHop for a response from an upstream.
func (r *Response) IsHopByHop(key []byte) bool { return isHopByHop(key, r.connTokens) }

func isHopByHop(key []byte, tokens [][]byte) bool {
	switch len(key) {
	case 2:
		if equalFold(key, "te") {
			return true
		}
	case 7:
		if equalFold(key, "upgrade") || equalFold(key, "trailer") {
			return true
		}
	case 10:
		if equalFold(key, "connection") || equalFold(key, "keep-alive") {
			return true
		}
	case 16:
		if equalFold(key, "proxy-connection") {
			return true
		}
	case 17:
		if equalFold(key, "transfer-encoding") {
			return true
		}
	case 18:
		if equalFold(key, "proxy-authenticate") {
			return true
		}
	case 19:
		if equalFold(key, "proxy-authorization") {
			return true
		}
	}
	for _, t := range tokens {
		if equalFoldBytes(key, t) {
			return true
		}
	}
	return false
}
