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
// weight 1 with a State of its own. A Backend may be shared by several
// balancers, and several Backends (one per snapshot of the configuration) may
// share the State of the server they stand for.
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
	// State is the server's live state: its requests in flight and its
	// passive-health ejection. Backends of successive configurations that
	// stand for the same server share one, so that what one snapshot counts
	// the next balances on. Nil uses a State of the backend's own. It must
	// not change after the backend is passed to New.
	State *State

	// down is the judgement of the snapshot's own checks (an active health
	// check, a scaler's readiness), set while a new snapshot compiles: it is
	// not shared, so that a configuration that is refused changes nothing.
	// It sits with the fields every pick reads, before own's hot counter.
	down atomic.Bool
	own  State
}

// State is what the balancer knows of a server beyond one configuration:
// the requests in flight to it, its passive-health ejection and a Retry-After
// refusal. The zero
// value has nothing in flight and is in rotation. A State must not be copied
// after first use.
type State struct {
	// active is the number of requests in flight (Acquire, Release).
	active atomic.Int64
	// Passive health: consecutive connect failures eject the backend until ejectedUntil
	// (monotonic ns since epoch), for a backoff that doubles with each one.
	connectFails atomic.Int32
	ejectedUntil atomic.Int64
	// An upstream's refusal with a Retry-After keeps the server out until the time in
	// refused (monotonic ns since epoch, shifted left one bit; the low bit is 1 for a 503,
	// 0 for a 429), so that the time and its status change together.
	refused atomic.Int64
	// active is written by every request on every core: keep it off the
	// cache lines of neighbouring states (false sharing).
	_ [cacheLinePad]byte
}

// cacheLinePad separates the hot counters of states allocated together.
const cacheLinePad = 64

// state returns the State b counts on: the shared one, or its own.
func (b *Backend) state() *State {
	if s := b.State; s != nil {
		return s
	}
	return &b.own
}

// SharesState reports whether b and o count on one State: they stand for the
// same server in two configurations, and a request counted on one is counted
// on both.
func (b *Backend) SharesState(o *Backend) bool { return b.state() == o.state() }

// Active returns the number of requests in flight to the backend's server,
// counted by Acquire and Release on every Backend sharing its State; the
// least-connections strategy reads it.
func (b *Backend) Active() int64 { return b.state().active.Load() }

// Acquire records one more in-flight request on b (call it when a request
// is sent to the backend picked by Pick).
func (b *Backend) Acquire() { b.state().active.Add(1) }

// AcquireFrom records one more in-flight request on b if exactly n are in
// flight now (as Active returned), and reports whether it did. A caller that
// judged b by its count n (is there room left?) takes b with it, and the
// judgement holds for the count the request joins: when another request was
// counted or released in between, nothing is recorded and the caller judges
// again with the new count. Every AcquireFrom that reports true needs exactly
// one Release.
func (b *Backend) AcquireFrom(n int64) bool { return b.state().active.CompareAndSwap(n, n+1) }

// Release records the end of a request counted by Acquire or AcquireFrom
// (response fully relayed, failed or cancelled). Every Acquire needs exactly
// one Release.
func (b *Backend) Release() { b.state().active.Add(-1) }

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
	st, now := b.state(), monoNow()
	if u := st.ejectedUntil.Load(); u != 0 && now < u {
		return
	}
	n := st.connectFails.Add(1)
	d := MinEjection << min(n-1, 5)
	st.ejectedUntil.Store(now + int64(min(d, MaxEjection)))
}

// EjectFor keeps b out of rotation for d without counting a connect failure (passive
// health's ejection after failed responses). A pick may still take b when every backend is
// out (Choice.IgnoreEjection).
func (b *Backend) EjectFor(d time.Duration) {
	st, until := b.state(), monoNow()+int64(d)
	for {
		u := st.ejectedUntil.Load()
		if u >= until || st.ejectedUntil.CompareAndSwap(u, until) {
			return
		}
	}
}

// RefuseFor keeps b out of rotation for d: the server answered status (429 or 503) with a
// Retry-After of d (RFC 9110 §10.2.3). Unlike an ejection, a pick under
// Choice.StrictRefusals does not take b before then even when no other backend is left, and
// Refusing says until when, for the gateway's own answer. A later refusal that asks for less
// does not shorten an earlier one.
func (b *Backend) RefuseFor(status int, d time.Duration) {
	st, until := b.state(), monoNow()+int64(d)
	v := until << 1
	if status == 503 {
		v |= 1
	}
	for {
		u := st.refused.Load()
		if u>>1 >= until || st.refused.CompareAndSwap(u, v) {
			return
		}
	}
}

// Refusing reports whether b is refusing requests now, with the status it refused with (429
// or 503) and how long it has left to wait (> 0).
func (b *Backend) Refusing() (status int, left time.Duration, ok bool) {
	u := b.state().refused.Load()
	now := monoNow()
	if u == 0 || now >= u>>1 {
		return 0, 0, false
	}
	status = 429
	if u&1 != 0 {
		status = 503
	}
	return status, time.Duration(u>>1 - now), true
}

// refusingNow reports whether b is refusing requests now, reading the clock only while a
// refusal is recorded, and clearing one that has passed (see pending).
func (b *Backend) refusingNow() bool {
	st := b.state()
	u := st.refused.Load()
	if u == 0 {
		return false
	}
	if monoNow() < u>>1 {
		return true
	}
	st.refused.CompareAndSwap(u, 0)
	return false
}

// ConnectSucceeded ends a streak of connect failures.
func (b *Backend) ConnectSucceeded() {
	if st := b.state(); st.connectFails.Load() != 0 {
		st.connectFails.Store(0)
		st.ejectedUntil.Store(0)
	}
}

// Ejected reports whether passive health has b out of rotation now.
func (b *Backend) Ejected() bool { return pending(&b.state().ejectedUntil) }

// pending reports whether the time in until (monotonic ns since epoch; 0: none) is still to
// come, and clears it once it has passed: a server's State outlives reloads, so one ejection
// long ago would otherwise cost a clock read on every pick for good.
func pending(until *atomic.Int64) bool {
	u := until.Load()
	if u == 0 {
		return false
	}
	if monoNow() < u {
		return true
	}
	until.CompareAndSwap(u, 0) // a newer time stored meanwhile stays
	return false
}

// weight returns the effective weight (0 means 1).
func (b *Backend) weight() int64 {
	if b.Weight <= 0 {
		return 1
	}
	return int64(b.Weight)
}
