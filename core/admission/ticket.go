package admission

import (
	"sync"
	"sync/atomic"
	"time"
)

// Ticket is an admitted caller's hold on one active slot of a Pool. It is a small value,
// safe to copy and to release from any goroutine: the first Release frees the slot and
// every later one, from any copy, does nothing, so a stage may release both when the client
// leaves (RequestCtx.OnCancel) and when the request completes. The zero Ticket holds nothing.
type Ticket struct {
	p   *Pool
	s   *slot
	gen uint64 // s.gen while this ticket holds s (odd)
}

// Release gives the slot back at once, to the oldest waiter when someone waits. It reports
// whether this call freed it (false for the zero Ticket and for every call after the first).
func (t Ticket) Release() bool {
	if t.s == nil || !t.s.gen.CompareAndSwap(t.gen, t.gen+1) {
		return false
	}
	putSlot(t.s)
	t.p.release()
	return true
}

// Held reports whether the ticket still holds its slot.
func (t Ticket) Held() bool { return t.s != nil && t.s.gen.Load() == t.gen }

// slot is a pooled record that is first a waiter's queue node (when the caller must wait)
// and then the admitted caller's hold. Its generation makes a Ticket's Release take effect
// once, even after the record was reused by another caller.
type slot struct {
	// gen is odd while a Ticket holds the slot; arm and Release each advance it by one.
	gen atomic.Uint64

	// The queue node, guarded by Pool.mu.
	prev, next *slot
	queued     bool

	ready chan struct{} // the hand-over of a slot to this waiter; capacity 1
	timer *time.Timer   // the waiter's QueueTimeout; made on its first wait
}

// slots recycles slot records: a ticket or a wait needs one, and holding them in a pool
// keeps the fast path and the steady-state wait free of allocations.
var slots = sync.Pool{New: func() any { return &slot{ready: make(chan struct{}, 1)} }}

func getSlot() *slot { return slots.Get().(*slot) }

// putSlot recycles s; it is out of any queue, its ready channel is empty and its timer
// stopped.
func putSlot(s *slot) { slots.Put(s) }

// arm makes s a held slot of p and returns the ticket for it.
func arm(p *Pool, s *slot) Ticket {
	return Ticket{p: p, s: s, gen: s.gen.Add(1)}
}

// startTimer starts the waiter's timeout and returns its channel; nil (never ready) when
// d <= 0, which waits without a limit.
func (s *slot) startTimer(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	return s.timer.C
}

// stopTimer stops the waiter's timeout. Since Go 1.23 a stopped timer's channel holds no
// stale tick, so the next wait's Reset starts clean.
func (s *slot) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
	}
}
