package rollout

import (
	"testing"
	"time"
)

// BenchmarkGapsOnGap is the per-token cost a rollout with an ITL threshold adds to a stream of
// its new revision.
func BenchmarkGapsOnGap(b *testing.B) {
	g := &gaps{}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		g.OnGap(time.Duration(i&1023) * time.Microsecond)
	}
}
