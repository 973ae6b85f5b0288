// Package balancer picks the backend (one server of a service) that serves
// the next request. Strategies: smooth weighted round-robin (nginx's
// algorithm, "round-robin" and its alias "weighted"), least-connections
// (fewest in-flight requests per unit of weight) and weighted random.
//
// Every Balancer is safe for concurrent use and lock-free on the hot path
// (the round-robin strategy takes a mutex only to rebuild its schedule after
// a backend goes down or comes back up, or when the weights are too large
// for a precomputed schedule; see MaxScheduleLen).
package balancer

import (
	"sync/atomic"
	"time"
)

// MaxWeight is the largest backend weight New accepts. It keeps
// Active×Weight products of the least-connections strategy far from
// overflow.
const MaxWeight = 1 << 20

// downEpoch counts up/down transitions of all backends. Balancers compare it
// with the value their schedule was built at to notice health changes
// without scanning their backends on every pick.
var downEpoch atomic.Uint64

// Backend is one upstream server of a service as the balancer sees it.
// Create it with a composite literal; the zero value is an up backend of
// weight 1. A Backend may be shared by several balancers (for example the
// old and the new snapshot during a config reload).
type Backend struct {
	// ID is the caller's handle for the backend (an index into the
	// service's server list); the balancer does not interpret it.
	ID int
	// Name labels the backend in logs and metrics (for example its URL).
	Name string
	// Weight is the backend's share of traffic relative to the other
	// backends of the service, 1..MaxWeight; 0 means 1. It must not change
	// after the backend is passed to New.
	Weight int
	// Active is the number of requests in flight to the backend. The
	// caller maintains it with Acquire and Release; the least-connections
	// strategy reads it.
	Active atomic.Int64

	down atomic.Bool
	// Passive health: consecutive connect failures eject the backend until ejectedUntil
	// (monotonic ns since epoch), for a backoff that doubles with each one.
	connectFails atomic.Int32
	ejectedUntil atomic.Int64
	// An upstream's refusal with a Retry-After keeps the backend out until refusedUntil
	// (monotonic ns since epoch), even when every backend is out: the server is alive and
	// asked to be left alone, so a guess at it would only be refused again.
	refusedUntil  atomic.Int64
	refusedStatus atomic.Int32
	// Active is written by every request on every core: keep it off the
	// cache lines of neighbouring backends (false sharing).
	_ [cacheLinePad]byte
}

// cacheLinePad separates the hot counters of backends allocated together.
const cacheLinePad = 64

// Acquire records one more in-flight request on b (call it when a request
// is sent to the backend picked by Pick).
func (b *Backend) Acquire() { b.Active.Add(1) }

// Release records the end of a request counted by Acquire (response fully
// relayed, failed or cancelled). Every Acquire needs exactly one Release.
func (b *Backend) Release() { b.Active.Add(-1) }

// SetDown marks b as down (true: health check failing, never picked) or up
// (false). It is safe to call concurrently with Pick; a pick that races with
// the transition may still return b once.
func (b *Backend) SetDown(down bool) {
	if b.down.Swap(down) != down {
		downEpoch.Add(1)
	}
}

// Down reports whether b is marked down, ejected by passive health or refusing requests for
// the time its Retry-After asked.
func (b *Backend) Down() bool { return b.down.Load() || b.Ejected() || b.refusingNow() }

// Passive health backoff bounds: the first connect failure ejects a backend for
// MinEjection, each further consecutive one doubles it, up to MaxEjection.
const (
	MinEjection = time.Second
	MaxEjection = 30 * time.Second
)

// epoch anchors the monotonic clock of ejections.
var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// ConnectFailed records that a connect to b failed (nothing was sent): b is skipped by every
// strategy for a backoff of MinEjection, doubled for each consecutive failure up to
// MaxEjection, so that requests stop paying for a dead server. After the backoff b is tried
// again; a success (ConnectSucceeded) ends the streak.
//
// Failures while b is already ejected do not lengthen the backoff: they are requests that
// picked b before the ejection, and a burst of them is one failure of the server, not many.
func (b *Backend) ConnectFailed() {
	now := monoNow()
	if u := b.ejectedUntil.Load(); u != 0 && now < u {
		return
	}
	n := b.connectFails.Add(1)
	d := MinEjection << min(n-1, 5)
	b.ejectedUntil.Store(now + int64(min(d, MaxEjection)))
}

// EjectFor keeps b out of rotation for d without counting a connect failure (passive
// health's ejection after failed responses). A pick may still take b when every backend is
// out (Choice.IgnoreEjection).
func (b *Backend) EjectFor(d time.Duration) {
	until := monoNow() + int64(d)
	for {
		u := b.ejectedUntil.Load()
		if u >= until || b.ejectedUntil.CompareAndSwap(u, until) {
			return
		}
	}
}

// RefuseFor keeps b out of rotation for d: the server answered status (429 or 503) with a
// Retry-After of d (RFC 9110 §10.2.3). Unlike an ejection, no pick takes b before then, even
// when no other backend is left; Refusing says until when, for the gateway's own answer. A
// later refusal that asks for less does not shorten an earlier one.
func (b *Backend) RefuseFor(status int, d time.Duration) {
	until := monoNow() + int64(d)
	for {
		u := b.refusedUntil.Load()
		if u >= until {
			return
		}
		if b.refusedUntil.CompareAndSwap(u, until) {
			b.refusedStatus.Store(int32(status))
			return
		}
	}
}

// Refusing reports whether b is refusing requests now, with the status it refused with and
// how long it has left to wait (> 0).
func (b *Backend) Refusing() (status int, left time.Duration, ok bool) {
	now := monoNow()
	if !b.refusing(now) {
		return 0, 0, false
	}
	return int(b.refusedStatus.Load()), time.Duration(b.refusedUntil.Load() - now), true
}

func (b *Backend) refusing(now int64) bool {
	u := b.refusedUntil.Load()
	return u != 0 && now < u
}

// refusingNow is refusing without reading the clock for a backend that never refused.
func (b *Backend) refusingNow() bool {
	u := b.refusedUntil.Load()
	return u != 0 && monoNow() < u
}

// ConnectSucceeded ends a streak of connect failures.
func (b *Backend) ConnectSucceeded() {
	if b.connectFails.Load() != 0 {
		b.connectFails.Store(0)
		b.ejectedUntil.Store(0)
	}
}

// Ejected reports whether passive health has b out of rotation now.
func (b *Backend) Ejected() bool {
	u := b.ejectedUntil.Load()
	return u != 0 && monoNow() < u
}

// weight returns the effective weight (0 means 1).
func (b *Backend) weight() int64 {
	if b.Weight <= 0 {
		return 1
	}
	return int64(b.Weight)
}
