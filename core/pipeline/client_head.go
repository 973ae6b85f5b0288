package pipeline

import (
	"bytes"
	"strconv"

	"github.com/sluice-gw/sluice/core/http1"
)

var hdrTransferEncoding = []byte("Transfer-Encoding")

// passToClient reports whether the upstream response field key goes to the client: not
// hop-by-hop, and not framing, which the gateway sets itself.
func passToClient(resp *http1.Response, key []byte) bool {
	return !resp.IsHopByHop(key) && !bytes.EqualFold(key, hdrContentLength) && !bytes.EqualFold(key, hdrTransferEncoding)
}

func appendField(dst, k, v []byte) []byte {
	dst = append(dst, k...)
	dst = append(dst, ": "...)
	dst = append(dst, v...)
	return append(dst, "\r\n"...)
}

// appendConnection ends a head with the connection field the client needs and the blank line.
func appendConnection(dst []byte, req *http1.Request, keepAlive bool) []byte {
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
