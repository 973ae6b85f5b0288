package affinity

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// syntheticPrints returns n prints of MaxCheckpoints checkpoints each, with random hashes
// (what distinct 256 KiB conversations give the index).
func syntheticPrints(n int, seed uint64) []*Print {
	r := rand.New(rand.NewPCG(seed, 1))
	ps := make([]*Print, n)
	for i := range ps {
		p := &Print{Scanned: MaxScanBytes, Conversation: r.Uint64()}
		for k := range MaxCheckpoints {
			p.Checkpoints = append(p.Checkpoints, Checkpoint{Hash: r.Uint64(), Prefix: (k + 1) * 2048})
		}
		ps[i] = p
	}
	return ps
}

func benchCandidates() []Candidate {
	return []Candidate{{Target: 1}, {Target: 2}, {Target: 3}, {Target: 4}}
}

// fastClock runs 10,000 times faster than the wall clock: a benchmark's requests, microseconds
// apart, are then tens of milliseconds apart, as a busy gateway's new conversations are, so
// that the entries they displace are older than a second.
func fastClock() func() time.Time {
	start := time.Now()
	return func() time.Time { return start.Add(time.Since(start) * 10000) }
}

// fullIndex returns an index holding DefaultMaxEntries entries of target 1, learned more
// than a second ago (so that new keys may displace them). now nil: the wall clock.
func fullIndex(b *testing.B, now func() time.Time) *Index {
	var back atomic.Int64 // the fill happens a minute ago
	back.Store(int64(time.Minute))
	if now == nil {
		now = time.Now
	}
	x := NewIndex(Config{Now: func() time.Time { return now().Add(-time.Duration(back.Load())) }})
	s := Domain{Route: "r", Model: "m"}.Scope()
	for _, p := range syntheticPrints(8*DefaultMaxEntries/MaxCheckpoints, 99) {
		x.Learn(s, p, 1)
		back.Add(-int64(time.Minute / 256))
	}
	back.Store(0)
	if x.Len() != DefaultMaxEntries {
		b.Fatalf("index holds %d entries, want %d", x.Len(), DefaultMaxEntries)
	}
	runtime.GC() // the setup's garbage is not the benchmark's
	return x
}

// BenchmarkIndexLookupLearnMiss is the index's worst case: a request of 128 checkpoints none
// of which the full index knows, looked up then learned (128 inserts, each displacing the
// least recently learned entry of its set).
func BenchmarkIndexLookupLearnMiss(b *testing.B) {
	x := fullIndex(b, fastClock())
	s := Domain{Route: "r", Model: "m"}.Scope()
	ps := syntheticPrints(4*DefaultMaxEntries/MaxCheckpoints, 7) // cycles out before coming back
	cands := benchCandidates()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := ps[i%len(ps)]
		i++
		x.Lookup(s, p, cands)
		x.Learn(s, p, Target(1+i%4))
	}
}

// BenchmarkIndexLookupLearnHit is the follow-up turn: all 128 checkpoints known, looked up
// then learned again on the same target.
func BenchmarkIndexLookupLearnHit(b *testing.B) {
	x := fullIndex(b, nil)
	s := Domain{Route: "r", Model: "m"}.Scope()
	ps := syntheticPrints(8, 7)
	for _, p := range ps {
		x.Learn(s, p, 2)
	}
	cands := benchCandidates()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := ps[i%len(ps)]
		i++
		if _, _, ok := x.Lookup(s, p, cands); !ok {
			b.Fatal("expected a hit")
		}
		x.Learn(s, p, 2)
	}
}

// BenchmarkIndexParallelFollowUp is the common case from every P (run with -cpu 1,2 to see
// it scale): follow-up turns of a few conversations per goroutine, each looked up (all 128
// checkpoints hit) and learned again on the same target, in a full index.
func BenchmarkIndexParallelFollowUp(b *testing.B) {
	benchParallel(b, fullIndex(b, nil), 4)
}

// BenchmarkIndexParallelNew is the worst case from every P: every request a conversation the
// index does not know, so every Learn takes the exclusive lock and writes 128 sets.
func BenchmarkIndexParallelNew(b *testing.B) {
	benchParallel(b, fullIndex(b, fastClock()), 4*DefaultMaxEntries/MaxCheckpoints)
}

func benchParallel(b *testing.B, x *Index, conversations int) {
	s := Domain{Route: "r", Model: "m"}.Scope()
	var perG [][]*Print
	for g := range runtime.GOMAXPROCS(0) { // RunParallel's goroutines
		perG = append(perG, syntheticPrints(conversations, 1000+uint64(g)))
	}
	var next atomic.Int64
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ps := perG[int(next.Add(1)-1)%len(perG)]
		cands := benchCandidates()
		i := 0
		for pb.Next() {
			j := i % len(ps)
			i++
			x.Lookup(s, ps[j], cands)
			x.Learn(s, ps[j], Target(1+j%4)) // one target per conversation
		}
	})
}

// BenchmarkIndexForgetTarget drops a restarted backend's hints from a full index: a pass
// over its DefaultMaxEntries places under the exclusive lock (here a target it does not
// hold, so that every pass reads the whole index and removes nothing).
func BenchmarkIndexForgetTarget(b *testing.B) {
	x := fullIndex(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		x.ForgetTarget(2)
	}
}
