package pipeline

import (
	"sync"

	"github.com/sluice-gw/sluice/core/relay"
)

// relayBufBytes is the size of one upstream read during a relay. Small on purpose: SSE events
// are a few hundred bytes, and thousands of idle streams each pin one buffer.
const relayBufBytes = 16 << 10

// maxPooledBufBytes is the largest small buffer kept for reuse.
const maxPooledBufBytes = 64 << 10

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
	relayBufs = sync.Pool{New: func() any { b := make([]byte, relay.Headroom+relayBufBytes+relay.Tailroom); return &b }}
)

// GetBuf returns an empty pooled buffer for a head or a short write; ReleaseBuf returns it.
func GetBuf() *[]byte { return smallBufs.Get().(*[]byte) }

func getRelayBuf() *[]byte { return relayBufs.Get().(*[]byte) }

// ReleaseBuf returns a buffer handed out by the pipeline (GetBuf, or through Downstream.Send)
// to its pool, told apart by capacity.
func ReleaseBuf(bp *[]byte) {
	switch c := cap(*bp); {
	case c == relay.Headroom+relayBufBytes+relay.Tailroom:
		*bp = (*bp)[:c]
		relayBufs.Put(bp)
	case c <= maxPooledBufBytes:
		*bp = (*bp)[:0]
		smallBufs.Put(bp)
	}
}
