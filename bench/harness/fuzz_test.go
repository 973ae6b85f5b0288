package harness

import (
	"net"
	"testing"
	"time"
)

// FuzzSSEScanner: any input, split anywhere, scans to the same result as in
// one piece, and never panics.
func FuzzSSEScanner(f *testing.F) {
	f.Add([]byte(openAIStream), 7)
	f.Add([]byte("data: [DONE]\r\n\r\n"), 15)
	f.Add([]byte("event: error\rdata: {\"error\":1}\r\r"), 3)
	f.Add([]byte(":\n\n\n\ndata\n\ndata:\"content\":\"x\"\n\n"), 0)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		whole := &sseScanner{}
		whole.reset()
		whole.feed(in, 1)
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in) + 1
		} else {
			cut = 0
		}
		split := &sseScanner{}
		split.reset()
		split.feed(in[:cut], 1)
		split.feed(in[cut:], 1)
		if whole.done != split.done || whole.sseErr != split.sseErr || whole.events != split.events {
			t.Fatalf("whole %v/%v/%d != split at %d %v/%v/%d", whole.done, whole.sseErr, whole.events,
				cut, split.done, split.sseErr, split.events)
		}
	})
}

// FuzzResponse: any bytes from the upstream give an outcome (an error kind
// or success) without panic or hang.
func FuzzResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"1c\r\ndata: {\"content\":\"x\"}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"), true)
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n"), false)
	f.Add([]byte("HTTP/1.0 503 x\r\nContent-Length: -1\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, resp []byte, stream bool) {
		cli, srv := net.Pipe()
		defer cli.Close()
		go func() {
			defer srv.Close()
			buf := make([]byte, 64)
			if _, err := srv.Read(buf); err != nil {
				return
			}
			_, _ = srv.Write(resp) // unblocked by cli.Close when the client stops reading
		}()
		base := time.Now()
		h := newHTTPConn("pipe", func() int64 { return int64(time.Since(base)) })
		h.c = cli
		h.br.Reset(cli)
		h.sse.reset()
		ex := h.roundTrip([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), stream, time.Now().Add(2*time.Second))
		if ex.kind >= errKindCount {
			t.Fatalf("kind %d out of range", ex.kind)
		}
	})
}
