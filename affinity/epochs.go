package affinity

import (
	"math"
	"sync/atomic"
)

// Epochs remembers, for each of a router's n backends (by position), the epoch its hints
// were learned in: the count of its restarts, which workers report in their observation. A
// backend that restarted lost its KV cache, so its hints in the index lead to an empty cache;
// See drops them when it sees the backend in another epoch, and the backend's conversations
// are then placed as new ones (rendezvous hashing, or a backend that still holds part of
// them). It is safe for concurrent use and allocates nothing after NewEpochs.
type Epochs struct {
	seen []atomic.Int64
}

// unseen marks a backend not yet seen.
const unseen = math.MinInt64

// NewEpochs returns the epochs of n backends, none seen yet.
func NewEpochs(n int) *Epochs {
	e := &Epochs{seen: make([]atomic.Int64, n)}
	for i := range e.seen {
		e.seen[i].Store(unseen)
	}
	return e
}

// See records that backend i, named t in x, is in epoch epoch, and drops every hint of t
// from x (Index.ForgetTarget) when it was seen before in another epoch. Call it for each
// candidate before Index.Choose. A backend beyond n is ignored, and a nil Epochs sees nothing.
func (e *Epochs) See(x *Index, i int, t Target, epoch int64) {
	if e == nil || i >= len(e.seen) {
		return
	}
	s := &e.seen[i]
	if old := s.Load(); old != epoch && s.CompareAndSwap(old, epoch) && old != unseen {
		x.ForgetTarget(t)
	}
}

// Current reports whether backend i is still in epoch epoch as last seen (true for a backend
// beyond n, and for a nil Epochs): a caller learns a response only then, since a restart
// since the choice dropped the backend's hints and the response may come from before it.
func (e *Epochs) Current(i int, epoch int64) bool {
	return e == nil || i >= len(e.seen) || e.seen[i].Load() == epoch
}
