package balancer

import (
	"sync"
	"sync/atomic"
)

// MaxScheduleLen is the longest precomputed round-robin schedule, in picks.
// When the up backends' weights, divided by their greatest common divisor,
// sum to more than this, the round-robin balancer runs nginx's algorithm
// step by step under a mutex instead.
const MaxScheduleLen = 4096

// schedule is one full period of the smooth weighted round-robin sequence
// over the backends that were up at downEpoch == epoch.
type schedule struct {
	epoch uint64
	seq   []*Backend // nil: use the locked step-by-step algorithm
}

// roundRobin is smooth weighted round-robin. The period of the sequence is
// precomputed, so that a pick is one atomic increment and one load; the
// schedule is rebuilt when any backend changes state (downEpoch moves).
type roundRobin struct {
	backends []*Backend
	next     atomic.Uint64
	sched    atomic.Pointer[schedule]

	mu      sync.Mutex // guards rebuilds and the locked algorithm
	current []int64    // nginx's current_weight per backend (locked algorithm)
}

func newRoundRobin(bs []*Backend) *roundRobin {
	rr := &roundRobin{backends: bs, current: make([]int64, len(bs))}
	rr.rebuild(downEpoch.Load())
	return rr
}

// Pick implements Balancer.
func (rr *roundRobin) Pick(c *Choice) *Backend {
	s := rr.sched.Load()
	if epoch := downEpoch.Load(); s.epoch != epoch {
		s = rr.rebuild(epoch)
	}
	if s.seq == nil {
		return rr.pickLocked(c)
	}
	n := uint64(len(s.seq))
	if n == 0 {
		return nil
	}
	i := rr.next.Add(1) - 1
	// A backend may have gone down since the schedule was built, or be
	// excluded: walk on to the next eligible backend of the sequence (the
	// next Pick rebuilds).
	for k := uint64(0); k < n; k++ {
		if b := s.seq[(i+k)%n]; c.eligible(b) {
			return b
		}
	}
	return nil
}

// rebuild computes the schedule for the current up set.
func (rr *roundRobin) rebuild(epoch uint64) *schedule {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if s := rr.sched.Load(); s != nil && s.epoch == epoch {
		return s
	}
	var up []*Backend
	var weights []int64
	g := int64(0)
	for _, b := range rr.backends {
		if !b.down.Load() {
			up = append(up, b)
			weights = append(weights, b.weight())
			g = gcd(g, b.weight())
		}
	}
	s := &schedule{epoch: epoch, seq: []*Backend{}}
	var sum int64
	for i := range weights {
		weights[i] /= g
		sum += weights[i]
	}
	if sum > MaxScheduleLen {
		s.seq = nil
	} else if sum > 0 {
		idx := smoothSequence(weights, int(sum))
		s.seq = make([]*Backend, len(idx))
		for k, i := range idx {
			s.seq[k] = up[i]
		}
	}
	rr.sched.Store(s)
	return s
}

// pickLocked runs one step of nginx's smooth weighted round-robin over the
// up backends (used when the schedule would be longer than MaxScheduleLen).
func (rr *roundRobin) pickLocked(c *Choice) *Backend {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	best := -1
	var total int64
	for i, b := range rr.backends {
		if !c.eligible(b) {
			continue
		}
		w := b.weight()
		rr.current[i] += w
		total += w
		if best < 0 || rr.current[i] > rr.current[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	rr.current[best] -= total
	return rr.backends[best]
}

// smoothSequence returns one period (length sum) of nginx's smooth weighted
// round-robin over weights: each step adds every weight to its current
// weight, picks the largest current weight (the first on ties) and
// subtracts the total from it. After sum steps all current weights are 0
// again, so the period repeats exactly.
func smoothSequence(weights []int64, sum int) []int {
	current := make([]int64, len(weights))
	seq := make([]int, 0, sum)
	for range sum {
		best := 0
		for i, w := range weights {
			current[i] += w
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= int64(sum)
		seq = append(seq, best)
	}
	return seq
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
