package llmsim

import (
	"strings"
	"testing"
)

// BenchmarkTokenEvent formats one chat.completion.chunk event (the per-token work besides
// the write): 0 allocs/op.
func BenchmarkTokenEvent(b *testing.B) {
	g := jobPool.Get().(*job)
	g.p = &genParams{enc: chatEnc, stream: true, model: "internal/model-v1"}
	g.id, g.created, g.deltas = "chatcmpl-llmsim-8000-1", 1700000000, 1
	g.p.enc.makeHead(g)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		g.buf = g.p.enc.appendDelta(g.buf[:0], g, vocab[i%len(vocab)])
		i++
	}
}

// BenchmarkPrefixLookup hashes a 4 KiB prompt into blocks and looks them up (per request).
func BenchmarkPrefixLookup(b *testing.B) {
	c := newKVCache(8192)
	prompt := []byte(strings.Repeat("a shared system prompt. ", 170))
	hashes := appendBlockHashes(nil, prompt, 16, 0)
	c.insert(hashes)
	b.ReportAllocs()
	b.SetBytes(int64(len(prompt)))
	for b.Loop() {
		hashes = appendBlockHashes(hashes[:0], prompt, 16, 0)
		c.lookup(hashes, len(hashes), 16, CountTokens(len(prompt)))
	}
}
