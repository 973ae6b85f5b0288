package affinity

import (
	"math"
	"sync"
	"sync/atomic"
	"weak"
)

// Epochs remembers, for each of a router's n backends (by position), the epoch its hints
// were learned in: the count of its restarts, which workers report in their observation. A
// backend that restarted lost its KV cache, so its hints in the index lead to an empty cache;
// See drops them when it sees the backend in another epoch, and the backend's conversations
// are then placed as new ones (rendezvous hashing, or a backend that still holds part of
// them). It is safe for concurrent use and allocates nothing after it is made.
type Epochs struct {
	seen []*atomic.Int64
}

// unseen marks a backend not yet seen.
const unseen = math.MinInt64

func newEpoch() *atomic.Int64 {
	s := new(atomic.Int64)
	s.Store(unseen)
	return s
}

// NewEpochs returns the epochs of n backends, none seen yet, shared with no other Epochs.
func NewEpochs(n int) *Epochs {
	e := &Epochs{seen: make([]*atomic.Int64, n)}
	for i := range e.seen {
		e.seen[i] = newEpoch()
	}
	return e
}

// epochBook is an Index's epoch of each backend its hints were learned for, by the key of
// the backend (Index.Epochs). It holds an epoch weakly: only while an Epochs of the index
// holds it, so that it grows no larger than the backends of the routers in use.
type epochBook struct {
	mu    sync.Mutex
	cells map[uint64]weak.Pointer[atomic.Int64]
}

// Epochs returns the epochs of the backends keys names (backend i by keys[i]) for the
// routers whose hints x holds. Backends of the same key share one epoch across every Epochs
// of x: the Epochs a reload builds goes on from those of the routers it replaces, so that a
// restart that falls between the last request before the reload and the first after it drops
// the hints the reload kept, and two routers over one backend drop its hints once. A key is
// any identifier of a backend that stays the same across reloads (a hash of its URL).
func (x *Index) Epochs(keys []uint64) *Epochs {
	b := &x.epochs
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cells == nil {
		b.cells = map[uint64]weak.Pointer[atomic.Int64]{}
	}
	for k, p := range b.cells {
		if p.Value() == nil {
			delete(b.cells, k) // no Epochs holds it any more
		}
	}
	e := &Epochs{seen: make([]*atomic.Int64, len(keys))}
	for i, k := range keys {
		s := b.cells[k].Value()
		if s == nil {
			s = newEpoch()
			b.cells[k] = weak.Make(s)
		}
		e.seen[i] = s
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
	s := e.seen[i]
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
