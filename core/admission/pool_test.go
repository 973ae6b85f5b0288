package admission

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newPool(t testing.TB, c Config) *Pool {
	t.Helper()
	p, err := New(c)
	require.NoError(t, err)
	return p
}

// hold takes a slot that must be free.
func hold(t testing.TB, p *Pool) Ticket {
	t.Helper()
	tk, ok := p.TryAcquire()
	require.True(t, ok, "no free slot")
	return tk
}

// waitQueued waits until n callers are in p's queue.
func waitQueued(t testing.TB, p *Pool, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Stats().Queued == n }, 5*time.Second, 50*time.Microsecond,
		"expected %d waiters", n)
}

// result is what a background Acquire returned.
type result struct {
	i   int
	tk  Ticket
	err error
}

func acquireAsync(p *Pool, i int, done <-chan struct{}, out chan<- result) {
	go func() {
		tk, err := p.Acquire(done)
		out <- result{i, tk, err}
	}()
}

func recv(t testing.TB, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no answer from Acquire")
		return result{}
	}
}

func requireIdle(t testing.TB, p *Pool) Stats {
	t.Helper()
	s := p.Stats()
	require.Zero(t, s.Active, "active slots leaked")
	require.Zero(t, s.Queued, "waiters left behind")
	return s
}

func TestNewRejectsBadLimits(t *testing.T) {
	for _, c := range []Config{
		{MaxConcurrent: 0},
		{MaxConcurrent: -1},
		{MaxConcurrent: 1, MaxQueued: -1},
		{MaxConcurrent: maxLimit + 1},
		{MaxConcurrent: 1, MaxQueued: maxLimit + 1},
	} {
		_, err := New(c)
		require.Error(t, err, "%+v", c)
	}
	_, err := New(Config{MaxConcurrent: maxLimit, MaxQueued: maxLimit})
	require.NoError(t, err)
}

func TestFastPathTakesFreeSlotsAndReleaseOnce(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 2})
	a, b := hold(t, p), hold(t, p)
	_, ok := p.TryAcquire()
	require.False(t, ok, "a third slot")
	require.Equal(t, 2, p.Stats().Active)

	require.True(t, a.Held())
	copyOfA := a
	require.True(t, a.Release())
	require.False(t, a.Held())
	require.False(t, a.Release(), "a second release freed a slot")
	require.False(t, copyOfA.Release(), "a copy's release freed a slot")
	require.Equal(t, 1, p.Stats().Active)

	// The released record is reused by the next ticket; the stale copy still does nothing.
	c := hold(t, p)
	require.False(t, copyOfA.Release())
	require.Equal(t, 2, p.Stats().Active)
	require.True(t, b.Release())
	require.True(t, c.Release())
	require.False(t, Ticket{}.Release(), "the zero ticket")

	s := requireIdle(t, p)
	require.EqualValues(t, 3, s.Admitted)
	require.Zero(t, s.AdmittedAfterWait)
	require.Zero(t, s.Rejected())
}

// TestFIFOOrder queues callers in a known order and frees slots one at a time: each freed
// slot goes to the oldest waiter. Meanwhile newcomers hammer the fast path: none gets in
// while anyone waits.
func TestFIFOOrder(t *testing.T) {
	const n = 50
	p := newPool(t, Config{MaxConcurrent: 2, MaxQueued: n, QueueTimeout: time.Minute})
	held := []Ticket{hold(t, p), hold(t, p)}
	got := make(chan result, n)
	for i := range n {
		acquireAsync(p, i, nil, got)
		waitQueued(t, p, i+1)
	}

	stop := make(chan struct{})
	var barged atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if tk, ok := p.TryAcquire(); ok {
					barged.Add(1)
					tk.Release()
				}
			}
		})
	}

	for want := range n {
		require.True(t, held[0].Release())
		held = held[1:]
		r := recv(t, got)
		require.NoError(t, r.err)
		require.Equal(t, want, r.i, "admitted out of order")
		held = append(held, r.tk)
	}
	close(stop)
	wg.Wait()
	require.Zero(t, barged.Load(), "newcomers took slots that waiters were owed")

	for _, tk := range held {
		require.True(t, tk.Release())
	}
	s := requireIdle(t, p)
	require.EqualValues(t, n+2, s.Admitted)
	require.EqualValues(t, n, s.AdmittedAfterWait)
	require.Zero(t, s.Rejected())
}

// TestReleaseGoesToWaiterNotNewcomer races a release against newcomers that spin on the fast
// path and one that calls Acquire at the same moment: the waiter always gets the slot.
func TestReleaseGoesToWaiterNotNewcomer(t *testing.T) {
	for range 100 {
		p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 16, QueueTimeout: time.Minute})
		first := hold(t, p)
		waiter := make(chan result, 1)
		acquireAsync(p, 0, nil, waiter)
		waitQueued(t, p, 1)

		stop, leave := make(chan struct{}), make(chan struct{})
		var barged atomic.Int64
		var spinning, wg sync.WaitGroup
		for range 2 {
			spinning.Add(1)
			wg.Go(func() {
				spinning.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if tk, ok := p.TryAcquire(); ok {
						barged.Add(1)
						tk.Release()
					}
					runtime.Gosched() // let the waiter and the releaser run on a small machine
				}
			})
		}
		spinning.Wait()
		newcomer := make(chan result, 1)
		acquireAsync(p, 1, leave, newcomer)
		require.True(t, first.Release())
		w := recv(t, waiter)
		require.NoError(t, w.err)
		close(stop)
		wg.Wait()
		close(leave) // the newcomer queued behind the waiter, or came late: it gives up
		require.ErrorIs(t, recv(t, newcomer).err, ErrCanceled, "the newcomer was admitted before the waiter")
		require.Zero(t, barged.Load(), "a newcomer took the slot on the fast path")
		require.True(t, w.tk.Release())
		s := requireIdle(t, p)
		require.EqualValues(t, 2, s.Admitted)
		require.EqualValues(t, 1, s.Canceled)
	}
}

func TestQueueFullRejectsAtOnce(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 2, QueueTimeout: time.Hour})
	first := hold(t, p)
	got := make(chan result, 2)
	acquireAsync(p, 0, nil, got)
	acquireAsync(p, 1, nil, got)
	waitQueued(t, p, 2)

	// With an hour's QueueTimeout, only an immediate refusal returns before the test's
	// own timeout.
	full := make(chan result, 1)
	acquireAsync(p, 2, nil, full)
	r := recv(t, full)
	require.ErrorIs(t, r.err, ErrQueueFull)
	require.False(t, r.tk.Held())
	s := p.Stats()
	require.EqualValues(t, 1, s.RejectedFull)
	require.Equal(t, 2, s.Queued, "the refused caller took a place")

	require.True(t, first.Release())
	for range 2 {
		r := recv(t, got)
		require.NoError(t, r.err)
		require.True(t, r.tk.Release())
	}
	s = requireIdle(t, p)
	require.EqualValues(t, 3, s.Admitted)
	require.EqualValues(t, 1, s.Rejected())
}

func TestNoQueueRefusesWhenFull(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 1})
	first := hold(t, p)
	_, err := p.Acquire(nil)
	require.ErrorIs(t, err, ErrQueueFull)
	require.True(t, first.Release())
	tk, err := p.Acquire(nil)
	require.NoError(t, err)
	require.True(t, tk.Release())
	requireIdle(t, p)
}

func TestQueueTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 1, QueueTimeout: timeout})
	first := hold(t, p)

	// A plain timer set at the same moment is the control: a loaded machine delays both alike,
	// so the refusal is judged by how much later than the control it came.
	control := make(chan time.Time, 1)
	start := time.Now()
	time.AfterFunc(timeout, func() { control <- time.Now() })
	_, err := p.Acquire(nil)
	end := time.Now()
	require.ErrorIs(t, err, ErrQueueTimeout)
	require.False(t, end.Before(start.Add(timeout)), "refused after %v, before the timeout", end.Sub(start))
	fired := <-control
	require.Less(t, end.Sub(fired), 20*time.Millisecond, "refused after %v, the control timer fired after %v", end.Sub(start), fired.Sub(start))

	s := p.Stats()
	require.EqualValues(t, 1, s.RejectedTimeout)
	require.Zero(t, s.Queued)
	require.True(t, first.Release())
	requireIdle(t, p)
}

func TestCancelWhileQueuedLeavesAtOnce(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 4, QueueTimeout: time.Hour})
	first := hold(t, p)
	leaveA := make(chan struct{})
	a, b, c := make(chan result, 1), make(chan result, 1), make(chan result, 1)
	acquireAsync(p, 0, leaveA, a)
	waitQueued(t, p, 1)
	acquireAsync(p, 1, nil, b)
	waitQueued(t, p, 2)

	close(leaveA)
	require.ErrorIs(t, recv(t, a).err, ErrCanceled)
	s := p.Stats()
	require.Equal(t, 1, s.Queued, "the cancelled caller is still queued")
	require.EqualValues(t, 1, s.Canceled)

	// A's place is not held: C queues behind B, and the slots go to B then C.
	acquireAsync(p, 2, nil, c)
	waitQueued(t, p, 2)
	require.True(t, first.Release())
	rb := recv(t, b)
	require.NoError(t, rb.err)
	require.Equal(t, 1, p.Stats().Queued)
	require.True(t, rb.tk.Release())
	rc := recv(t, c)
	require.NoError(t, rc.err)
	require.True(t, rc.tk.Release())

	s = requireIdle(t, p)
	require.EqualValues(t, 3, s.Admitted)
	require.EqualValues(t, 2, s.AdmittedAfterWait)
	require.EqualValues(t, 1, s.Canceled)
	require.Zero(t, s.RejectedFull+s.RejectedTimeout)
}

func TestCanceledBeforeAcquireGetsNoSlot(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 1})
	gone := make(chan struct{})
	close(gone)
	_, err := p.Acquire(gone)
	require.ErrorIs(t, err, ErrCanceled)
	s := requireIdle(t, p)
	require.EqualValues(t, 1, s.Canceled)
	require.Zero(t, s.Admitted)
}

func TestOnWaitSeesQueuedAdmissions(t *testing.T) {
	var calls atomic.Int64
	var total atomic.Int64
	p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 1, QueueTimeout: time.Minute,
		OnWait: func(w time.Duration) { calls.Add(1); total.Add(int64(w)) }})
	first := hold(t, p)
	got := make(chan result, 1)
	acquireAsync(p, 0, nil, got)
	waitQueued(t, p, 1)
	time.Sleep(2 * time.Millisecond) // a wait long enough to see
	require.True(t, first.Release())
	r := recv(t, got)
	require.NoError(t, r.err)
	require.True(t, r.tk.Release())

	s := requireIdle(t, p)
	require.EqualValues(t, 1, calls.Load(), "OnWait is for queued admissions only")
	require.EqualValues(t, 1, s.AdmittedAfterWait)
	require.Equal(t, time.Duration(total.Load()), s.WaitTotal)
	require.GreaterOrEqual(t, s.WaitTotal, 2*time.Millisecond)
}

// TestNoSlotLeaks runs 100,000 acquires from many goroutines, cancelled before queueing,
// while queued or after admission (released from two goroutines at once, as OnCancel and
// completion would), with random hold times, and checks that every slot came back and every
// attempt was counted once.
func TestNoSlotLeaks(t *testing.T) {
	const (
		attempts  = 100_000
		workers   = 32
		maxActive = 4
	)
	p := newPool(t, Config{MaxConcurrent: maxActive, MaxQueued: 24, QueueTimeout: time.Millisecond})
	gone := make(chan struct{})
	close(gone)

	var admitted, full, timedOut, canceled, freed, inUse, peak atomic.Int64
	var releasers sync.WaitGroup
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0x5eed))
			for range attempts / workers {
				var done chan struct{}
				var timer *time.Timer
				kind := rng.IntN(10)
				switch kind {
				case 0: // cancelled before it asks
					done = gone
				case 1, 2: // cancelled while queued, or about when it is admitted
					done = make(chan struct{})
					timer = time.AfterFunc(time.Duration(rng.IntN(500))*time.Microsecond, func() { close(done) })
				case 3: // cancelled after admission
					done = make(chan struct{})
				}
				tk, err := p.Acquire(done)
				if timer != nil {
					timer.Stop()
				}
				switch err {
				case nil:
					admitted.Add(1)
					n := inUse.Add(1)
					for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
					}
					holdFor(rng)
					inUse.Add(-1)
					if kind == 3 {
						releasers.Go(func() {
							if tk.Release() {
								freed.Add(1)
							}
						})
					}
					if tk.Release() {
						freed.Add(1)
					}
				case ErrQueueFull:
					full.Add(1)
				case ErrQueueTimeout:
					timedOut.Add(1)
				case ErrCanceled:
					canceled.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
				}
			}
		})
	}
	wg.Wait()
	releasers.Wait()

	s := requireIdle(t, p)
	require.LessOrEqual(t, peak.Load(), int64(maxActive), "more callers held slots than MaxConcurrent")
	require.EqualValues(t, attempts, s.Admitted+s.Rejected(), "an attempt was lost or counted twice")
	require.EqualValues(t, admitted.Load(), s.Admitted)
	require.EqualValues(t, full.Load(), s.RejectedFull)
	require.EqualValues(t, timedOut.Load(), s.RejectedTimeout)
	require.EqualValues(t, canceled.Load(), s.Canceled)
	require.Equal(t, admitted.Load(), freed.Load(), "each ticket frees its slot exactly once")
	require.LessOrEqual(t, s.AdmittedAfterWait, s.Admitted)
	t.Logf("%+v", s)
}

// holdFor holds a slot for a random time: mostly not at all, sometimes up to 100 µs.
func holdFor(rng *rand.Rand) {
	switch n := rng.IntN(10); {
	case n < 6:
	case n < 9:
		runtime.Gosched()
	default:
		time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
	}
}

// TestOverload10x offers 40 concurrent callers to 4 slots and 8 places in the queue, each
// holding its slot about 5 ms and retrying 1 ms after a refusal: the admitted never waited
// longer than QueueTimeout, and the refused were told within QueueTimeout + 20 ms.
func TestOverload10x(t *testing.T) {
	const (
		timeout = 50 * time.Millisecond
		callers = 40
		run     = 300 * time.Millisecond
	)
	p := newPool(t, Config{MaxConcurrent: 4, MaxQueued: 8, QueueTimeout: timeout})
	var mu sync.Mutex
	var maxAdmitted, maxRejected time.Duration
	var attempts atomic.Int64
	end := time.Now().Add(run)
	var wg sync.WaitGroup
	// A sleeper beside the callers measures how late the runtime's own timers come on this
	// machine meanwhile: a refusal is judged against the timeout plus that lateness.
	var timerLate time.Duration
	wg.Go(func() {
		for time.Now().Before(end) {
			start := time.Now()
			time.Sleep(timeout)
			timerLate = max(timerLate, time.Since(start)-timeout)
		}
	})
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				attempts.Add(1)
				start := time.Now()
				tk, err := p.Acquire(nil)
				waited := time.Since(start)
				mu.Lock()
				if err == nil {
					maxAdmitted = max(maxAdmitted, waited)
				} else {
					maxRejected = max(maxRejected, waited)
				}
				mu.Unlock()
				if err != nil {
					if err != ErrQueueFull && err != ErrQueueTimeout {
						t.Errorf("unexpected error %v", err)
					}
					time.Sleep(time.Millisecond)
					continue
				}
				time.Sleep(5 * time.Millisecond)
				tk.Release()
			}
		})
	}
	wg.Wait()

	s := requireIdle(t, p)
	t.Logf("admitted %d (max wait %v), refused full %d, timeout %d (max %v)",
		s.Admitted, maxAdmitted, s.RejectedFull, s.RejectedTimeout, maxRejected)
	require.EqualValues(t, attempts.Load(), s.Admitted+s.Rejected())
	require.NotZero(t, s.AdmittedAfterWait)
	require.NotZero(t, s.RejectedFull)
	require.LessOrEqual(t, maxAdmitted, timeout+timerLate+20*time.Millisecond, "an admitted caller waited past the timeout (timers ran up to %v late)", timerLate)
	require.LessOrEqual(t, maxRejected, timeout+timerLate+20*time.Millisecond, "a refusal came late (timers ran up to %v late)", timerLate)
}

func TestFastPathAndRefusalAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops records under the race detector")
	}
	p := newPool(t, Config{MaxConcurrent: 1})
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		tk, _ := p.Acquire(nil)
		tk.Release()
	}))
	first := hold(t, p)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		_, err := p.Acquire(nil)
		_ = GatewayError(err)
	}))
	first.Release()
}

// A larger MaxConcurrent admits the oldest waiters at once, in order; the slots already held
// stay held.
func TestSetLimitsGrowAdmitsOldestWaiters(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 1, MaxQueued: 4, QueueTimeout: time.Minute})
	first := hold(t, p)
	got := make(chan result, 3)
	for i := range 3 {
		acquireAsync(p, i, nil, got)
		waitQueued(t, p, i+1)
	}
	require.NoError(t, p.SetLimits(Config{MaxConcurrent: 3, MaxQueued: 4, QueueTimeout: time.Minute}))
	a, b := recv(t, got), recv(t, got)
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	require.ElementsMatch(t, []int{0, 1}, []int{a.i, b.i}, "the two oldest waiters take the new slots")
	s := p.Stats()
	require.Equal(t, 3, s.Active)
	require.Equal(t, 1, s.Queued)

	require.True(t, first.Release()) // handed to the last waiter
	c := recv(t, got)
	require.NoError(t, c.err)
	require.Equal(t, 2, c.i)
	for _, r := range []result{a, b, c} {
		require.True(t, r.tk.Release())
	}
	requireIdle(t, p)
}

// A smaller MaxConcurrent admits no one, waiter or newcomer, until fewer than it are active;
// a smaller MaxQueued refuses newcomers while more wait, and keeps those that do.
func TestSetLimitsShrinkWaitsForTheActiveToFall(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 3, MaxQueued: 2, QueueTimeout: time.Minute})
	held := []Ticket{hold(t, p), hold(t, p), hold(t, p)}
	got := make(chan result, 2)
	for i := range 2 {
		acquireAsync(p, i, nil, got)
		waitQueued(t, p, i+1)
	}
	require.NoError(t, p.SetLimits(Config{MaxConcurrent: 1, MaxQueued: 1, QueueTimeout: time.Minute}))
	_, err := p.Acquire(nil)
	require.ErrorIs(t, err, ErrQueueFull, "two wait where one may now")

	require.True(t, held[0].Release())
	require.True(t, held[1].Release())
	s := p.Stats()
	require.Equal(t, 1, s.Active, "the slots given back above the new limit are freed, not handed on")
	require.Equal(t, 2, s.Queued)
	_, ok := p.TryAcquire()
	require.False(t, ok)

	require.True(t, held[2].Release()) // the last one: now the oldest waiter's turn
	r := recv(t, got)
	require.NoError(t, r.err)
	require.Equal(t, 0, r.i)
	require.True(t, r.tk.Release())
	r = recv(t, got)
	require.NoError(t, r.err)
	require.Equal(t, 1, r.i)
	require.True(t, r.tk.Release())
	requireIdle(t, p)
}

// SetLimits refuses what New refuses, and keeps the limits it had.
func TestSetLimitsRefusesBadLimits(t *testing.T) {
	p := newPool(t, Config{MaxConcurrent: 1})
	require.Error(t, p.SetLimits(Config{MaxConcurrent: 0}))
	hold(t, p)
	_, ok := p.TryAcquire()
	require.False(t, ok, "still one slot")
}
