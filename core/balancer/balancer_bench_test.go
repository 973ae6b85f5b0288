package balancer

import "testing"

func benchmarkPick(b *testing.B, strategy string, n int) {
	weights := make([]int, n)
	for i := range weights {
		weights[i] = 1 + i%3
	}
	bal, err := New(strategy, backends(weights...))
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
