package balancer

import "math/rand/v2"

// weightedRandom picks backend i with probability w_i/Σw over the up
// backends. The draw uses math/rand/v2's per-thread generator (lock-free).
type weightedRandom struct {
	backends []*Backend
	cum      []int64 // cum[i] = w_0 + ... + w_i
	total    int64
	uint64n  func(n uint64) uint64 // rand.Uint64N; replaced by a seeded source in tests
}

func newWeightedRandom(bs []*Backend) *weightedRandom {
	wr := &weightedRandom{backends: bs, cum: make([]int64, len(bs)), uint64n: rand.Uint64N}
	for i, b := range bs {
		wr.total += b.weight()
		wr.cum[i] = wr.total
	}
	return wr
}

// Pick implements Balancer.
func (wr *weightedRandom) Pick(c *Choice) *Backend {
	if wr.total == 0 {
		return nil
	}
	r := int64(wr.uint64n(uint64(wr.total)))
	// Binary search for the first cum[i] > r.
	lo, hi := 0, len(wr.cum)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if wr.cum[mid] > r {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	i := lo
	if b := wr.backends[i]; c.eligible(b) {
		return b
	}
	// The draw hit a down or excluded backend: draw again over the eligible
	// ones only. Overall each keeps probability w_i/Σw_eligible.
	var upTotal int64
	for _, b := range wr.backends {
		if c.eligible(b) {
			upTotal += b.weight()
		}
	}
	if upTotal == 0 {
		return nil
	}
	r = int64(wr.uint64n(uint64(upTotal)))
	var last *Backend
	for _, b := range wr.backends {
		if !c.eligible(b) {
			continue
		}
		last = b
		if r -= b.weight(); r < 0 {
			return b
		}
	}
	return last // a backend came back up during the walk
}
