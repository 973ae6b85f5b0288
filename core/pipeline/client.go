package pipeline

import (
	"bytes"
	"net/netip"
	"unsafe"

	"github.com/sluice-gw/sluice/core/http1"
)

// ClientAddr returns the address of the client the request is from, for stages that key or
// filter on it (rate limits, IP allow-lists). From a peer that is not in the entrypoint's
// TrustedIPs it is the peer itself: a forwarding header from such a peer is a claim nobody
// vouches for. From a trusted peer (a load balancer in front of sluice) it is the rightmost
// address of X-Forwarded-For that is not itself trusted, as nginx's real_ip_recursive: each
// trusted proxy appended the address it saw, so the first untrusted hop from the right is the
// one a client cannot forge. An element that is not an address ends the walk at the last
// trusted hop. The result is computed once per request and allocates nothing.
func (rc *RequestCtx) ClientAddr() netip.Addr {
	if rc.clientKnown {
		return rc.client
	}
	rc.client, rc.clientKnown = rc.peer, true
	if !rc.trusted || rc.ep == nil {
		return rc.client
	}
	hs := rc.Req.Headers
	for i := len(hs) - 1; i >= 0; i-- {
		if forwardingKind(hs[i].Key) != fwdFor {
			continue
		}
		v := hs[i].Value
		for len(v) > 0 {
			j := bytes.LastIndexByte(v, ',')
			elem := bytes.TrimSpace(v[j+1:])
			if j < 0 {
				v = nil
			} else {
				v = v[:j]
			}
			if len(elem) == 0 {
				continue
			}
			a, ok := parseForwardedFor(elem)
			if !ok {
				return rc.client
			}
			rc.client = a
			if !rc.ep.trusts(a) {
				return a
			}
		}
	}
	return rc.client
}

// parseForwardedFor parses one X-Forwarded-For element: an IPv4 or IPv6 address, optionally
// with a port ("192.0.2.1:4711", "[2001:db8::1]:4711"), as proxies write them. It allocates
// nothing: the bytes are read in place and no zone is kept.
func parseForwardedFor(b []byte) (netip.Addr, bool) {
	s := unsafe.String(unsafe.SliceData(b), len(b))
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// RemoveRequestHeader removes every field named name from the request, so that neither
// later stages nor the upstream see it: in any ASCII case, and in any spelling with '_' for
// '-' or '-' for '_', since CGI-style servers (PHP, WSGI, Rack) read X-User-Id, X_User_Id and
// X-User_Id as one variable (HTTP_X_USER_ID), and a client's X_User_Id would otherwise stand
// for the field removed (or set by the gateway in its place). Framing and routing fields
// (Host, Content-Length, Transfer-Encoding, Connection) must not be removed this way: the
// request was parsed with them.
func (rc *RequestCtx) RemoveRequestHeader(name []byte) {
	rc.Req.Headers = removeFields(rc.Req.Headers, name, sameVariable)
}

// sameVariable reports whether field names a and b name one CGI variable: they are equal
// ignoring ASCII case and the difference between '-' and '_'.
func sameVariable(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if cgiFold(a[i]) != cgiFold(b[i]) {
			return false
		}
	}
	return true
}

// cgiFold maps a byte of a field name to the one its CGI variable has, in lower case: '-'
// for '_'.
func cgiFold(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// RemoveResponseHeader removes every field named name from the upstream's response head
// before it is written to the client. It is for response stages: before the response head
// arrived, or for a gateway reply, there is nothing to remove.
func (rc *RequestCtx) RemoveResponseHeader(name []byte) {
	if rc.x == nil || rc.replied {
		return
	}
	rc.x.Resp.Headers = removeFields(rc.x.Resp.Headers, name, bytes.EqualFold)
}

// ResponseHeaderValue returns the value of the upstream response's first field named name
// (for response stages).
func (rc *RequestCtx) ResponseHeaderValue(name string) ([]byte, bool) {
	if rc.x == nil || rc.replied {
		return nil, false
	}
	return rc.x.Resp.HeaderValue(name)
}

// ResponseFields returns the upstream response's fields, every line in order as received
// (a list field such as Cache-Control or Vary may come on more than one line, RFC 9110 §5.3),
// for a response stage to read; nil when there is no upstream response. The stage must not
// change them (AddResponseHeader, RemoveResponseHeader).
func (rc *RequestCtx) ResponseFields() []http1.HeaderField {
	if rc.x == nil || rc.replied {
		return nil
	}
	return rc.x.Resp.Headers
}

// removeFields removes from hs the fields whose name same reports the same as name.
func removeFields(hs []http1.HeaderField, name []byte, same func(a, b []byte) bool) []http1.HeaderField {
	out := hs[:0]
	for _, f := range hs {
		if !same(f.Key, name) {
			out = append(out, f)
		}
	}
	clear(hs[len(out):])
	return out
}
