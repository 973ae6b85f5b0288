// Package share spreads requests over shares given in percent, exactly and evenly: the
// traffic split of revisions and the sampled share of a mirror. Both use the same rule as
// nginx's smooth weighted round-robin, so that over any window of 100 requests (10,000 for
// fractions of a percent) every share gets its part to the request, and no share gets two
// requests in a row more than its weight demands.
package share

import (
	"math"
	"sync"
	"sync/atomic"
)

// Scale is the resolution of a share: basis points (a share of 12.34% is 1234).
const Scale = 10_000

// BasisPoints converts a percentage (0..100, fractions allowed) to basis points, rounded.
func BasisPoints(percent float64) int64 {
	return int64(math.Round(min(max(percent, 0), 100) * Scale / 100))
}

// Sampler takes a fixed share of the calls to Take, evenly spaced: with 10% it takes one call
// in ten, every tenth. The zero value takes none. Safe for concurrent use and lock-free.
type Sampler struct {
	bp int64
	n  atomic.Int64
}

// NewSampler returns a sampler taking percent of calls.
func NewSampler(percent float64) *Sampler { return &Sampler{bp: BasisPoints(percent)} }

// Take reports whether this call is in the share: call n (from 1) is taken when
// ⌊n·bp/Scale⌋ > ⌊(n−1)·bp/Scale⌋, so that after n calls exactly ⌊n·bp/Scale⌋ were taken.
func (s *Sampler) Take() bool {
	if s.bp <= 0 {
		return false
	}
	if s.bp >= Scale {
		return true
	}
	n := s.n.Add(1) % Scale // the pattern repeats every Scale calls; keeps the product small
	if n == 0 {
		n = Scale
	}
	return n*s.bp/Scale > (n-1)*s.bp/Scale
}

// Split picks one of several shares in turn, smooth weighted round-robin over their weights
// (basis points): with 90/10 the second share gets the 10th, 20th, … pick, and the counts
// after n picks differ from n·weight/Σweight by less than one. Weights may change at any
// time (a rollout step); the spread then restarts from the new weights. Safe for concurrent
// use (one mutex; a pick is a few additions).
type Split struct {
	mu      sync.Mutex
	weights []int64
	current []int64
	total   int64
}

// NewSplit returns a split over n shares, all of weight 0 (nothing is picked) until Set.
func NewSplit(n int) *Split {
	return &Split{weights: make([]int64, n), current: make([]int64, n)}
}

// Set replaces the weights (basis points, or any non-negative integers) and restarts the
// spread. len(w) must be the number of shares.
func (s *Split) Set(w []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = 0
	for i, x := range w {
		s.weights[i] = max(x, 0)
		s.current[i] = 0
		s.total += s.weights[i]
	}
}

// Weights returns a copy of the weights in force.
func (s *Split) Weights() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.weights...)
}

// Pick returns the index of the next share, or -1 when every weight is 0.
func (s *Split) Pick() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total == 0 {
		return -1
	}
	best := -1
	for i, w := range s.weights {
		s.current[i] += w
		if w > 0 && (best < 0 || s.current[i] > s.current[best]) {
			best = i
		}
	}
	s.current[best] -= s.total
	return best
}
