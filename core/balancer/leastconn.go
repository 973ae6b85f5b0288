package balancer

import "sync/atomic"

// leastConn picks the up backend with the least Active/Weight. The scan
// starts at a rotating offset, so backends that tie are picked in turn.
type leastConn struct {
	backends []*Backend
	next     atomic.Uint64
}

// Pick implements Balancer.
func (lc *leastConn) Pick(c *Choice) *Backend {
	n := uint64(len(lc.backends))
	if n == 0 {
		return nil
	}
	start := lc.next.Add(1) - 1
	var best *Backend
	var bestActive, bestWeight int64
	for k := uint64(0); k < n; k++ {
		b := lc.backends[(start+k)%n]
		if !c.eligible(b) {
			continue
		}
		a, w := b.Active(), b.weight()
		if a < 0 {
			a = 0
		}
		// a/w < bestActive/bestWeight without division.
		if best == nil || a*bestWeight < bestActive*w {
			best, bestActive, bestWeight = b, a, w
		}
	}
	return best
}
