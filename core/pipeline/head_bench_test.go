package pipeline

import (
	"testing"

	"github.com/sluice-gw/sluice/core/relay"
	"github.com/sluice-gw/sluice/pool"
)

// BenchmarkAppendResponseHead is the cost of an upstream response's head for the client with
// the fields a cors and a compress middleware add (Access-Control-Allow-Origin, Vary: Origin,
// Vary: Accept-Encoding, Content-Encoding), the upstream's Vary listing one of them.
func BenchmarkAppendResponseHead(b *testing.B) {
	var rc RequestCtx
	if err := rc.Req.ParseRequestHead([]byte(benchChatHead), nil); err != nil {
		b.Fatal(err)
	}
	rc.x = &pool.Exchange{}
	head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Fri, 04 Dec 2026 21:00:00 GMT\r\nETag: \"v1\"\r\nVary: Accept-Encoding\r\nContent-Length: 7200\r\n\r\n"
	if err := rc.x.Resp.ParseResponseHead([]byte(head), nil); err != nil {
		b.Fatal(err)
	}
	rc.framing = relay.Length
	rc.requestID = appendNewRequestID(nil)
	rc.AddResponseHeader([]byte("Access-Control-Allow-Origin"), []byte("https://app.example"))
	rc.AddResponseHeader([]byte("Vary"), []byte("Origin"))
	rc.AddResponseHeader([]byte("Vary"), []byte("Accept-Encoding"))
	rc.AddResponseHeader([]byte("Content-Encoding"), []byte("gzip"))
	dst := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		dst = rc.AppendHead(dst[:0])
	}
}
