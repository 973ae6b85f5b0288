package http1

import (
	"testing"
)

// chatHead (request_test.go) is a ~400-byte OpenAI chat POST head.

func BenchmarkFindHeadEnd(b *testing.B) {
	buf := []byte(chatHead + `{"model":"m","messages":[]}`)
	b.SetBytes(int64(len(chatHead)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n := FindHeadEnd(buf); n != len(chatHead) {
			b.Fatal(n)
		}
	}
}

func BenchmarkParseRequestHead(b *testing.B) {
	head := []byte(chatHead)
	var r Request
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ParseRequestHead(head, nil); err != nil {
			b.Fatal(err)
		}
	}
}

const sseRespHead = "HTTP/1.1 200 OK\r\n" +
	"Content-Type: text/event-stream; charset=utf-8\r\n" +
	"Cache-Control: no-cache\r\n" +
	"Date: Sun, 29 Nov 2026 19:00:00 GMT\r\n" +
	"X-Request-Id: 7f1c2a9e-3b4d-4e5f-8a6b-7c8d9e0f1a2b\r\n" +
	"Transfer-Encoding: chunked\r\n" +
	"\r\n"

func BenchmarkParseResponseHead(b *testing.B) {
	head := []byte(sseRespHead)
	var r Response
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ParseResponseHead(head, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// sseChunks is a chunked stream of 50 SSE token events, as an upstream LLM sends them.
var sseChunks = func() []byte {
	ev := []byte(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" token"}}]}` + "\n\n")
	var out []byte
	for i := 0; i < 50; i++ {
		out = AppendChunkHeader(out, len(ev))
		out = append(out, ev...)
		out = append(out, '\r', '\n')
	}
	return append(out, LastChunk...)
}()

func BenchmarkChunkedDecoderNext(b *testing.B) {
	var d ChunkedDecoder
	b.SetBytes(int64(len(sseChunks)))
	b.ReportAllocs()
	for b.Loop() {
		d.Reset()
		src := sseChunks
		for len(src) > 0 {
			_, n, err := d.Next(src)
			if err != nil {
				b.Fatal(err)
			}
			src = src[n:]
		}
		if !d.Done() {
			b.Fatal("not done")
		}
	}
}

func BenchmarkRouterView(b *testing.B) {
	var r Request
	if err := r.ParseRequestHead([]byte(chatHead), nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.MethodBytes()
		_ = r.HostBytes()
		_ = r.PathBytes()
		if _, ok := r.HeaderValue("x-request-id"); !ok {
			b.Fatal("header")
		}
		if _, ok := r.QueryValue("stream"); !ok {
			b.Fatal("query")
		}
		if !r.IsHopByHop([]byte("Connection")) {
			b.Fatal("hop")
		}
	}
}

func BenchmarkAppendChunkHeader(b *testing.B) {
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendChunkHeader(dst[:0], 4096)
	}
}

// TestZeroAllocsWhenWarm fails the normal test run if a hot-path method starts allocating.
func TestZeroAllocsWhenWarm(t *testing.T) {
	head := []byte(chatHead)
	var r Request
	_ = r.ParseRequestHead(head, nil)
	var resp Response
	_ = resp.ParseResponseHead([]byte(sseRespHead), nil)
	var d ChunkedDecoder
	cases := map[string]func(){
		"ParseRequestHead":  func() { _ = r.ParseRequestHead(head, nil) },
		"ParseResponseHead": func() { _ = resp.ParseResponseHead([]byte(sseRespHead), nil) },
		"ChunkedDecoder.Next": func() {
			d.Reset()
			for src := sseChunks; len(src) > 0; {
				_, n, _ := d.Next(src)
				src = src[n:]
			}
		},
		"router view": func() {
			_, _ = r.HeaderValue("X-Request-Id")
			_, _ = r.QueryValue("api-version")
			_ = r.IsHopByHop([]byte("x-whatever"))
			_ = r.HostBytes()
		},
		"parse error": func() { _ = r.ParseRequestHead([]byte("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), nil) },
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %.1f allocs per run, want 0", name, n)
		}
	}
}
