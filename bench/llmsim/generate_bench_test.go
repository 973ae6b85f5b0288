package llmsim

import (
	"strings"
	"testing"
)

// BenchmarkTokenEvent formats one chat.completion.chunk event (the per-token work besides
// the write): 0 allocs/op.
func BenchmarkTokenEvent(b *testing.B) {
	g := jobPool.Get().(*job)
	g.p = &genParams{kind: kindChat, stream: true, model: "internal/model-v1"}
	g.makeHead("chatcmpl-llmsim-8000-1", 1700000000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		g.tokenEvent(vocab[i%len(vocab)], false)
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
