package harness

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cannedUpstream answers every request of exactly reqLen bytes with resp,
// without allocating per request, so that -benchmem shows the client's own
// allocations.
func cannedUpstream(b *testing.B, reqLen int, resp []byte) string {
	url := connServer(b, func(c net.Conn) {
		buf := make([]byte, reqLen)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
	return strings.TrimPrefix(url, "http://")
}

func benchRoundTrip(b *testing.B, workload string, resp string) {
	o := Options{Workload: workload, Path: DefaultPath, Model: DefaultModel}
	g, err := newRequestGen(&o, "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	req, stream := g.next()
	addr := cannedUpstream(b, len(req), []byte(resp))
	base := time.Now()
	c := newHTTPConn(addr, func() int64 { return int64(time.Since(base)) })
	var events int
	c.sse.onFirst = func(int64) { events++ }
	c.sse.onGap = func(int64) { events++ }
	if err := c.connect(time.Second); err != nil {
		b.Fatal(err)
	}
	defer c.close()
	deadline := time.Now().Add(time.Hour)
	b.ReportAllocs()
	b.SetBytes(int64(len(resp)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.sse.reset()
		if ex := c.roundTrip(req, stream, deadline); ex.kind != errNone {
			b.Fatalf("round trip: %v", ex.kind)
		}
	}
	b.StopTimer()
	if stream && events != 16*b.N {
		b.Fatalf("%d content events for %d streams", events, b.N)
	}
}

func BenchmarkRoundTripJSON(b *testing.B) {
	body := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}`
	benchRoundTrip(b, WorkloadJSON, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

func BenchmarkRoundTripSSE(b *testing.B) {
	var body strings.Builder
	chunk := func(s string) {
		body.WriteString(strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n")
	}
	chunk(`data: {"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for i := 0; i < 16; i++ {
		chunk(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n")
	}
	chunk("data: [DONE]\n\n")
	body.WriteString("0\r\n\r\n")
	benchRoundTrip(b, WorkloadSSE, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+body.String())
}

func BenchmarkSSEScannerFeed(b *testing.B) {
	s := &sseScanner{}
	s.onFirst = func(int64) {}
	s.onGap = func(int64) {}
	p := []byte(strings.Repeat(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}`+"\n\n", 16) + "data: [DONE]\n\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for i := 0; i < b.N; i++ {
		s.reset()
		s.feed(p[:100], 1)
		s.feed(p[100:], 2)
		if !s.done || s.events != 16 {
			b.Fatal("bad scan")
		}
	}
}

func BenchmarkRecorderRecord(b *testing.B) {
	r := NewRecorder()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Record(i, int64(i%100000)*1000)
		}
	})
}
