package proxy

import (
	"bytes"
	"strconv"

	"github.com/sluice-gw/sluice/core/http1"
)

// OutMode is how a response body is framed towards the client.
type OutMode uint8

// Client body framings, chosen by PlanResponse.
const (
	OutNone       OutMode = iota // no body (HEAD, 1xx, 204, 304)
	OutLength                    // Content-Length; upstream wire bytes pass through unchanged
	OutChunkedRaw                // chunked both sides; upstream wire bytes (with chunk framing) pass through
	OutChunk                     // decoded payload re-framed as chunks (upstream delimited by close, 1.1 client)
	OutClose                     // decoded payload, delimited by closing the connection (HTTP/1.0 client)
)

// Raw reports whether the relay forwards the upstream's wire bytes (framing included) for m.
func (m OutMode) Raw() bool { return m == OutLength || m == OutChunkedRaw }

// PlanResponse chooses the client framing for resp (RFC 9112 §6.3, §7) and whether the client
// connection stays open afterwards. An HTTP/1.0 client never gets a chunked response: a body of
// unknown length is delimited by closing the connection instead.
func PlanResponse(resp *http1.Response, reqHEAD bool, req *http1.Request) (OutMode, bool) {
	keepAlive := req.KeepAlive
	http10 := req.Major == 1 && req.Minor == 0
	switch resp.BodyMode(reqHEAD) {
	case http1.BodyNone:
		return OutNone, keepAlive
	case http1.BodyLength:
		return OutLength, keepAlive
	case http1.BodyChunked:
		if http10 {
			return OutClose, false
		}
		return OutChunkedRaw, keepAlive
	default: // until close
		if http10 {
			return OutClose, false
		}
		return OutChunk, keepAlive
	}
}

var hdrTransferEncoding = []byte("Transfer-Encoding")

// AppendClientHead appends the response head sent to the client to dst: the status line in the
// client's HTTP version, the upstream's end-to-end fields (hop-by-hop ones dropped, RFC 9110
// §7.6.1), and the gateway's own framing and connection fields for mode.
func AppendClientHead(dst []byte, resp *http1.Response, req *http1.Request, mode OutMode, keepAlive bool) []byte {
	// RFC 9110 §2.5: a server answers with its own version (1.1) whatever the client sent.
	dst = http1.AppendStatusLine(dst, 1, 1, resp.Status, resp.Reason)
	for i := range resp.Headers {
		f := &resp.Headers[i]
		if resp.IsHopByHop(f.Key) || bytes.EqualFold(f.Key, hdrContentLength) || bytes.EqualFold(f.Key, hdrTransferEncoding) {
			continue
		}
		dst = append(dst, f.Key...)
		dst = append(dst, ": "...)
		dst = append(dst, f.Value...)
		dst = append(dst, "\r\n"...)
	}
	switch mode {
	case OutLength:
		dst = appendContentLength(dst, resp.ContentLength)
	case OutNone:
		// A response to HEAD keeps the length the GET would have had (RFC 9110 §8.6).
		if resp.ContentLength >= 0 && resp.Status != 204 && resp.Status != 304 && resp.Status >= 200 {
			dst = appendContentLength(dst, resp.ContentLength)
		}
	case OutChunkedRaw, OutChunk:
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	}
	switch {
	case !keepAlive:
		dst = append(dst, "Connection: close\r\n"...)
	case req.Major == 1 && req.Minor == 0:
		dst = append(dst, "Connection: keep-alive\r\n"...)
	}
	return append(dst, "\r\n"...)
}

func appendContentLength(dst []byte, n int64) []byte {
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, "\r\n"...)
}

// IsEventStream reports whether resp declares Content-Type text/event-stream (SSE), the case
// where a mid-stream upstream failure is reported to the client as an SSE error event.
func IsEventStream(resp *http1.Response) bool {
	for i := range resp.Headers {
		f := &resp.Headers[i]
		if len(f.Key) == 12 && bytes.EqualFold(f.Key, hdrContentType) {
			v := f.Value
			return len(v) >= 17 && bytes.EqualFold(v[:17], eventStream)
		}
	}
	return false
}

var (
	hdrContentType = []byte("Content-Type")
	eventStream    = []byte("text/event-stream")
)
