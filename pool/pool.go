package pool

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one owned upstream connection.
type conn struct {
	nc  net.Conn // what we read and write (the tls.Conn for https)
	raw net.Conn // the TCP socket: Abort closes this one, at once, without a TLS close_notify
	// quiet is raw as the tls.Conn nc reads it (nil for plaintext): the idle check turns its
	// reads off (tlsQuiet).
	quiet  *quietConn
	idleAt int64  // monotonic ns when it was put in the idle stack
	pk     peeker // non-blocking liveness check of an idle conn (peek_*.go)
	// release, when set, takes the conn back at the end of an exchange instead of the pool: a
	// conn driven by an event loop returns to that loop's idle list (AttachLoop).
	release func(reusable bool)
	// ownerTimed: the conn's deadlines are its owner's (an event loop's connection ignores
	// them), so reads skip arming them and the clock read that costs.
	ownerTimed bool
}

func (c *conn) close() { _ = c.raw.Close() }

// epoch anchors monotonic time stamps.
var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// Pool is the keep-alive pool of upstream connections for one backend. It is safe for
// concurrent use; critical sections are a few instructions (a LIFO idle stack under a mutex).
// Idle conns are checked for IdleTimeout when taken, by a lazy sweep run from Get/Put, and by
// the pool's janitor: one timer, armed while the idle stack is not empty, that fires when its
// oldest conn reaches IdleTimeout (plus janitorSlack), so that a pool that sees no more
// traffic still closes its idle conns. No goroutine runs per conn or while the stack is empty.
type Pool struct {
	o       Options
	tls     *tls.Config
	dialer  net.Dialer
	direct  netip.AddrPort // the upstream's address when it is an IP literal (connect)
	now     func() int64   // monotonic ns; replaced by tests
	idleNs  int64
	sweepNs int64

	// pruneMu makes pruneIdle calls one at a time: one check of the idle stack is enough, and
	// conns two checks took out at once would leave the stack emptier for requests.
	pruneMu sync.Mutex

	mu        sync.Mutex
	idle      []*conn // LIFO: idle[len-1] is the most recently used, idleAt ascends with index
	nextSweep int64
	closed    bool
	janitor   *time.Timer // runs tidy; pending (or running) whenever armed
	armed     bool        // invariant: idle not empty implies armed, unless closed
	slackNs   int64       // janitorSlack

	// idleN counts the idle conns of both paths: the idle stack's and those in event loops'
	// idle lists (HoldIdle). MaxIdleConns caps it: one cap per server, however many loops.
	idleN      atomic.Int64
	active     atomic.Int64
	dials      atomic.Int64
	reuses     atomic.Int64
	dialErrors atomic.Int64
}

// Stats is a snapshot of a Pool's counters.
type Stats struct {
	// Idle counts the idle conns now, the idle stack's and the event loops' (HoldIdle), less
	// those the upstream closed: Stats checks the idle stack's first (pruneIdle), and a loop's
	// poller drops its own as it sees them close.
	Idle       int
	Active     int // conns checked out by Exchanges now (RoundTrip or AttachLoop)
	Dials      int // successful dials (TCP + TLS, RoundTrip or Dial) since New
	Reuses     int // exchanges served on a pooled (reused) conn since New, on either path
	DialErrors int // failed dials since New (aborted dials and the gateway's own shortage, LocalResource, not counted)
}

// New returns a Pool for o.Addr with defaults applied to zero fields of o. It does not dial.
func New(o Options) *Pool {
	o.setDefaults()
	p := &Pool{o: o, now: monoNow}
	p.idleNs = int64(o.IdleTimeout)
	p.sweepNs = max(p.idleNs/2, int64(time.Millisecond))
	p.slackNs = janitorSlack(p.idleNs)
	p.dialer = net.Dialer{KeepAlive: keepAliveIdle}
	if ap, ok := literalAddr(o.Addr); ok {
		p.direct = ap
	}
	if o.TLS != nil {
		c := o.TLS.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(o.Addr); err == nil {
				c.ServerName = host
			}
		}
		c.NextProtos = []string{"http/1.1"}
		p.tls = c
	}
	return p
}

// Addr returns the upstream "host:port" of the pool.
func (p *Pool) Addr() string { return p.o.Addr }

// Options returns the pool's options with defaults applied.
func (p *Pool) Options() Options { return p.o }

// Stats returns a snapshot of the pool's counters, after closing the idle conns the upstream
// closed or sent unasked bytes on (pruneIdle): one non-blocking system call per idle conn of
// the idle stack, so that a backend that died shows no idle conns.
func (p *Pool) Stats() Stats {
	p.pruneIdle()
	return Stats{
		Idle:       int(p.idleN.Load()),
		Active:     int(p.active.Load()),
		Dials:      int(p.dials.Load()),
		Reuses:     int(p.reuses.Load()),
		DialErrors: int(p.dialErrors.Load()),
	}
}

// Close closes every idle conn and marks the pool closed: later RoundTrips fail with ErrDial
// wrapping ErrPoolClosed, and conns released by in-flight Exchanges are closed instead of
// pooled. In-flight exchanges are not interrupted (use Exchange.Abort for that).
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	if p.janitor != nil {
		p.janitor.Stop()
	}
	p.armed = false
	p.idleN.Add(-int64(len(idle)))
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// Sweep closes idle conns older than IdleTimeout now. Get and Put run it lazily (at most every
// IdleTimeout/2), and the pool's janitor when the oldest idle conn expires; callers need not.
func (p *Pool) Sweep() {
	p.sweep(p.now(), true)
}

// janitorSlack is how late after an idle conn's IdleTimeout the janitor may close it: a
// sixteenth of IdleTimeout, at most 100ms and at least 1ms. The slack lets one firing close
// conns that went idle close together instead of one timer per conn.
func janitorSlack(idleNs int64) int64 {
	return min(max(idleNs/16, int64(time.Millisecond)), int64(100*time.Millisecond))
}

// JanitorArmed reports whether the pool's janitor timer is pending: true while idle conns wait
// to expire, false once the stack is empty or the pool is closed.
func (p *Pool) JanitorArmed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.armed
}

// armLocked schedules tidy in d ns (p.mu held).
func (p *Pool) armLocked(d int64) {
	p.armed = true
	d = max(d, 0)
	if p.janitor == nil {
		p.janitor = time.AfterFunc(time.Duration(d), p.tidy)
		return
	}
	p.janitor.Reset(time.Duration(d))
}

// tidy is the janitor: it closes the expired idle conns and, while some stay, arms itself
// for the expiry of the oldest (the bottom of the stack).
func (p *Pool) tidy() {
	now := p.now()
	p.sweep(now, true)
	p.mu.Lock()
	p.armed = false
	if !p.closed && len(p.idle) > 0 {
		p.armLocked(p.idle[0].idleAt + p.idleNs - now + p.slackNs)
	}
	p.mu.Unlock()
}

// sweepBatch is how many stale conns a sweep closes per lock hold.
const sweepBatch = 32

func (p *Pool) sweep(now int64, force bool) {
	var stale [sweepBatch]*conn
	for {
		p.mu.Lock()
		if !force && now < p.nextSweep {
			p.mu.Unlock()
			return
		}
		p.nextSweep = now + p.sweepNs
		force = true // later batches of this sweep
		n := 0
		for n < len(p.idle) && n < sweepBatch && now-p.idle[n].idleAt >= p.idleNs {
			stale[n] = p.idle[n]
			n++
		}
		if n > 0 {
			m := copy(p.idle, p.idle[n:])
			clear(p.idle[m:])
			p.idle = p.idle[:m]
			p.idleN.Add(-int64(n))
		}
		p.mu.Unlock()
		for i := 0; i < n; i++ {
			stale[i].close()
			stale[i] = nil
		}
		if n < sweepBatch {
			return
		}
	}
}

// getIdle pops the most recently used idle conn that is younger than IdleTimeout and still
// open (conn.alive: not closed by the upstream, no unsolicited bytes), or returns nil. Because
// the stack is ordered by idleAt, a stale top means every idle conn is stale. Each conn taken
// pays one MSG_PEEK, however young: bytes an upstream sends after a response come just after
// it, when the conn is youngest, and no event loop watches these conns to see them arrive.
func (p *Pool) getIdle() *conn {
	now := p.now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 || p.closed {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		if now-c.idleAt >= p.idleNs {
			p.mu.Unlock()
			p.sweep(now, true) // every idle conn is stale: close them all now
			return nil
		}
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.idleN.Add(-1)
		sweep := now >= p.nextSweep
		p.mu.Unlock()
		if sweep {
			p.sweep(now, false)
		}
		if !c.alive() {
			c.close() // closed by the upstream, or out of step with its requests
			continue
		}
		p.active.Add(1)
		p.reuses.Add(1)
		return c
	}
}

// pruneIdle closes the conns of the idle stack that getIdle would not reuse (conn.alive: closed
// or reset by the upstream, or bytes from it since the last response), as taking them would.
// It checks the conns there when it starts, oldest first and one at a time: each is taken out
// while its check runs outside p.mu and put back in its place (by idleAt) when still open, so
// the others stay on the stack for requests to take, and a Stats call never leaves a request
// to dial for want of an idle conn.
func (p *Pool) pruneIdle() {
	p.pruneMu.Lock()
	defer p.pruneMu.Unlock()
	p.mu.Lock()
	n := len(p.idle)
	p.mu.Unlock()
	k := 0 // the next conn to check is p.idle[k]
	for ; n > 0; n-- {
		p.mu.Lock()
		if p.closed || k >= len(p.idle) {
			p.mu.Unlock()
			return
		}
		c := p.idle[k]
		copy(p.idle[k:], p.idle[k+1:])
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		p.mu.Unlock()
		if !c.alive() {
			c.close()
			p.idleN.Add(-1)
			continue // p.idle[k] is the next one, unless the stack changed meanwhile
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			p.idleN.Add(-1)
			return
		}
		// Its place: conns put meanwhile are younger and went on top, and a sweep may have
		// closed older ones from the bottom. Among conns as old, after them (the next check
		// is then of a younger one).
		k = sort.Search(len(p.idle), func(i int) bool { return p.idle[i].idleAt > c.idleAt })
		p.idle = append(p.idle, nil)
		copy(p.idle[k+1:], p.idle[k:])
		p.idle[k] = c
		if k == 0 || !p.armed {
			// The janitor may have been armed for a younger bottom conn while c was out.
			p.armLocked(p.idle[0].idleAt + p.idleNs - p.now() + p.slackNs)
		}
		p.mu.Unlock()
		k++
	}
}

// put returns a healthy conn (response fully read, keep-alive) to the idle stack, or closes it
// when the pool is closed or full.
func (p *Pool) put(c *conn) {
	now := p.now()
	c.idleAt = now
	_ = c.raw.SetReadDeadline(time.Time{}) // the liveness peek must not hit an old deadline
	p.mu.Lock()
	if p.closed || !p.HoldIdle() {
		p.mu.Unlock()
		p.active.Add(-1)
		c.close()
		return
	}
	p.idle = append(p.idle, c)
	if !p.armed {
		// The stack was empty (the invariant): c is the oldest idle conn.
		p.armLocked(p.idleNs + p.slackNs)
	}
	sweep := now >= p.nextSweep
	p.mu.Unlock()
	p.active.Add(-1)
	if sweep {
		p.sweep(now, false)
	}
}

// discard closes a checked-out conn that must not be reused.
func (p *Pool) discard(c *conn) {
	c.close()
	p.active.Add(-1)
}

// dial opens a new conn (TCP_NODELAY, TLS handshake for https) within ctx.
func (p *Pool) dial(ctx context.Context) (*conn, error) {
	raw, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &conn{nc: raw, raw: raw}
	c.initPeek()
	if p.tls != nil {
		c.quiet = &quietConn{Conn: raw}
		t := tls.Client(c.quiet, p.tls)
		if err := t.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c.nc = t
	}
	p.dials.Add(1)
	p.active.Add(1)
	return c, nil
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// dialFailed counts a failed dial in Stats.DialErrors, unless the gateway's own host was short
// of resources (LocalResource): that says nothing of the upstream.
func (p *Pool) dialFailed(err error) {
	if !LocalResource(err) {
		p.dialErrors.Add(1)
	}
}
