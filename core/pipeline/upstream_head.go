package pipeline

import (
	"bytes"
	"strconv"
)

var (
	hdrHost          = []byte("Host")
	hdrContentLength = []byte("Content-Length")
	hdrXFF           = []byte("X-Forwarded-For")
	hdrXFProto       = []byte("X-Forwarded-Proto")
	hdrXFHost        = []byte("X-Forwarded-Host")
	hdrAuthorization = []byte("Authorization")
	hdrExpect        = []byte("Expect")
	hdrMaxForwards   = []byte("Max-Forwards")
)

// appendUpstreamHead appends the HTTP/1.1 request head sent to backend b for rc's request.
//
// Hop-by-hop fields (RFC 9110 §7.6.1, including those named in Connection) and the client's
// framing (Content-Length, Transfer-Encoding, Expect) are dropped: the body was read whole, so
// it goes upstream with its own Content-Length, which is right even when a stage rewrote it.
// X-Forwarded-For gets the client IP appended (the de facto format of RFC 7239's
// predecessors), X-Forwarded-Proto and X-Forwarded-Host are set by the gateway, replacing
// client-sent values that could spoof them. X-Request-Id is the request's (the client's when
// sane). Host is the backend's own unless the service passes the client's Host through.
// The Max-Forwards of a TRACE or OPTIONS request goes one less (RFC 9110 §7.6.2). Fields added
// by request stages come last.
func appendUpstreamHead(dst []byte, rc *RequestCtx, b *Backend) []byte {
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
	if rt.Service.PassHostHeader && len(req.Host) > 0 {
		dst = append(dst, req.Host...)
	} else {
		dst = append(dst, b.Host...)
	}
	dst = append(dst, "\r\n"...)
	var xff []byte
	for i := range req.Headers {
		f := &req.Headers[i]
		k := f.Key
		switch {
		case req.IsHopByHop(k),
			bytes.EqualFold(k, hdrHost),
			bytes.EqualFold(k, hdrContentLength),
			bytes.EqualFold(k, hdrExpect),
			bytes.EqualFold(k, hdrXFProto),
			bytes.EqualFold(k, hdrXFHost),
			bytes.EqualFold(k, hdrRequestID):
			continue
		case bytes.EqualFold(k, hdrXFF):
			if xff == nil {
				xff = f.Value
			}
			continue
		case rt.StripAuthorization && bytes.EqualFold(k, hdrAuthorization):
			continue
		case rc.maxFwd > 0 && bytes.EqualFold(k, hdrMaxForwards):
			continue // sent below, one less
		}
		dst = appendField(dst, k, f.Value)
	}
	dst = append(dst, "X-Forwarded-For: "...)
	if len(xff) > 0 {
		dst = append(dst, xff...)
		dst = append(dst, ", "...)
	}
	dst = append(dst, rc.ClientIP...)
	if rc.ep.TLS {
		dst = append(dst, "\r\nX-Forwarded-Proto: https\r\n"...)
	} else {
		dst = append(dst, "\r\nX-Forwarded-Proto: http\r\n"...)
	}
	if len(req.Host) > 0 {
		dst = appendField(dst, hdrXFHost, req.Host)
	}
	dst = appendField(dst, hdrRequestID, rc.requestID)
	if rc.maxFwd > 0 {
		dst = append(dst, "Max-Forwards: "...)
		dst = strconv.AppendInt(dst, rc.maxFwd-1, 10)
		dst = append(dst, "\r\n"...)
	}
	dst = rc.appendFields(dst, rc.upExtra)
	if len(req.Body) > 0 || req.ContentLength >= 0 || req.Chunked {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(req.Body)), 10)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}
