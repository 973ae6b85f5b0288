package ingress_test

import (
	"context"
	"testing"

	"github.com/coder/websocket"
)

// BenchmarkWebSocketEcho measures echo round trips of 256-byte messages through each engine's
// tunnel, and straight to the upstream for comparison (report ratios, not absolute times):
//
//	go test -run '^$' -bench WebSocketEcho -benchmem ./core/ingress/
func BenchmarkWebSocketEcho(b *testing.B) {
	msg := make([]byte, 256)
	run := func(b *testing.B, addr string) {
		ctx := context.Background()
		c, _, err := websocket.Dial(ctx, "ws://"+addr+"/socket", nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.CloseNow()
		b.SetBytes(int64(2 * len(msg)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.Read(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		u := newWSUpstream(b)
		run(b, u.ln.Addr().String())
	})
	for _, ce := range contractEngines {
		b.Run(ce.name, func(b *testing.B) {
			u := newWSUpstream(b)
			tr := startWSTransport(b, ce, u.ln.Addr().String(), "")
			run(b, tr.Addr())
		})
	}
}
