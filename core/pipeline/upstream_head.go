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
)

// appendUpstreamHead appends the HTTP/1.1 request head sent to backend b for rc's request.
//
// Hop-by-hop fields (RFC 9110 §7.6.1, including those named in Connection) and the client's
// framing (Content-Length, Transfer-Encoding, Expect) are dropped: the body was read whole, so
// it goes upstream with its own Content-Length, which is right even when a stage rewrote it.
// Forwarding fields (Forwarded, X-Forwarded-*, X-Real-IP and the like, see forwardingKind)
// are dropped unless the peer is trusted, so that no client can tell the upstream another
// address than its own; then sluice sets its own (appendForwardingFields). X-Request-Id is
// the request's (the client's when sane). Host is the backend's own unless the service passes
// the client's Host through. The Max-Forwards of a TRACE or OPTIONS request goes one less (RFC
// 9110 §7.6.2). Fields added by request stages come last.
func appendUpstreamHead(dst []byte, rc *RequestCtx, b *Backend) []byte {
	return appendHeadFor(dst, rc, rc.service, b, len(rc.Req.Body))
}

// AppendCopyHead appends the head of a copy of rc's request for backend b of service svc
// (traffic mirroring), with a body of bodyLen bytes: the head the request itself would get
// there (see appendUpstreamHead), its X-Request-Id included, so that the copy's answer can be
// compared with the original's.
func (rc *RequestCtx) AppendCopyHead(dst []byte, svc *Service, b *Backend, bodyLen int) []byte {
	return appendHeadFor(dst, rc, svc, b, bodyLen)
}

func appendHeadFor(dst []byte, rc *RequestCtx, svc *Service, b *Backend, bodyLen int) []byte {
	req, rt := &rc.Req, rc.route
	dst = append(dst, req.Method...)
	dst = append(dst, ' ')
	// Origin form always (RFC 9112 §3.2.1), also for a client's absolute-form target.
	dst = append(dst, req.Path...)
	if len(req.RawQuery) > 0 {
		dst = append(dst, '?')
		dst = append(dst, req.RawQuery...)
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	if svc.PassHostHeader && len(req.Host) > 0 {
		dst = append(dst, req.Host...)
	} else {
		dst = append(dst, b.Host...)
	}
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
		case rt.StripAuthorization && (bytes.EqualFold(k, hdrAuthorization) || bytes.EqualFold(k, hdrXAPIKey)),
			len(rt.StripHeader) > 0 && bytes.EqualFold(k, rt.StripHeader):
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
	return append(dst, "\r\n"...)
}
