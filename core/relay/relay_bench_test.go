package relay_test

import (
	"testing"
	"time"

	"github.com/sluice-gw/sluice/core/relay"
)

// sseEvent is one typical chat.completion.chunk event.
const sseEvent = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n"

// BenchmarkFrameSSEEvent is the relay's cost per SSE event re-chunked for the client.
func BenchmarkFrameSSEEvent(b *testing.B) {
	benchSSEEvent(b, func(r *relay.Relay, buf []byte, t0 time.Time) (int, int) {
		lo, hi, _ := r.Frame(buf, len(sseEvent), t0)
		return lo, hi
	})
}

// BenchmarkKeepSSEEvent is the pipeline relay step's cost per SSE event read whole: Keep finds
// that it ended (nothing to keep back) and FrameKept re-chunks it.
func BenchmarkKeepSSEEvent(b *testing.B) {
	benchSSEEvent(b, func(r *relay.Relay, buf []byte, t0 time.Time) (int, int) {
		if r.Keep(buf[relay.Headroom:relay.Headroom+len(sseEvent)], 8<<10) != 0 {
			b.Fatal("a whole event was kept back")
		}
		lo, hi, _ := r.FrameKept(buf, len(sseEvent), t0)
		return lo, hi
	})
}

// benchSSEEvent runs step over sseEvent, re-chunked, once per iteration.
func benchSSEEvent(b *testing.B, step func(r *relay.Relay, buf []byte, t0 time.Time) (lo, hi int)) {
	var r relay.Relay
	t0 := time.Now()
	r.Reset(relay.Chunk, true, t0)
	buf := make([]byte, relay.Headroom+len(sseEvent)+relay.Tailroom)
	b.SetBytes(int64(len(sseEvent)))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf[relay.Headroom:], sseEvent)
		if lo, hi := step(&r, buf, t0); hi-lo <= len(sseEvent) {
			b.Fatal("not framed")
		}
	}
}
