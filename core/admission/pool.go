package admission

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Config is the admission limits of one model pool. A reload changes them in place
// (Pool.SetLimits), so that the requests admitted keep their slots and the waiters their
// places.
type Config struct {
	// MaxConcurrent is the number of active slots (requests admitted and not yet released),
	// at least 1.
	MaxConcurrent int
	// MaxQueued bounds the waiters behind the active slots; 0 refuses every request that
	// finds no free slot.
	MaxQueued int
	// QueueTimeout is the longest a waiter waits for a slot; 0 or less waits until its done
	// channel closes.
	QueueTimeout time.Duration
	// OnWait, when set, is called with the wait of each request admitted after queueing, on
	// the admitted caller's goroutine, for a wait-time histogram. It must not block.
	OnWait func(wait time.Duration)
}

// maxLimit keeps both counts inside their 32-bit halves of the state word.
const maxLimit = math.MaxInt32

// The state word holds the queue length in its high 32 bits and the active count in its low
// 32 bits. queuedOne is one waiter; the others, added to the word, take one waiter or one
// active slot away (two's complement).
const (
	queuedOne     = uint64(1) << 32
	lessQueuedOne = ^(queuedOne - 1)
	lessActiveOne = ^uint64(0)
)

// Pool is the fair admission semaphore of one model pool. Its methods are safe for
// concurrent use.
type Pool struct {
	// state is queued<<32 | active. Every change that depends on both halves is one
	// compare-and-swap, which is what makes the fast path fair: it takes a slot only when
	// no one waits. The queue length changes only under mu, and while anyone waits so does
	// the active count, since neither fast path runs then.
	state    atomic.Uint64
	admitted atomic.Uint64
	_        [48]byte // keep the counters every request touches off the slow path's line

	max       atomic.Uint64 // MaxConcurrent
	maxQueued atomic.Uint64 // MaxQueued
	timeout   atomic.Int64  // QueueTimeout, ns
	onWait    func(time.Duration)

	mu         sync.Mutex
	head, tail *slot // the waiters, oldest first

	waited   atomic.Uint64 // admitted after queueing
	waitNs   atomic.Int64  // their summed wait
	full     atomic.Uint64
	timedOut atomic.Uint64
	canceled atomic.Uint64
}

// New returns a Pool with the limits of c. It returns an error when MaxConcurrent is not in
// [1, 2147483647] or MaxQueued not in [0, 2147483647].
func New(c Config) (*Pool, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{onWait: c.OnWait}
	p.store(c)
	return p, nil
}

// Validate returns New's errors for c, nil when a Pool can have its limits.
func (c Config) Validate() error {
	if c.MaxConcurrent < 1 || c.MaxConcurrent > maxLimit {
		return errors.New("admission: MaxConcurrent must be between 1 and 2147483647")
	}
	if c.MaxQueued < 0 || c.MaxQueued > maxLimit {
		return errors.New("admission: MaxQueued must be between 0 and 2147483647")
	}
	return nil
}

func (p *Pool) store(c Config) {
	p.max.Store(uint64(c.MaxConcurrent))
	p.maxQueued.Store(uint64(c.MaxQueued))
	p.timeout.Store(int64(c.QueueTimeout))
}

// SetLimits changes the pool's MaxConcurrent, MaxQueued and QueueTimeout to c's (its OnWait
// stays), for a reload: the requests admitted keep their slots and the waiters their places.
// When MaxConcurrent grows, the oldest waiters take the new slots at once; when it shrinks
// below the active count, no one is admitted until fewer than the new limit are active. When
// MaxQueued shrinks below the callers waiting, they stay, and newcomers are refused until
// fewer wait. A new QueueTimeout applies to the waits that begin after the change. It
// returns Validate's error, the limits then unchanged.
func (p *Pool) SetLimits(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.store(c)
	p.admitWaiters()
	return nil
}

// admitWaiters hands the slots a larger MaxConcurrent freed to the oldest waiters. p.mu is
// held, so the queue changes only here; a release may change the active count meanwhile,
// which the compare-and-swap sees.
func (p *Pool) admitWaiters() {
	for p.head != nil {
		st := p.state.Load()
		if st&math.MaxUint32 >= p.max.Load() {
			return
		}
		if !p.state.CompareAndSwap(st, st+lessQueuedOne+1) {
			continue
		}
		w := p.head
		p.unlink(w)
		w.ready <- struct{}{} // buffered: never blocks
	}
}

// TryAcquire takes a free slot when one is free and no one waits for it, without locking,
// allocating or touching a channel. It reports false otherwise, which is not a rejection:
// the caller goes on to Acquire to queue.
func (p *Pool) TryAcquire() (Ticket, bool) {
	if !p.take() {
		return Ticket{}, false
	}
	p.admitted.Add(1)
	return arm(p, getSlot()), true
}

// take increments the active count when a slot is free and the queue is empty.
func (p *Pool) take() bool {
	for {
		s := p.state.Load()
		if s>>32 != 0 || s&math.MaxUint32 >= p.max.Load() {
			return false
		}
		if p.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// Acquire admits the caller: at once when a slot is free and no one waits (as TryAcquire),
// else after waiting its turn in the FIFO queue. It returns ErrQueueFull at once when
// MaxQueued callers already wait, ErrQueueTimeout after QueueTimeout without a slot, and
// ErrCanceled when done is closed before or during the wait; the queued place is then given
// up at once. A nil done is never closed. Only the wait allocates, and it reuses its node.
func (p *Pool) Acquire(done <-chan struct{}) (Ticket, error) {
	if isClosed(done) {
		p.canceled.Add(1)
		return Ticket{}, ErrCanceled
	}
	if t, ok := p.TryAcquire(); ok {
		return t, nil
	}
	return p.wait(done)
}

func isClosed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// enqueued is what enqueue did with a caller.
type enqueued int

const (
	queued   enqueued = iota // joined the tail of the queue
	admitNow                 // a slot was freed and no one waits: took it
	refused                  // the queue is full
)

// wait queues the caller whose fast path found no slot, and waits for its turn.
func (p *Pool) wait(done <-chan struct{}) (Ticket, error) {
	start := time.Now()
	s := getSlot()
	switch p.enqueue(s) {
	case admitNow:
		p.admitted.Add(1)
		return arm(p, s), nil
	case refused:
		putSlot(s)
		p.full.Add(1)
		return Ticket{}, ErrQueueFull
	}
	expired := s.startTimer(time.Duration(p.timeout.Load()))
	select {
	case <-s.ready:
		s.stopTimer()
		return p.admitQueued(s, start), nil
	case <-done:
		return p.leave(s, start, ErrCanceled)
	case <-expired:
		return p.leave(s, start, ErrQueueTimeout)
	}
}

// enqueue puts s at the tail of the queue, unless the queue is full, or a slot came free
// with no one waiting between the caller's fast path and the lock.
func (p *Pool) enqueue(s *slot) enqueued {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		st := p.state.Load()
		q, a := st>>32, st&math.MaxUint32
		switch {
		case q == 0 && a < p.max.Load():
			if p.state.CompareAndSwap(st, st+1) {
				return admitNow
			}
		case q >= p.maxQueued.Load():
			return refused
		default:
			// Fails when a release freed a slot since the load (possible only with no
			// waiters): then the loop takes that slot instead of queueing behind no one.
			if p.state.CompareAndSwap(st, st+queuedOne) {
				p.push(s)
				return queued
			}
		}
	}
}

// admitQueued makes a waiter that was handed a slot an admitted caller.
func (p *Pool) admitQueued(s *slot, start time.Time) Ticket {
	w := time.Since(start)
	p.admitted.Add(1)
	p.waited.Add(1)
	p.waitNs.Add(int64(w))
	if p.onWait != nil {
		p.onWait(w)
	}
	return arm(p, s)
}

// leave takes a waiter whose wait ended with why (timeout or cancellation) out of the queue.
// A release may have handed it a slot in the meantime: a timed-out waiter keeps it (the
// request is served rather than the slot wasted on a retry), a cancelled one passes it on.
func (p *Pool) leave(s *slot, start time.Time, why error) (Ticket, error) {
	s.stopTimer()
	p.mu.Lock()
	if s.queued {
		p.unlink(s)
		p.state.Add(lessQueuedOne)
		p.mu.Unlock()
		putSlot(s)
		p.countRejection(why)
		return Ticket{}, why
	}
	p.mu.Unlock()
	<-s.ready // the hand-over's send may still be on its way; the node must be empty for reuse
	if why == ErrQueueTimeout {
		return p.admitQueued(s, start), nil
	}
	putSlot(s)
	p.canceled.Add(1)
	p.release()
	return Ticket{}, ErrCanceled
}

func (p *Pool) countRejection(why error) {
	if why == ErrQueueTimeout {
		p.timedOut.Add(1)
	} else {
		p.canceled.Add(1)
	}
}

// release gives back one active slot: to the head of the queue when someone waits, else to
// the free slots. While more are active than a MaxConcurrent lowered by SetLimits allows, a
// slot given back is freed, not handed on.
func (p *Pool) release() {
	for {
		s := p.state.Load()
		if s>>32 != 0 && s&math.MaxUint32 <= p.max.Load() {
			p.handOff()
			return
		}
		if p.state.CompareAndSwap(s, s-1) {
			return
		}
	}
}

// handOff passes the caller's slot to the oldest waiter; the active count stays, so no
// newcomer can see the slot free in between.
func (p *Pool) handOff() {
	p.mu.Lock()
	w := p.head
	if w == nil {
		// The waiters left between release's load and the lock: free the slot. The queue
		// is empty and stays so while mu is held, so the decrement needs no check.
		p.state.Add(lessActiveOne)
		p.mu.Unlock()
		return
	}
	p.unlink(w)
	p.state.Add(lessQueuedOne)
	p.mu.Unlock()
	w.ready <- struct{}{} // buffered: never blocks
}

// push appends s to the queue. p.mu is held.
func (p *Pool) push(s *slot) {
	s.queued = true
	s.prev, s.next = p.tail, nil
	if p.tail == nil {
		p.head = s
	} else {
		p.tail.next = s
	}
	p.tail = s
}

// unlink takes s out of the queue. p.mu is held.
func (p *Pool) unlink(s *slot) {
	if s.prev == nil {
		p.head = s.next
	} else {
		s.prev.next = s.next
	}
	if s.next == nil {
		p.tail = s.prev
	} else {
		s.next.prev = s.prev
	}
	s.prev, s.next, s.queued = nil, nil, false
}

// Stats is a Pool's state and counters, for a metrics stage: queue depth (Queued), wait time
// (WaitTotal / AdmittedAfterWait, or the OnWait callback for a histogram) and rejections by
// reason. Counters count requests since the Pool was made; each field is read atomically,
// the set is not one snapshot.
type Stats struct {
	Active int // slots held now, 0..MaxConcurrent
	Queued int // callers waiting now, 0..MaxQueued

	Admitted          uint64        // callers given a slot, at once or after queueing
	AdmittedAfterWait uint64        // of Admitted, those that queued first
	WaitTotal         time.Duration // summed wait of AdmittedAfterWait, in nanoseconds

	RejectedFull    uint64 // refused at once: the queue was full (ErrQueueFull)
	RejectedTimeout uint64 // refused after waiting QueueTimeout (ErrQueueTimeout)
	Canceled        uint64 // left before admission: done closed (ErrCanceled)
}

// Rejected is the sum of the rejections of every reason; Admitted + Rejected counts every
// Acquire call and every TryAcquire that took a slot.
func (s Stats) Rejected() uint64 { return s.RejectedFull + s.RejectedTimeout + s.Canceled }

// Stats returns the pool's current state and counters.
func (p *Pool) Stats() Stats {
	st := p.state.Load()
	return Stats{
		Active:            int(st & math.MaxUint32),
		Queued:            int(st >> 32),
		Admitted:          p.admitted.Load(),
		AdmittedAfterWait: p.waited.Load(),
		WaitTotal:         time.Duration(p.waitNs.Load()),
		RejectedFull:      p.full.Load(),
		RejectedTimeout:   p.timedOut.Load(),
		Canceled:          p.canceled.Load(),
	}
}
