package pipeline

import (
	"bytes"
	"strconv"
)

var (
	hdrHost          = []byte("Host")
	hdrContentLength = []byte("Content-Length")
	hdrXFHost        = []byte("X-Forwarded-Host")
	hdrXRealIP       = []byte("X-Real-IP")
	hdrAuthorization = []byte("Authorization")
	hdrXAPIKey       = []byte("X-Api-Key")
	hdrExpect        = []byte("Expect")
	hdrMaxForwards   = []byte("Max-Forwards")
	hdrAcceptEnc     = []byte("Accept-Encoding")
)

// appendUpstreamHead appends the HTTP/1.1 request head sent to backend b for rc's request.
//
// Hop-by-hop fields (RFC 9110 §7.6.1, including those named in Connection) and the client's
// framing (Content-Length, Transfer-Encoding, Expect) are dropped: the body was read whole, so
// it goes upstream with its own Content-Length, which is right even when a stage rewrote it.
// Forwarding fields (Forwarded, X-Forwarded-*, X-Real-IP and the like, see forwardingKind)
// are dropped unless the peer is trusted, so that no client can tell the upstream another
// address than its own; then sluice sets its own (appendForwardingFields). On a route with
// UncodedResponses, and for a held stream (whose events the gateway frames under a head it sent
// itself), Accept-Encoding is identity whatever the client sent. X-Request-Id is
// the request's (the client's when sane). Host is the backend's own unless the service passes
// the client's Host through. The Max-Forwards of a TRACE or OPTIONS request goes one less (RFC
// 9110 §7.6.2). Fields added by request stages come last.
func appendUpstreamHead(dst []byte, rc *RequestCtx, b *Backend) []byte {
	dst, _ = appendHeadFor(dst, rc, hostFor(rc.service, rc.Req.Host, b), len(rc.Req.Body))
	return dst
}

// hostFor returns the Host value a request whose client sent clientHost gets at backend b of
// svc: the client's when svc passes it through and there is one, else b's own.
func hostFor(svc *Service, clientHost []byte, b *Backend) []byte {
	if svc.PassHostHeader && len(clientHost) > 0 {
		return clientHost
	}
	return b.Host
}

// CopyHead is the head of a copy of a request for a shadow service (traffic mirroring), built
// by AppendCopyHead when the copy is taken and completed by AppendFor when it is sent. The
// backend, and the shadow service it belongs to, are chosen only then: a copy may wait in a
// queue for a while, across a reload that replaces the shadow service, and a backend chosen
// when it was taken would count it in flight there all that time. The zero value is empty;
// its buffer is reused by the next AppendCopyHead.
type CopyHead struct {
	head      []byte // with the client's Host value, if any, at [hostStart, hostEnd)
	hostStart int
	hostEnd   int
}

// AppendCopyHead sets h to the head of a copy of rc's request with a body of bodyLen bytes:
// the head the request itself would get at a backend (see appendUpstreamHead), its
// X-Request-Id included, so that the copy's answer can be compared with the original's. Only
// its Host value waits for the backend (CopyHead.AppendFor).
func (rc *RequestCtx) AppendCopyHead(h *CopyHead, bodyLen int) {
	h.head, h.hostStart = appendHeadFor(h.head[:0], rc, rc.Req.Host, bodyLen)
	h.hostEnd = h.hostStart + len(rc.Req.Host)
}

// Len returns the length of the head as AppendCopyHead built it.
func (h *CopyHead) Len() int { return len(h.head) }

// Cap returns the capacity of the head's buffer.
func (h *CopyHead) Cap() int { return cap(h.head) }

// AppendFor appends the head to dst as it goes to backend b of svc: with the client's Host
// when svc passes it through and the client sent one, else b's own.
func (h *CopyHead) AppendFor(dst []byte, svc *Service, b *Backend) []byte {
	dst = append(dst, h.head[:h.hostStart]...)
	dst = append(dst, hostFor(svc, h.head[h.hostStart:h.hostEnd], b)...)
	return append(dst, h.head[h.hostEnd:]...)
}

// dropsCredential reports whether field k, of a request to a route that authenticates its
// callers, carries a credential that must not go upstream: a credential field (Authorization,
// X-Api-Key, CredentialHeader, the last taking precedence) when the route keeps credentials
// at the gateway, and in any case one spelt other than as the gateway reads it, '_' for '-'
// or the reverse (X_Api_Key), which CGI-style upstreams (PHP, WSGI, Rack) read as the field
// itself although the gateway did not check it.
func (rt *Route) dropsCredential(k []byte) bool {
	f := rt.CredentialHeader
	if len(f) == 0 || !sameVariable(k, f) {
		switch {
		case sameVariable(k, hdrAuthorization):
			f = hdrAuthorization
		case sameVariable(k, hdrXAPIKey):
			f = hdrXAPIKey
		default:
			return false
		}
	}
	return rt.StripAuthorization || !bytes.EqualFold(k, f)
}

// appendHeadFor appends the head of rc's request with host as its Host value and a body of
// bodyLen bytes, and returns where the Host value starts in dst.
func appendHeadFor(dst []byte, rc *RequestCtx, host []byte, bodyLen int) (_ []byte, hostAt int) {
	req, rt := &rc.Req, rc.route
	uncoded := rt.UncodedResponses || rc.held
	dst = append(dst, req.Method...)
	dst = append(dst, ' ')
	// Origin form always (RFC 9112 §3.2.1), also for a client's absolute-form target.
	dst = append(dst, req.Path...)
	if len(req.RawQuery) > 0 {
		dst = append(dst, '?')
		dst = append(dst, req.RawQuery...)
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	hostAt = len(dst)
	dst = append(dst, host...)
	dst = append(dst, "\r\n"...)
	var seen fwdSeen
	for i := range req.Headers {
		f := &req.Headers[i]
		k := f.Key
		switch {
		case req.IsHopByHop(k),
			bytes.EqualFold(k, hdrHost),
			bytes.EqualFold(k, hdrContentLength),
			bytes.EqualFold(k, hdrExpect),
			bytes.EqualFold(k, hdrRequestID):
			continue
		case rt.Authenticates && rt.dropsCredential(k),
			uncoded && bytes.EqualFold(k, hdrAcceptEnc):
			continue
		case rc.maxFwd > 0 && bytes.EqualFold(k, hdrMaxForwards):
			continue // sent below, one less
		}
		switch kind := forwardingKind(k); {
		case kind == fwdNone:
		case !rc.trusted || kind == fwdAlias:
			continue
		case kind == fwdFor || kind == fwdForwarded:
			seen |= 1 << kind
			continue // one field line with the peer appended, below
		default:
			seen |= 1 << kind
		}
		dst = appendField(dst, k, f.Value)
	}
	dst = rc.appendForwardingFields(dst, seen)
	if uncoded {
		dst = append(dst, "Accept-Encoding: identity\r\n"...)
	}
	dst = appendField(dst, hdrRequestID, rc.requestID)
	if rc.maxFwd > 0 {
		dst = append(dst, "Max-Forwards: "...)
		dst = strconv.AppendInt(dst, rc.maxFwd-1, 10)
		dst = append(dst, "\r\n"...)
	}
	dst = rc.appendFields(dst, rc.upExtra)
	if rc.websocket {
		// Connection and Upgrade are hop-by-hop, dropped above: the upgrade is asked anew.
		dst = append(dst, wsUpgradeFields...)
	}
	if bodyLen > 0 || req.ContentLength >= 0 || req.Chunked {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(bodyLen), 10)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...), hostAt
}
