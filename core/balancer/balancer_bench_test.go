package balancer

import "testing"

func benchmarkPick(b *testing.B, strategy string, n int) { benchmarkPickStates(b, strategy, n, false) }

// benchmarkPickStates is benchmarkPick whose backends count on States of their own when
// shared is false, or on States allocated apart, as a snapshot's backends do.
func benchmarkPickStates(b *testing.B, strategy string, n int, shared bool) {
	weights := make([]int, n)
	for i := range weights {
		weights[i] = 1 + i%3
	}
	bs := backends(weights...)
	if shared {
		for _, x := range bs {
			x.State = new(State)
		}
	}
	bal, err := New(strategy, bs)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := bal.Pick(nil)
			p.Acquire()
			p.Release()
		}
	})
}

func BenchmarkPickRoundRobin(b *testing.B)       { benchmarkPick(b, RoundRobin, 8) }
func BenchmarkPickLeastConnections(b *testing.B) { benchmarkPick(b, LeastConnections, 8) }
func BenchmarkPickRandom(b *testing.B)           { benchmarkPick(b, Random, 8) }

// BenchmarkPickLeastConnectionsSharedState is BenchmarkPickLeastConnections over backends
// whose States a reload shares (one pointer more to follow per backend).
func BenchmarkPickLeastConnectionsSharedState(b *testing.B) {
	benchmarkPickStates(b, LeastConnections, 8, true)
}

// BenchmarkPickRoundRobinLocked covers weights too large for a schedule.
func BenchmarkPickRoundRobinLocked(b *testing.B) {
	bal, _ := New(RoundRobin, backends(MaxScheduleLen, 1, 1))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bal.Pick(nil)
		}
	})
}
