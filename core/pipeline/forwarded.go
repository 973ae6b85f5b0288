package pipeline

import "github.com/sluice-gw/sluice/core/http1"

// Forwarding fields are claims a proxy makes to the next hop about the request it received:
// the client's address, the scheme, host and port it used. An upstream keys allow-lists, rate
// limits and redirects on them, so only a peer in the entrypoint's TrustedIPs may make them.
// From any other peer each one is removed and the ones sluice vouches for are set from what
// it saw; from a trusted peer the address chains (X-Forwarded-For, Forwarded) are extended
// with the peer and the others are kept.

// fwdKind classifies a request field name as a forwarding field.
type fwdKind uint8

const (
	fwdNone      fwdKind = iota // not a forwarding field
	fwdFor                      // X-Forwarded-For: the de facto address chain
	fwdForwarded                // Forwarded (RFC 7239 §4): the standard address chain
	fwdProto                    // X-Forwarded-Proto
	fwdHost                     // X-Forwarded-Host
	fwdPort                     // X-Forwarded-Port
	fwdRealIP                   // X-Real-IP
	fwdOther                    // any other X-Forwarded-* field, or another client-address field
	fwdAlias                    // one of these written with '_' for '-'
)

// fieldKind names a forwarding field, lower case.
type fieldKind struct {
	name string
	kind fwdKind
}

// xForwarded are the X-Forwarded-* fields sluice sets, by the name after "x-forwarded-".
var xForwarded = [...]fieldKind{{"for", fwdFor}, {"proto", fwdProto}, {"host", fwdHost}, {"port", fwdPort}}

// otherForwarding are forwarding fields besides X-Forwarded-*, lower case: client-address
// fields that frameworks and proxies read (nginx's X-Real-IP, ingress-nginx's
// X-Original-Forwarded-For, Akamai's and Cloudflare's True-Client-IP, the X-Client-IP family
// that request-ip and django-ipware consult) and the non-standard spellings of the chains.
var otherForwarding = [...]fieldKind{
	{"forwarded", fwdForwarded},
	{"x-real-ip", fwdRealIP},
	{"x-forwarded", fwdOther},
	{"forwarded-for", fwdOther},
	{"x-client-ip", fwdOther},
	{"client-ip", fwdOther},
	{"true-client-ip", fwdOther},
	{"x-cluster-client-ip", fwdOther},
	{"x-original-forwarded-for", fwdOther},
}

// forwardingKind classifies field name k. A name that matches only with '_' read as '-' is
// fwdAlias: CGI-style servers (PHP, WSGI, Rack) map both spellings to the same variable
// (HTTP_X_FORWARDED_FOR), so an X_Forwarded_For would pose as the real one.
func forwardingKind(k []byte) fwdKind {
	if len(k) < len("client-ip") {
		return fwdNone
	}
	switch k[0] | 0x20 {
	case 'x', 'f', 't', 'c':
	default:
		return fwdNone
	}
	const xf = "x-forwarded-"
	if len(k) > len(xf) {
		if m := matchName(k[:len(xf)], xf); m != 0 {
			rest, kind := k[len(xf):], fwdOther
			for _, n := range xForwarded {
				if mr := matchName(rest, n.name); mr != 0 {
					kind, m = n.kind, max(m, mr)
					break
				}
			}
			if m == 2 {
				return fwdAlias
			}
			return kind
		}
	}
	for _, n := range otherForwarding {
		switch matchName(k, n.name) {
		case 1:
			return n.kind
		case 2:
			return fwdAlias
		}
	}
	return fwdNone
}

// matchName compares field name k with lower-case name, ignoring ASCII case: 1 when it is
// name, 2 when it is name with some '-' written as '_', 0 otherwise.
func matchName(k []byte, name string) int {
	if len(k) != len(name) {
		return 0
	}
	m := 1
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			if c != '_' || name[i] != '-' {
				return 0
			}
			m = 2
		}
	}
	return m
}

// fwdSeen records which forwarding fields a trusted peer sent, one bit per fwdKind.
type fwdSeen uint16

func (s fwdSeen) has(k fwdKind) bool { return s&(1<<k) != 0 }

// appendForwardingFields appends the forwarding fields sluice sets after the client's fields,
// seen being those a trusted peer sent (0 for an untrusted one, whose fields were dropped):
//
//	X-Forwarded-For:   the trusted peer's chain, then the peer address
//	Forwarded:         only when a trusted peer sent one: its elements, then
//	                   for=<peer>;proto=<scheme> (RFC 7239 §4, §5.2, §5.4)
//	X-Forwarded-Proto: http or https (the entrypoint's), unless a trusted peer sent it
//	X-Forwarded-Host:  the request's Host, unless a trusted peer sent it
//	X-Forwarded-Port:  the entrypoint's port, unless a trusted peer sent it
//	X-Real-IP:         the peer address, unless a trusted peer sent it
//
// sluice does not start a Forwarded chain of its own: an upstream that prefers Forwarded to
// X-Forwarded-* (Spring's ForwardedHeaderFilter) would otherwise take the word of sluice's
// element, which names a load balancer as the client, over the load balancer's own
// X-Forwarded-* headers.
func (rc *RequestCtx) appendForwardingFields(dst []byte, seen fwdSeen) []byte {
	req := &rc.Req
	if len(rc.ClientIP) > 0 || seen.has(fwdFor) {
		dst = append(dst, "X-Forwarded-For: "...)
		dst = appendChain(dst, req, fwdFor, seen)
		dst = append(dst, rc.ClientIP...)
		dst = append(dst, "\r\n"...)
	}
	scheme := "http"
	if rc.ep.TLS {
		scheme = "https"
	}
	if seen.has(fwdForwarded) {
		dst = append(dst, "Forwarded: "...)
		dst = appendChain(dst, req, fwdForwarded, seen)
		dst = append(dst, "for="...)
		dst = appendNode(dst, rc)
		dst = append(dst, ";proto="...)
		dst = append(dst, scheme...)
		dst = append(dst, "\r\n"...)
	}
	if !seen.has(fwdProto) {
		dst = append(dst, "X-Forwarded-Proto: "...)
		dst = append(dst, scheme...)
		dst = append(dst, "\r\n"...)
	}
	if !seen.has(fwdHost) && len(req.Host) > 0 {
		dst = appendField(dst, hdrXFHost, req.Host)
	}
	if !seen.has(fwdPort) && rc.ep.Port != "" {
		dst = append(dst, "X-Forwarded-Port: "...)
		dst = append(dst, rc.ep.Port...)
		dst = append(dst, "\r\n"...)
	}
	if !seen.has(fwdRealIP) && len(rc.ClientIP) > 0 {
		dst = appendField(dst, hdrXRealIP, rc.ClientIP)
	}
	return dst
}

// appendChain appends the values of every field of kind the trusted peer sent, in order and
// joined by ", " (RFC 9110 §5.3: one field line, because many readers, Go's Header.Get among
// them, take only the first line), with a trailing ", " when there was any.
func appendChain(dst []byte, req *http1.Request, kind fwdKind, seen fwdSeen) []byte {
	if !seen.has(kind) {
		return dst
	}
	for i := range req.Headers {
		f := &req.Headers[i]
		if len(f.Value) > 0 && forwardingKind(f.Key) == kind && !req.IsHopByHop(f.Key) {
			dst = append(dst, f.Value...)
			dst = append(dst, ", "...)
		}
	}
	return dst
}

// appendNode appends the peer as a Forwarded node (RFC 7239 §6): an IPv4 address as a token,
// an IPv6 address bracketed and quoted, since ':' and '[' are not token characters
// (for="[2001:db8::1]").
func appendNode(dst []byte, rc *RequestCtx) []byte {
	if rc.peer.Is6() {
		dst = append(dst, `"[`...)
		dst = append(dst, rc.ClientIP...)
		return append(dst, `]"`...)
	}
	return append(dst, rc.ClientIP...)
}
