package admission

import (
	"testing"
	"time"
)

// BenchmarkAcquireRelease is the fast path with room, one goroutine: 0 allocs/op.
func BenchmarkAcquireRelease(b *testing.B) {
	p := newPool(b, Config{MaxConcurrent: 64, MaxQueued: 64, QueueTimeout: time.Second})
	b.ReportAllocs()
	for b.Loop() {
		tk, err := p.Acquire(nil)
		if err != nil {
			b.Fatal(err)
		}
		tk.Release()
	}
}

// BenchmarkAcquireReleaseParallel is the fast path with room for every goroutine: the cost
// is the shared state word's cache line.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	p := newPool(b, Config{MaxConcurrent: 1 << 20, MaxQueued: 64, QueueTimeout: time.Second})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := p.Acquire(nil)
			if err != nil {
				b.Error(err)
				return
			}
			tk.Release()
		}
	})
}

// BenchmarkQueued is the queued path under contention: 8 goroutines per CPU share 1 slot,
// so nearly every Acquire waits its turn and every Release hands the slot over.
func BenchmarkQueued(b *testing.B) {
	p := newPool(b, Config{MaxConcurrent: 1, MaxQueued: 1 << 16, QueueTimeout: time.Minute})
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := p.Acquire(nil)
			if err != nil {
				b.Error(err)
				return
			}
			tk.Release()
		}
	})
	s := p.Stats()
	b.ReportMetric(float64(s.AdmittedAfterWait)/float64(s.Admitted), "queued/op")
}
