package sse

import "testing"

// typicalChunk is one OpenAI chat.completion.chunk event as vLLM and OpenAI
// stream it (about 230 bytes).
var typicalChunk = []byte("data: {\"id\":\"chatcmpl-8f3a2b1c9d7e4f60a1b2c3d4\",\"object\":\"chat.completion.chunk\",\"created\":1732900000,\"model\":\"internal/model-v1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n")

type countingHandler struct {
	events int
	done   int
	usage  Usage
}

func (h *countingHandler) OnEvent(ev Event) {
	h.events++
	if IsDone(ev.Data) {
		h.done++
		return
	}
	if u, ok := ParseUsage(ev.Data); ok {
		h.usage = u
	}
}

// BenchmarkScanOneEvent scans one typical chunk event per op (including the
// [DONE] check and usage extraction the relay does on every event).
func BenchmarkScanOneEvent(b *testing.B) {
	var s Scanner
	h := &countingHandler{}
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalChunk)))
	for b.Loop() {
		if err := s.Feed(typicalChunk, h); err != nil {
			b.Fatal(err)
		}
	}
	if h.events == 0 {
		b.Fatal("no events")
	}
}

// BenchmarkScanSplitEvent feeds the same event in 3 slices (the copy path).
func BenchmarkScanSplitEvent(b *testing.B) {
	var s Scanner
	h := &countingHandler{}
	p1, p2, p3 := typicalChunk[:40], typicalChunk[40:150], typicalChunk[150:]
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalChunk)))
	for b.Loop() {
		s.Feed(p1, h)
		s.Feed(p2, h)
		s.Feed(p3, h)
	}
}

func BenchmarkParseUsageFinalChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":34,"total_tokens":1234,"prompt_tokens_details":{"cached_tokens":1024}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseUsage(data); !ok {
			b.Fatal("no usage")
		}
	}
}

func BenchmarkAppendErrorEvent(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendErrorEvent(buf[:0], "upstream closed the connection mid-stream", "upstream_error", "upstream_reset")
	}
}

// chatAnswer is a non-streamed chat.completion of about 1 KiB, as vLLM answers it.
var chatAnswer = []byte(`{"id":"chatcmpl-8f3a2b1c9d7e4f60a1b2c3d4","object":"chat.completion","created":1732900000,"model":"internal/model-v1","choices":[{"index":0,"message":{"role":"assistant","content":"` +
	"The quick brown fox jumps over the lazy dog. A proxy that reads the usage of an answer must not keep the answer: it relays it and keeps the counts. \\\"Quoted\\\" text and a\\nnew line are part of it too. The quick brown fox jumps over the lazy dog again, and again, until the answer is about one kibibyte long, which is what a short chat answer weighs. More words follow here to make up the length of a typical answer from a model that was asked a short question and gave a few sentences back." +
	`","tool_calls":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":34,"total_tokens":1234,"prompt_tokens_details":{"cached_tokens":1024}}}`)

// BenchmarkUsageOfJSONAnswer reads the usage of a non-streamed answer relayed in two reads:
// kept whole and parsed at the end (buffered), or followed as it goes by (UsageReader).
func BenchmarkUsageOfJSONAnswer(b *testing.B) {
	p1, p2 := chatAnswer[:512], chatAnswer[512:]
	b.Run("buffered", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		b.SetBytes(int64(len(chatAnswer)))
		for b.Loop() {
			buf = append(buf[:0], p1...)
			buf = append(buf, p2...)
			if _, ok := ParseUsage(buf); !ok {
				b.Fatal("no usage")
			}
		}
	})
	b.Run("reader", func(b *testing.B) {
		var r UsageReader
		b.ReportAllocs()
		b.SetBytes(int64(len(chatAnswer)))
		for b.Loop() {
			r.Reset()
			r.Feed(p1)
			r.Feed(p2)
			if _, ok := r.Usage(); !ok {
				b.Fatal("no usage")
			}
		}
	})
}
