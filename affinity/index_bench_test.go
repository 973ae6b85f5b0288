package affinity

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
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

// fullIndex returns an index holding DefaultMaxEntries entries.
func fullIndex(b *testing.B) *Index {
	x := NewIndex(Config{})
	s := Domain{Route: "r", Model: "m"}.Scope()
	for _, p := range syntheticPrints(8*DefaultMaxEntries/MaxCheckpoints, 99) {
		x.Learn(s, p, 1)
	}
	if x.Len() != DefaultMaxEntries {
		b.Fatalf("index holds %d entries, want %d", x.Len(), DefaultMaxEntries)
	}
	return x
}

// BenchmarkIndexLookupLearnMiss is the index's worst case: a request of 128 checkpoints none
// of which the full index knows, looked up then learned (128 inserts, 128 evictions).
func BenchmarkIndexLookupLearnMiss(b *testing.B) {
	x := fullIndex(b)
	s := Domain{Route: "r", Model: "m"}.Scope()
	ps := syntheticPrints(4*DefaultMaxEntries/MaxCheckpoints, 7) // cycles out before coming back
	cands := benchCandidates()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := ps[i%len(ps)]
		i++
		if _, _, ok := x.Lookup(s, p, cands); ok {
			b.Fatal("unexpected hit")
		}
		x.Learn(s, p, Target(1+i%4))
	}
}

// BenchmarkIndexLookupLearnHit is the follow-up turn: all 128 checkpoints known, looked up
// then learned again (128 refreshes).
func BenchmarkIndexLookupLearnHit(b *testing.B) {
	x := fullIndex(b)
	s := Domain{Route: "r", Model: "m"}.Scope()
	ps := syntheticPrints(DefaultMaxEntries/MaxCheckpoints/2, 7)
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

// BenchmarkIndexParallel runs lookup plus learn of 128 checkpoints from every P (run with
// -cpu 1,2 to see it scale): each goroutine alternates follow-up turns (hits) and new
// conversations (misses) over a shared full index.
func BenchmarkIndexParallel(b *testing.B) {
	x := fullIndex(b)
	s := Domain{Route: "r", Model: "m"}.Scope()
	var seed atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ps := syntheticPrints(64, 1000+seed.Add(1))
		cands := benchCandidates()
		i := 0
		for pb.Next() {
			p := ps[i%len(ps)]
			i++
			x.Lookup(s, p, cands)
			x.Learn(s, p, Target(1+i%4))
		}
	})
}
