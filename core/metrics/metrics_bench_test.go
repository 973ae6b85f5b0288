package metrics

import (
	"testing"
	"time"
)

// BenchmarkRouteUpdates is what one streamed response of 64 reads costs the metrics: its
// first byte, the gaps between reads, and its response.
func BenchmarkRouteUpdates(b *testing.B) {
	r := ForRoute("bench", "up")
	b.ReportAllocs()
	for b.Loop() {
		r.FirstByte(300 * time.Millisecond)
		for i := 0; i < 63; i++ {
			r.Gap(time.Duration(20+i) * time.Millisecond)
		}
		r.Response(200, 2*time.Second, 4096)
	}
}
