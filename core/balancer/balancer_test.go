package balancer

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func backends(weights ...int) []*Backend {
	bs := make([]*Backend, len(weights))
	for i, w := range weights {
		bs[i] = &Backend{ID: i, Name: string(rune('a' + i)), Weight: w}
	}
	return bs
}

func sequence(b Balancer, n int) string {
	var s strings.Builder
	for range n {
		p := b.Pick(nil)
		if p == nil {
			s.WriteByte('-')
		} else {
			s.WriteString(p.Name)
		}
	}
	return s.String()
}

func mustNew(t testing.TB, strategy string, bs []*Backend) Balancer {
	t.Helper()
	b, err := New(strategy, bs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSmoothWeightedRoundRobinMatchesNginx(t *testing.T) {
	for _, strategy := range []string{RoundRobin, Weighted} {
		b := mustNew(t, strategy, backends(5, 1, 1))
		if got, want := sequence(b, 14), "aabacaa"+"aabacaa"; got != want {
			t.Errorf("%s 5,1,1: %s, want %s", strategy, got, want)
		}
	}
	// Equal weights are plain rotation; a scaled set gives the same
	// sequence (the GCD is divided out).
	if got := sequence(mustNew(t, RoundRobin, backends(0, 1, 1)), 6); got != "abcabc" {
		t.Errorf("1,1,1: %s", got)
	}
	if got := sequence(mustNew(t, RoundRobin, backends(50, 10, 10)), 7); got != "aabacaa" {
		t.Errorf("50,10,10: %s", got)
	}
	if got := sequence(mustNew(t, RoundRobin, backends(3, 2)), 5); got != "ababa" {
		t.Errorf("3,2: %s", got)
	}
}

func TestRoundRobinLargeWeightsUseLockedAlgorithm(t *testing.T) {
	// Σw/gcd = 5003 > MaxScheduleLen: the step-by-step algorithm must give
	// the same smooth sequence as the schedule would.
	bs := backends(5001, 1, 1)
	b := mustNew(t, RoundRobin, bs)
	if s := b.(*roundRobin).sched.Load(); s.seq != nil {
		t.Fatalf("schedule of %d entries precomputed", len(s.seq))
	}
	counts := map[string]int{}
	for range 5003 {
		counts[b.Pick(nil).Name]++
	}
	if counts["a"] != 5001 || counts["b"] != 1 || counts["c"] != 1 {
		t.Fatalf("counts over one period: %v", counts)
	}
	bs[0].SetDown(true)
	defer bs[0].SetDown(false)
	if got := sequence(b, 4); got != "bcbc" {
		t.Fatalf("with a down: %s", got)
	}
}

func TestDownBackendsSkipped(t *testing.T) {
	for _, strategy := range Strategies {
		t.Run(strategy, func(t *testing.T) {
			bs := backends(5, 1, 1)
			b := mustNew(t, strategy, bs)
			bs[0].SetDown(true)
			bs[2].SetDown(true)
			for range 50 {
				if p := b.Pick(nil); p != bs[1] {
					t.Fatalf("picked %v with only b up", p)
				}
			}
			bs[1].SetDown(true)
			if p := b.Pick(nil); p != nil {
				t.Fatalf("picked %s with all down", p.Name)
			}
			bs[0].SetDown(false)
			bs[1].SetDown(false)
			bs[2].SetDown(false)
			seen := map[string]bool{}
			for range 200 {
				seen[b.Pick(nil).Name] = true
			}
			if len(seen) != 3 {
				t.Fatalf("after recovery only %v picked", seen)
			}
		})
	}
}

func TestRoundRobinScheduleFollowsDownSet(t *testing.T) {
	bs := backends(5, 1, 1)
	b := mustNew(t, RoundRobin, bs)
	bs[0].SetDown(true)
	if got := sequence(b, 6); got != "bcbcbc" && got != "cbcbcb" {
		t.Fatalf("a down: %s", got)
	}
	bs[0].SetDown(false)
	counts := map[string]int{}
	for range 70 {
		counts[b.Pick(nil).Name]++
	}
	if counts["a"] != 50 || counts["b"] != 10 || counts["c"] != 10 {
		t.Fatalf("after recovery: %v", counts)
	}
}

func TestEmptyBalancer(t *testing.T) {
	for _, strategy := range Strategies {
		if p := mustNew(t, strategy, nil).Pick(nil); p != nil {
			t.Errorf("%s: empty balancer picked %v", strategy, p)
		}
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New("ewma-magic", backends(1))
	if err == nil || !strings.Contains(err.Error(), `"ewma-magic"`) ||
		!strings.Contains(err.Error(), "round-robin, weighted, least-connections, random") {
		t.Errorf("unknown strategy: %v", err)
	}
	if _, err := New(RoundRobin, []*Backend{nil}); err == nil {
		t.Error("nil backend accepted")
	}
	if _, err := New(Random, backends(-1)); err == nil {
		t.Error("negative weight accepted")
	}
	if _, err := New(Random, backends(MaxWeight+1)); err == nil {
		t.Error("weight above MaxWeight accepted")
	}
}

func TestLeastConnections(t *testing.T) {
	bs := backends(1, 1, 2)
	b := mustNew(t, LeastConnections, bs)
	// All idle: ties rotate through every backend.
	seen := map[string]int{}
	for range 30 {
		seen[b.Pick(nil).Name]++
	}
	if seen["a"] != 10 || seen["b"] != 10 || seen["c"] != 10 {
		t.Fatalf("idle ties: %v", seen)
	}
	bs[0].Acquire()
	bs[1].Acquire()
	bs[2].Acquire() // c: 1/2 < 1/1
	for range 10 {
		if p := b.Pick(nil); p != bs[2] {
			t.Fatalf("picked %s, want c (1 active / weight 2)", p.Name)
		}
	}
	bs[2].Acquire() // c: 2/2 ties with a and b
	bs[1].Release() // b: 0/1
	if p := b.Pick(nil); p != bs[1] {
		t.Fatalf("picked %s, want idle b", p.Name)
	}
	// Simulated load: pick, acquire, release the oldest; active counts
	// stay balanced by weight.
	bs = backends(1, 1, 2)
	b = mustNew(t, LeastConnections, bs)
	for range 40 {
		b.Pick(nil).Acquire()
	}
	if a, bb, c := bs[0].Active(), bs[1].Active(), bs[2].Active(); a != 10 || bb != 10 || c != 20 {
		t.Fatalf("active after 40 picks: %d %d %d, want 10 10 20", a, bb, c)
	}
}

func TestWeightedRandomDistribution(t *testing.T) {
	bs := backends(5, 3, 2, 0)
	b := mustNew(t, Random, bs).(*weightedRandom)
	b.uint64n = rand.New(rand.NewPCG(1, 2)).Uint64N
	const picks = 200000
	counts := make([]int, len(bs))
	for range picks {
		counts[b.Pick(nil).ID]++
	}
	want := []float64{5.0 / 11, 3.0 / 11, 2.0 / 11, 1.0 / 11}
	for i, c := range counts {
		if got := float64(c) / picks; math.Abs(got-want[i]) > 0.005 {
			t.Errorf("backend %d: share %.4f, want %.4f±0.005", i, got, want[i])
		}
	}
	// With a down, the others keep their relative weights.
	bs[0].SetDown(true)
	defer bs[0].SetDown(false)
	clear(counts)
	for range picks {
		counts[b.Pick(nil).ID]++
	}
	want = []float64{0, 3.0 / 6, 2.0 / 6, 1.0 / 6}
	for i, c := range counts {
		if got := float64(c) / picks; math.Abs(got-want[i]) > 0.005 {
			t.Errorf("a down, backend %d: share %.4f, want %.4f±0.005", i, got, want[i])
		}
	}
}

func TestConcurrentPickWhileFlapping(t *testing.T) {
	for _, strategy := range Strategies {
		t.Run(strategy, func(t *testing.T) {
			bs := backends(3, 2, 1, 1)
			b := mustNew(t, strategy, bs)
			stop := make(chan struct{})
			var flapper sync.WaitGroup
			flapper.Add(1)
			go func() { // backends 1..3 flap; backend 0 stays up
				defer flapper.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					bs[1+i%3].SetDown(i%2 == 0)
				}
			}()
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20000 {
						p := b.Pick(nil)
						if p == nil {
							t.Error("nil pick while backend 0 is up")
							return
						}
						p.Acquire()
						p.Release()
					}
				}()
			}
			wg.Wait()
			close(stop)
			flapper.Wait()
			for _, x := range bs {
				x.SetDown(false)
				if x.Active() != 0 {
					t.Errorf("backend %d: active %d after all releases", x.ID, x.Active())
				}
			}
		})
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	for _, strategy := range Strategies {
		b := mustNew(t, strategy, backends(5, 1, 1))
		if n := testing.AllocsPerRun(1000, func() { b.Pick(nil) }); n != 0 {
			t.Errorf("%s: Pick allocates %v times", strategy, n)
		}
	}
}

// AcquireFrom counts a request only on the count its caller judged: one that lost the count
// to another request in between counts nothing.
func TestAcquireFromCountsOnlyOnTheCountJudged(t *testing.T) {
	var b Backend
	if !b.AcquireFrom(0) || b.Active() != 1 {
		t.Fatalf("AcquireFrom(0) on an idle backend: active %d", b.Active())
	}
	if b.AcquireFrom(0) || b.Active() != 1 {
		t.Fatalf("AcquireFrom(0) on a backend with one in flight counted: active %d", b.Active())
	}
	shared := &State{}
	x, y := &Backend{State: shared}, &Backend{State: shared}
	x.Acquire()
	if y.AcquireFrom(0) || !y.AcquireFrom(1) || x.Active() != 2 {
		t.Fatalf("backends sharing a state count on one: active %d", x.Active())
	}
}
