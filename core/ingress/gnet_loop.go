package ingress

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	gio "github.com/panjf2000/gnet/v2/pkg/io"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pool"
)

// The upstream exchange on the event loop (upstream_io = "loop"). The loop that owns a client
// connection also owns the upstream connections its requests use: they are gnet connections
// of the same loop (one epoll for both sides), kept in a per-loop, per-backend idle list, so a
// request is routed, sent, answered and relayed by the loop with no goroutine woken. The
// pipeline makes every decision as on a worker (pipeline.BeginLoop, LoopTried, RelayStep);
// this file only does the waiting, without blocking:
//
//   - a dial runs on a worker goroutine (with the backend's dial timeout, cancelled when the
//     client leaves), and the connected socket is enrolled on the client's loop;
//   - the response-head and stream-idle timeouts are deadlines the engine's sweep checks;
//   - a client that reads slower than the upstream sends would make the loop buffer without
//     end (gnet cannot stop reading a socket), so once the client's pending bytes pass
//     sendHighWaterBytes the exchange leaves the loop: the upstream socket is duplicated into
//     a blocking connection and a worker relays the rest with the worker path's backpressure
//     (it stops reading the upstream) and client_stall_timeout. What a connection's exchange
//     buffers on the loop is thus at most sendHighWaterBytes plus one read of each side.
//
// Requests the loop does not serve go to a worker as before: routes with a stage that is not
// loop-safe (it may wait or cost CPU: pipeline.LoopSafe), TLS upstreams, request bodies over
// loopBodyBytes.

// loopBodyBytes is the largest request body sent from the event loop: a body that fits an
// idle socket's send buffer is written at once; a larger one might wait on the upstream.
const loopBodyBytes = 16 << 10

// States of an exchange driven by the loop.
const (
	lxNone = iota // no exchange on the loop
	lxDial        // waiting for a new upstream connection
	lxHead        // the request is written; waiting for the response head
	lxRest        // reading a short body whole before the head is written (pipeline.RequestCtx.CollectBody)
	lxBody        // relaying the response body
	lxWait        // waiting out a retry's backoff (a timer)
)

// loopX is a client connection's exchange on its event loop. Loop-owned, except upDeadline.
type loopX struct {
	lxState int
	lxB     *pipeline.Backend
	lxUp    *upConn
	lxNext  *pipeline.Backend // the next backend, when a try ended at once (send)
	endFn   func()
	lxSeq   uint64             // bumped by every dial and retry wait, so that a late one finds itself stale
	lxStop  context.CancelFunc // cancels the dial in progress
	// lxConnect is the connection being established on the loop for the try (connectOnLoop),
	// nil otherwise: the deadline sweep ends it after the dial timeout.
	lxConnect *upConn
	ls        *loopState
	onLoop    bool // the request in flight is driven by the loop
	lxRaced   bool // the keep-alive race retry of this try was used
	endKeep   bool // endOnWorker: the connection stays open
	// upDeadline is when the upstream must have sent something (unix ns; 0: no deadline): the
	// sweep wakes the connection after it.
	upDeadline atomic.Int64
}

// loopState is one event loop's upstream connections; only that loop touches it.
type loopState struct {
	el gnet.EventLoop
	// idle holds per backend the loop's idle connections, most recently used last; each one
	// holds one of its pool's idle slots (pool.HoldIdle), which every loop and the worker
	// path's idle stack share, so that max_idle_conns caps a server's idle connections
	// however many loops keep some.
	idle   map[*pool.Pool][]*upConn
	served int64 // requests started on this loop (tests read it)
	// releaseAt is the clock reading of the event whose request releases its upstream
	// connection now (endLoop), for upConn.released; 0 outside that call.
	releaseAt int64
	// spares holds per backend the state of this loop's spare dial (see keepSpare).
	spares map[*pool.Pool]*spareState
	// connecting holds the spares whose connect the loop began (connectSpare), for the sweep
	// to end those past their dial timeout.
	connecting []*upConn
}

// spareState is one loop's spare dial to one backend.
type spareState struct {
	dialing  int   // spare dials in flight
	failedAt int64 // unix ns of the last spare dial that failed (0: none)
}

// spareConns is how many idle connections per backend a loop keeps ready while concurrent
// requests take them (keepSpare): two, because one spare dial at a time (a dial waits up to
// the Go scheduler's 10 ms preemption when every CPU is busy) fell behind clients that reset
// a few streams per 10 ms, each closing its upstream connection.
const spareConns = 2

// spareBackoff is how long a loop waits after a failed spare dial before it dials another
// spare to that backend: requests that find no idle connection still dial themselves, so a
// backend that refuses connections is not also dialled in the background at request rate.
const spareBackoff = time.Second

// loopOf returns the state of the loop c belongs to.
func (e *GnetEngine) loopOf(c gnet.Conn) *loopState {
	el := c.EventLoop()
	if v, ok := e.loops.Load(el); ok {
		return v.(*loopState)
	}
	v, _ := e.loops.LoadOrStore(el, &loopState{el: el, idle: make(map[*pool.Pool][]*upConn), spares: make(map[*pool.Pool]*spareState)})
	return v.(*loopState)
}

// upConn is an upstream connection on an event loop: the context of its gnet connection and
// the net.Conn a loop-driven pool.Exchange reads and writes (never blocking).
type upConn struct {
	c      gnet.Conn // set by OnOpen
	ls     *loopState
	p      *pool.Pool
	owner  *gconn            // the client connection whose exchange uses it; nil while idle
	spare  *pipeline.Backend // dialled by keepSpare for this backend, for no request
	seq    uint64            // the owner's lxSeq when it was dialled
	dialed time.Duration
	// connecting: registered on the loop with its connect in progress (connectOnLoop), since
	// connectAt; OnOpen ends it.
	connecting bool
	connectAt  time.Time
	idleAt     int64 // unix ns when it went idle
	inIdle     bool  // in its loop's idle list, holding one of its pool's idle slots (HoldIdle)
	closed     bool  // gnet closed it (OnClose): c must not be touched
	closeErr   error
	detached   bool         // handed to a worker: its gnet connection closes, the socket lives on
	handoff    *handoffConn // the worker's connection to the socket, once detached
	release    func(reusable bool)
}

// errUpstreamGone is what a write to an upstream connection gnet already closed returns. It
// only ever reaches a log as the cause inside a pool.UpstreamError, which names the upstream
// and the failure: its own text says only what is left to say.
var errUpstreamGone = errors.New("socket already closed")

// Read implements net.Conn for pool.Exchange: what the loop has buffered, pool.ErrWouldBlock
// when nothing is, io.EOF once the upstream closed.
func (uc *upConn) Read(p []byte) (int, error) {
	if uc.closed {
		if uc.closeErr != nil && !errors.Is(uc.closeErr, io.EOF) {
			return 0, uc.closeErr
		}
		return 0, io.EOF
	}
	if uc.c.InboundBuffered() == 0 {
		return 0, pool.ErrWouldBlock
	}
	n, _ := uc.c.Read(p)
	return n, nil
}

// Write implements net.Conn: gnet writes what the socket takes and buffers the rest.
func (uc *upConn) Write(p []byte) (int, error) {
	if uc.closed {
		return 0, errUpstreamGone
	}
	return uc.c.Write(p)
}

// Close closes the gnet connection; safe from any goroutine (an abort).
func (uc *upConn) Close() error {
	if c := uc.c; c != nil {
		return c.Close()
	}
	return nil
}

func (uc *upConn) LocalAddr() net.Addr                  { return nil }
func (uc *upConn) RemoteAddr() net.Addr                 { return nil }
func (uc *upConn) SetDeadline(time.Time) error          { return nil }
func (uc *upConn) SetReadDeadline(time.Time) error      { return nil }
func (uc *upConn) SetWriteDeadline(time.Time) error     { return nil }
func (uc *upConn) bindRelease()                         { uc.release = uc.released }
func (uc *upConn) alive() bool                          { return !uc.closed && !uc.detached }
func (uc *upConn) stale(now int64, idle int64) bool     { return now-uc.idleAt >= idle }
func (uc *upConn) hasUnread() bool                      { return uc.c.InboundBuffered() > 0 }
func (uc *upConn) peekGone() bool                       { return peekClosed(uc.c.Fd()) }
func (ls *loopState) list(p *pool.Pool) []*upConn       { return ls.idle[p] }
func (ls *loopState) setList(p *pool.Pool, l []*upConn) { ls.idle[p] = l }

// released takes the connection back at the end of an exchange (pool.ReleaseExchange, on the
// loop: the loop releases its exchanges itself, ReleaseUpstream).
func (uc *upConn) released(reusable bool) {
	uc.owner = nil
	if !reusable || !uc.alive() || uc.hasUnread() {
		_ = uc.Close()
		return
	}
	if !uc.p.HoldIdle() {
		_ = uc.Close() // the server has its max_idle_conns idle already, on this loop or others
		return
	}
	uc.idleAt = uc.ls.releaseAt
	if uc.idleAt == 0 {
		uc.idleAt = time.Now().UnixNano()
	}
	uc.inIdle = true
	uc.ls.setList(uc.p, append(uc.ls.list(uc.p), uc))
}

// unidle records that uc left its loop's idle list: its pool's idle slot is free again.
func (uc *upConn) unidle() {
	uc.inIdle = false
	uc.p.DropIdle()
}

// dropIdle takes uc, which closed while idle, out of its loop's idle list.
func (ls *loopState) dropIdle(uc *upConn) {
	l := ls.idle[uc.p]
	for i, v := range l {
		if v == uc {
			copy(l[i:], l[i+1:])
			l[len(l)-1] = nil
			ls.idle[uc.p] = l[:len(l)-1]
			break
		}
	}
	uc.unidle()
}

// take returns the most recently used idle connection to p that is open, or nil. check: the
// request must not be sent twice, so a connection the upstream may have closed meanwhile is
// checked first, once it has been idle for the pool's LivenessCheckAfter. Younger ones need no
// system call: the loop's own poller watches its idle connections, so an upstream close is
// seen by the event that reports it (uc.alive turns false), and only one that lands while the
// loop works through its current events could slip past, which an upstream's keep-alive
// timeout (seconds) does not do within the check's threshold.
func (ls *loopState) take(p *pool.Pool, check bool, now int64) *upConn {
	l := ls.idle[p]
	for len(l) > 0 {
		uc := l[len(l)-1]
		l[len(l)-1] = nil
		l = l[:len(l)-1]
		uc.unidle()
		if !uc.alive() {
			continue
		}
		if uc.stale(now, int64(p.IdleTimeout())) || (check && uc.stale(now, int64(p.LivenessCheckAfter())) && uc.peekGone()) {
			_ = uc.Close()
			continue
		}
		ls.idle[p] = l
		p.Reused()
		return uc
	}
	ls.idle[p] = l
	return nil
}

// sweepIdle closes idle connections past their pool's idle timeout, and those of pools no
// longer in use (a reload retired them); on the loop.
func (ls *loopState) sweepIdle(now int64) {
	ls.sweepConnecting(now)
	for p, st := range ls.spares {
		if p.Closed() && st.dialing == 0 {
			delete(ls.spares, p) // a retired pool: no request takes it any more
		}
	}
	for p, l := range ls.idle {
		keep := l[:0]
		for _, uc := range l {
			switch {
			case !uc.alive():
				uc.unidle()
			case uc.stale(now, int64(p.IdleTimeout())) || p.Closed():
				uc.unidle()
				_ = uc.Close()
			default:
				keep = append(keep, uc)
			}
		}
		clear(l[len(keep):])
		if len(keep) == 0 {
			delete(ls.idle, p)
		} else {
			ls.idle[p] = keep
		}
	}
}

// peekClosed reports whether the peer of socket fd closed it or sent bytes unasked (a
// non-blocking MSG_PEEK): such a connection must not carry a request that cannot be resent.
// The peek is a raw system call, as every call a loop makes: through the scheduler's system
// call state it would wake the runtime's monitor thread, which then polls every 20 µs.
func peekClosed(fd int) bool {
	var b [1]byte
	n, err := gio.Peek(fd, b[:])
	return n > 0 || (err == nil && n == 0) || (err != nil && err != unix.EAGAIN && err != unix.EINTR)
}

// startLoop runs the parsed request on the loop; it reports false (nothing done) when the
// request must go to a worker.
func (gc *gconn) startLoop() bool {
	rc := gc.rc
	if len(rc.Req.Body) > loopBodyBytes || !gc.e.pipe.LoopRoute(&rc.Req) {
		return false
	}
	if gc.queued.Load() > 0 {
		// Writes of the response before are still queued on the loop: a write from the loop
		// now would go ahead of them. A worker's writes queue behind them.
		return false
	}
	if gc.ls == nil {
		gc.ls = gc.e.loopOf(gc.c)
	}
	gc.phase = phaseBusy
	gc.headSince.Store(0)
	gc.busy.Store(true)
	gc.e.counters.active.Add(1)
	gc.onLoop = true
	gc.answering = false
	gc.ls.served++
	// One clock read for the request's start and its first try: they happen together.
	now := time.Now()
	gc.tryOn(gc.e.pipe.BeginLoop(rc, now), now)
	return true
}

// tryOn sends the request to b, and on to the next backend the retry rules name, until one
// is waited for or the response is ready; now is the clock reading of the event it runs in.
func (gc *gconn) tryOn(b *pipeline.Backend, now time.Time) {
	rc := gc.rc
	for b != nil {
		gc.lxB, gc.lxRaced, gc.lxUp = b, false, nil
		x := rc.LoopExchange(b, now)
		if x == nil {
			b = rc.LoopTried(b, pipeline.ErrClientGone)
			continue
		}
		uc := gc.ls.take(b.Pool, !x.Idempotent, now.UnixNano())
		if uc == nil {
			gc.dial(b)
			gc.e.keepSpare(gc.ls, b, b.Pool.InFlight())
			return
		}
		// The request goes out before any spare is dialled for the one it took; spares are
		// for when other exchanges with b are in flight besides it.
		others := b.Pool.InFlight()
		ended := gc.send(uc, x, now)
		gc.e.keepSpare(gc.ls, b, others)
		if !ended {
			return
		}
		b = gc.lxNext
		gc.lxNext = nil
	}
	if d := rc.LoopWait(); d > 0 {
		gc.waitRetry(d)
		return
	}
	gc.respond(now)
}

// waitRetry waits out a retry's backoff of d with a timer, then goes on with the next try on
// the loop (or ends the request when its client left meanwhile: loopClosed).
func (gc *gconn) waitRetry(d time.Duration) {
	gc.lxState, gc.lxUp = lxWait, nil
	gc.lxSeq++
	seq, el := gc.lxSeq, gc.ls.el
	time.AfterFunc(d, func() {
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			defer gc.recoverOnLoop()
			if gc.onLoop && gc.lxState == lxWait && gc.lxSeq == seq {
				gc.lxState = lxNone
				gc.tryOn(gc.rc.LoopResume(false), time.Now())
			}
			return nil
		}))
	})
}

// send writes the request on uc; it reports true when the try ended at once (its result is
// in gc.lxNext: the next backend, or nil with the response ready). now: as for tryOn.
func (gc *gconn) send(uc *upConn, x *pool.Exchange, now time.Time) bool {
	rc := gc.rc
	uc.owner = gc
	gc.lxUp = uc
	if err := x.AttachLoop(gc.lxB.Pool, uc, uc.dialed, uc.release); err != nil {
		gc.lxUp = nil
		gc.lxNext = rc.LoopTried(gc.lxB, err)
		return true
	}
	uc.dialed = 0
	if err := x.WriteRequest(rc.UpstreamHead(), rc.Req.Body); err != nil {
		gc.lxUp = nil
		gc.lxNext = rc.LoopTried(gc.lxB, err)
		return true
	}
	gc.lxState = lxHead
	gc.upDeadline.Store(now.Add(rc.ResponseHeaderTimeout()).UnixNano())
	return false
}

// dial opens a connection to b, on this loop where it can (connectOnLoop), else on a worker
// goroutine that enrolls it on this loop; the try goes on in upOpened (or dialFailed).
func (gc *gconn) dial(b *pipeline.Backend) {
	gc.lxState = lxDial
	gc.lxSeq++
	uc := &upConn{ls: gc.ls, p: b.Pool, owner: gc, seq: gc.lxSeq}
	uc.bindRelease()
	if gc.connectOnLoop(uc, b) {
		return
	}
	// Cancelled when the client leaves or the engine stops (OnShutdown), which waits for the
	// dials it counted; one that starts after that fails at once.
	ctx, cancel := context.WithCancel(gc.e.dialCtx)
	gc.lxStop = cancel
	gc.e.dialOn(ctx, cancel, uc, b)
}

// connectOnLoop begins the connection to b on this loop, as nginx does: a non-blocking
// connect(2) whose socket the loop registers at once (gnet.Connector), so that no goroutine,
// second poller or enrollment stands between the request and its upstream; the loop's OnOpen
// (upOpened) sends the request once the connect ends, OnClose (upClosed) reports its failure,
// and the deadline sweep ends it after the pool's dial timeout. It reports false when b needs
// the worker's dial (a name to resolve, TLS; pool.Pool.ConnectStart).
func (gc *gconn) connectOnLoop(uc *upConn, b *pipeline.Backend) bool {
	if !gc.e.set.ConnectOnLoop {
		return false
	}
	began, err := gc.ls.beginConnect(uc)
	if !began {
		return false
	}
	if err != nil {
		gc.failLater(uc, err)
		return true
	}
	gc.awaitConnect(uc)
	return true
}

// awaitConnect makes the try wait for uc's connect in progress on the loop: a client that
// leaves closes it, and the deadline sweep ends it after the pool's dial timeout.
func (gc *gconn) awaitConnect(uc *upConn) {
	c := uc.c
	gc.lxConnect = uc
	gc.lxStop = func() { _ = c.Close() }
	gc.upDeadline.Store(uc.connectAt.Add(uc.p.DialTimeout()).UnixNano())
}

// beginConnect starts uc's connection on this loop: a non-blocking connect(2)
// (pool.Pool.ConnectStart) whose socket the loop registers as uc's (gnet.Connector). began is
// false when uc's pool needs a worker's dial (or the loop cannot connect); otherwise err is a
// failure at once, counted as a failed dial, or nil with uc connecting since uc.connectAt.
func (ls *loopState) beginConnect(uc *upConn) (began bool, err error) {
	cn, ok := ls.el.(gnet.Connector)
	if !ok {
		return false, nil
	}
	start := time.Now()
	fd, remote, ok, err := uc.p.ConnectStart()
	if !ok {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	return true, register(cn, uc, connectStarted{fd, remote, start, nil})
}

// register has the loop (cn, on its goroutine) take the socket of the connect cs begun for uc:
// uc is connecting since cs.start, or err is the failure, counted as a failed dial.
func register(cn gnet.Connector, uc *upConn, cs connectStarted) error {
	c, err := cn.Connecting(cs.fd, cs.remote, uc)
	if err != nil {
		return uc.p.ConnectDone(err)
	}
	uc.c, uc.connecting, uc.connectAt = c, true, cs.start
	return nil
}

// failLater reports a dial that failed at once on the loop after the current event, as a
// worker's dial reports its failure: the try that called dial returns first.
func (gc *gconn) failLater(uc *upConn, err error) {
	_ = gc.ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		gc.e.dialFailed(uc, err)
		return nil
	}))
}

// connectTimedOut ends the connect in progress of the try when the dial timeout passed.
func (gc *gconn) connectTimedOut() {
	uc := gc.lxConnect
	if uc == nil {
		return
	}
	gc.lxConnect, gc.lxStop = nil, nil
	_ = uc.Close() // its OnClose, later, finds no try waiting for it
	gc.e.dialFailed(uc, uc.p.ConnectDone(os.ErrDeadlineExceeded))
}

// keepSpare keeps up to spareConns idle connections to b ready on loop ls while concurrent
// requests use them: when a request takes a connection from the loop's idle list for b, or
// finds the list empty and dials its own, while another exchange with b is in flight, spares
// are dialled in the background until the list and the spare dials in flight hold
// spareConns; each lands in the list (upOpened). others is how many exchanges with b are in
// flight besides the request's own. One request at a time needs no spare: its
// connection comes back before the next request.
//
// A request that finds the list empty waits for a dial, which takes a worker goroutine, the
// Go netpoller and an enrollment; when every CPU is busy (the loops hold the processors) those
// wait for the Go scheduler's preemption, up to 10 ms, and that wait was the TTFT tail of
// streams whose neighbours' resets kept closing upstream connections. Spares take it off the
// requests' path. They are subject to idle_conn_timeout and max_idle_conns like any idle
// connection; none is dialled when no idle slot is free (max_idle_conns), while the pool is
// retired, or within spareBackoff of a spare dial that failed.
func (e *GnetEngine) keepSpare(ls *loopState, b *pipeline.Backend, others int64) {
	p := b.Pool
	if others == 0 || p.Closed() {
		return
	}
	st := ls.spares[p]
	if st == nil {
		st = &spareState{}
		ls.spares[p] = st
	}
	if st.failedAt != 0 && time.Now().UnixNano()-st.failedAt < int64(spareBackoff) {
		return
	}
	onLoop := 0
	for len(ls.idle[p])+st.dialing < spareConns && p.IdleRoom() {
		st.dialing++
		if e.set.ConnectOnLoop && p.ConnectsOnLoop() {
			onLoop++
			continue
		}
		uc := &upConn{ls: ls, p: p, spare: b}
		uc.bindRelease()
		ctx, cancel := context.WithCancel(e.dialCtx)
		e.dialOn(ctx, cancel, uc, b)
	}
	if onLoop > 0 {
		ls.connectSparesLater(b, onLoop)
	}
}

// connectSparesLater connects n spares to b on the loop once the current event is handled: a
// loopback connect(2) runs the whole handshake in the call, and the request whose event this
// is should not wait for its spares' handshakes. A connect that fails at once ends the rest
// (spareBackoff).
func (ls *loopState) connectSparesLater(b *pipeline.Backend, n int) {
	st := ls.spares[b.Pool]
	err := ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		for i := range n {
			uc := &upConn{ls: ls, p: b.Pool, spare: b}
			uc.bindRelease()
			failed := st.failedAt
			switch {
			case !ls.connectSpare(uc):
				st.dialing -= n - i // the pool was retired meanwhile: none of the rest begins
				return nil
			case st.failedAt != failed:
				st.dialing -= n - i - 1 // this one ended in spareDone; the rest do not begin
				return nil
			}
		}
		return nil
	}))
	if err != nil {
		st.dialing -= n // the engine stops
	}
}

// connectSpare begins the spare's connection on the loop, as connectOnLoop does for a
// request; it reports false when the spare needs a worker's dial. A connect that fails at once
// ends the spare dial then (spareDone), which stops keepSpare's loop for spareBackoff.
func (ls *loopState) connectSpare(uc *upConn) bool {
	began, err := ls.beginConnect(uc)
	if !began {
		return false
	}
	if err != nil {
		ls.spareDone(uc.p, err)
		return true
	}
	ls.connecting = append(ls.connecting, uc)
	return true
}

// sweepConnecting ends the spares' connects in progress past their dial timeout, and forgets
// those that ended.
func (ls *loopState) sweepConnecting(now int64) {
	keep := ls.connecting[:0]
	for _, uc := range ls.connecting {
		switch {
		case !uc.connecting:
		case now-uc.connectAt.UnixNano() >= int64(uc.p.DialTimeout()):
			uc.connecting = false // its OnClose, after this Close, counts nothing more
			_ = uc.Close()
			ls.spareDone(uc.p, uc.p.ConnectDone(os.ErrDeadlineExceeded))
		default:
			keep = append(keep, uc)
		}
	}
	clear(ls.connecting[len(keep):])
	ls.connecting = keep
}

// spareDone records on the loop that its spare dial to p ended (err nil: the connection is
// idle now).
func (ls *loopState) spareDone(p *pool.Pool, err error) {
	st := ls.spares[p]
	if st == nil {
		return
	}
	st.dialing--
	if err != nil {
		st.failedAt = time.Now().UnixNano()
	} else {
		st.failedAt = 0
	}
}

// dialOn dials b on a worker goroutine and enrolls the connection as uc on uc's loop: OnOpen
// then runs upOpened there; a failure runs dialFailed on the loop. cancel is called once the
// dial ended.
func (e *GnetEngine) dialOn(ctx context.Context, cancel context.CancelFunc, uc *upConn, b *pipeline.Backend) {
	counted := e.dialBegin()
	el := uc.ls.el
	task := func() {
		defer cancel()
		if counted {
			defer e.dials.Done()
		}
		if e.connectForLoop(ctx, uc) {
			return
		}
		nc, d, err := b.Pool.Dial(ctx)
		if err == nil && dialedHook != nil {
			dialedHook(ctx)
		}
		if err == nil && ctx.Err() != nil {
			// The client left or the engine stops: nothing was sent, and the socket must not
			// reach a loop that may be stopping (its registration would never run).
			_ = nc.Close()
			err = &pool.UpstreamError{Addr: b.Pool.Addr(), Kind: pool.ErrDial, Err: ctx.Err()}
		}
		if err == nil {
			uc.dialed = d
			ch, eerr := el.Enroll(gnet.NewContext(context.Background(), uc), nc)
			if eerr == nil {
				// gnet closes nc once it holds a duplicate of the socket.
				res := <-ch
				if res.Err == nil {
					return // upOpened runs on the loop
				}
				eerr = res.Err
			} else {
				_ = nc.Close()
			}
			// Not on the loop: nothing was sent, so the request may try another backend.
			err = &pool.UpstreamError{Addr: b.Pool.Addr(), Op: "enroll", Kind: pool.ErrDial, Err: eerr}
		}
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			e.dialFailed(uc, err)
			return nil
		}))
	}
	if workers.Submit(task) != nil {
		go task()
	}
}

// dialedHook, when set (by tests), runs on the dial's goroutine once the upstream connection
// is established, or its connect begun (an upstream named by address), and before it is handed
// to the loop, with the dial's context.
var dialedHook func(ctx context.Context)

// connectForLoop connects uc on the dial's worker goroutine and has uc's loop register the
// socket (gnet.Connector) as connectOnLoop does on the loop itself; it reports false when uc's
// pool needs Pool.Dial (a name to resolve, TLS) or the loop cannot register sockets. The
// socket's system calls are raw and the socket reaches the loop as it is. Pool.Dial's socket
// is wrapped for the Go netpoller (a duplicate, its options set again) and taken over by gnet
// (two more duplicates, two closes): a score of system calls through the Go scheduler's system
// call state, each of which wakes the runtime's monitor thread when every processor is idle,
// and the monitor then polls every 20 µs for a millisecond or more. With a new upstream
// connection for each client that resets its stream, that was a third of the context switches
// the resets added. A loopback connect's handshake still runs in the connect call, here and not
// on the loop. The worker waits until the loop took the socket, so that OnShutdown, which waits
// for the dials, finds no socket on its way to a loop.
func (e *GnetEngine) connectForLoop(ctx context.Context, uc *upConn) bool {
	ls := uc.ls
	cn, ok := ls.el.(gnet.Connector)
	if !ok {
		return false
	}
	start := time.Now()
	fd, remote, ok, err := uc.p.ConnectStart()
	if !ok {
		return false
	}
	if err == nil && dialedHook != nil {
		dialedHook(ctx)
	}
	done := make(chan struct{})
	xerr := ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		defer close(done)
		e.registerConnect(ctx, cn, uc, connectStarted{fd, remote, start, err})
		return nil
	}))
	if xerr != nil {
		if err == nil {
			_ = unix.Close(fd) // the loop stops: nothing waits for the connection
		}
		return true
	}
	<-done
	return true
}

// connectStarted is a connect a worker began for a loop (pool.Pool.ConnectStart): its socket
// and peer, when it began, and its failure at once (then fd is not open).
type connectStarted struct {
	fd     int
	remote net.Addr
	start  time.Time
	err    error
}

// registerConnect runs on uc's loop: it registers the socket of the connect cs a worker
// began for uc, which goes on as one the loop began (upOpened, upClosed, the dial timeout of
// the deadline sweep), or reports the connect's failure (dialFailed). The socket is closed
// instead when ctx ended (the client left or the engine stops) or the request no longer waits.
func (e *GnetEngine) registerConnect(ctx context.Context, cn gnet.Connector, uc *upConn, cs connectStarted) {
	err := cs.err
	gc := uc.owner
	if err == nil && (ctx.Err() != nil || uc.spare == nil && !gc.waitsFor(uc)) {
		_ = gio.Close(cs.fd)
		cause := ctx.Err()
		if cause == nil {
			cause = context.Canceled // the try ended: dialFailed reports nothing
		}
		err = &pool.UpstreamError{Addr: uc.p.Addr(), Kind: pool.ErrDial, Err: cause}
	}
	if err == nil {
		err = register(cn, uc, cs)
	}
	switch {
	case err != nil:
		e.dialFailed(uc, err)
	case uc.spare != nil:
		uc.ls.connecting = append(uc.ls.connecting, uc)
	default:
		gc.awaitConnect(uc)
	}
}

// waitsFor reports whether the request's try still waits for uc's connection.
func (gc *gconn) waitsFor(uc *upConn) bool {
	return gc != nil && gc.lxState == lxDial && gc.lxSeq == uc.seq && !gc.closed.Load()
}

// dialBegin counts a dial of the loop path in flight; it reports false once the engine stops
// (OnShutdown waits for the counted ones).
func (e *GnetEngine) dialBegin() bool {
	e.dialMu.Lock()
	defer e.dialMu.Unlock()
	if e.dialsStopped {
		return false
	}
	e.dials.Add(1)
	return true
}

// OnShutdown runs when gnet begins to stop, while the event loops still run: the loop path's
// dials in flight are cancelled and waited for. gnet would otherwise take a socket enrolled
// as a loop exits and never register it, and the socket and two goroutines (the dial's and
// gnet's enrolment) would stay behind for good.
func (e *GnetEngine) OnShutdown(gnet.Engine) {
	e.dialMu.Lock()
	e.dialsStopped = true
	e.dialMu.Unlock()
	e.stopDials()
	e.dials.Wait()
}

// upOpened runs on the loop when a dialled connection is enrolled, or when the connect the
// loop began ended (connectOnLoop).
func (e *GnetEngine) upOpened(uc *upConn, c gnet.Conn) {
	uc.c = c
	if uc.connecting {
		uc.connecting = false
		uc.dialed = time.Since(uc.connectAt)
		_ = uc.p.ConnectDone(nil)
		if gc := uc.owner; gc != nil && gc.lxConnect == uc {
			gc.lxConnect = nil
		}
	}
	if b := uc.spare; b != nil {
		// The request that takes it waits for no dial: the connect time is the backend's,
		// observed now, not that request's.
		uc.spare = nil
		b.M.Connected(uc.dialed)
		uc.dialed = 0
		uc.ls.spareDone(b.Pool, nil)
		uc.released(true)
		return
	}
	gc := uc.owner
	if !gc.waitsFor(uc) {
		uc.released(true) // the request went on without it: keep it for the next one
		return
	}
	defer gc.recoverOnLoop()
	gc.lxStop = nil
	x := gc.rc.Exchange()
	now := time.Now()
	if !gc.send(uc, x, now) {
		return
	}
	b := gc.lxNext
	gc.lxNext = nil
	gc.tryOn(b, now)
}

// dialFailed runs on the loop when a dial failed. uc.owner is the request, or nil when the
// request no longer waits for uc (then nothing is done).
func (e *GnetEngine) dialFailed(uc *upConn, err error) {
	if uc.spare != nil {
		uc.ls.spareDone(uc.p, err)
		return
	}
	gc := uc.owner
	if !gc.waitsFor(uc) {
		return
	}
	defer gc.recoverOnLoop()
	gc.lxStop = nil
	gc.lxState = lxNone
	gc.tryOn(gc.rc.LoopTried(gc.lxB, err), time.Now())
}

// onUpstream runs on the loop when the owner's upstream connection sent bytes or closed.
// now is the clock reading of the event: every step it runs uses it.
func (gc *gconn) onUpstream(now time.Time) {
	switch gc.lxState {
	case lxHead:
		gc.pollHead(now)
	case lxRest:
		gc.respond(now)
	case lxBody:
		gc.relay(now)
	}
}

func (gc *gconn) pollHead(now time.Time) {
	rc := gc.rc
	x := rc.Exchange()
	retry, err := x.PollHead(rc.IsHEAD())
	if err == pool.ErrWouldBlock {
		return
	}
	gc.upDeadline.Store(0)
	gc.lxState = lxNone
	if err != nil {
		gc.lxUp = nil
	}
	if err != nil && retry && !gc.lxRaced && x.ConnectTime() == 0 {
		// The keep-alive race: a reused connection the upstream closed as the request went
		// out. Once more on a fresh one, as pool.Exchange.RoundTrip does.
		b := gc.lxB
		if rc.LoopExchange(b, now) != nil {
			gc.lxRaced = true
			gc.dial(b)
			return
		}
	}
	gc.tryOn(rc.LoopTried(gc.lxB, err), now)
}

// respond writes the response head and relays what the upstream sent so far; it runs again
// on each upstream event while the head waits for a short body to arrive whole.
func (gc *gconn) respond(now time.Time) {
	rc := gc.rc
	if !gc.onLoop {
		return // the client left meanwhile (loopClosed ended the request)
	}
	gc.lxState = lxNone
	if rc.ClientGone() {
		gc.endLoop(false, now)
		return
	}
	if gc.e.draining.Load() {
		rc.CloseAfter() // the drain closes the connection after this response: say so
	}
	gc.stepping = true
	err := rc.WriteHeadAt(gc, now)
	if gc.stepDone() {
		return
	}
	if err == pool.ErrWouldBlock {
		gc.lxState = lxRest
		gc.upDeadline.Store(now.Add(rc.StreamIdleTimeout()).UnixNano())
		return
	}
	gc.upDeadline.Store(0)
	if err != nil || rc.BodyDone() {
		gc.endLoop(err == nil && rc.KeepAlive(), now)
		return
	}
	gc.lxState = lxBody
	gc.relay(now)
}

// relay relays what the upstream sent; it hands the exchange to a worker when the client
// falls behind. now is the event's clock reading: the bytes its steps relay arrived together.
func (gc *gconn) relay(now time.Time) {
	rc := gc.rc
	for gc.onLoop {
		if gc.c.OutboundBuffered() > sendHighWaterBytes {
			gc.handoff()
			return
		}
		gc.stepping = true
		done, err := rc.RelayStepAt(gc, now)
		if gc.stepDone() {
			return
		}
		if !done {
			continue
		}
		if err == pool.ErrWouldBlock {
			gc.upDeadline.Store(now.Add(rc.StreamIdleTimeout()).UnixNano())
			return
		}
		gc.upDeadline.Store(0)
		gc.endLoop(err == nil && rc.KeepAlive(), now)
		return
	}
}

// handoff moves the exchange to a worker goroutine, which relays the rest with the worker
// path's backpressure: the upstream socket is duplicated into a blocking connection (with the
// bytes the loop had read and not relayed in front) and its gnet connection closed.
func (gc *gconn) handoff() {
	rc := gc.rc
	uc := gc.lxUp
	nc, err := detachSocket(uc)
	if err != nil {
		// No socket to hand over (out of descriptors): the exchange cannot go on within its
		// bound, so the connection ends (loopClosed completes the request).
		_ = gc.c.Close()
		return
	}
	rc.Exchange().Handoff(nc)
	gc.lxUp, gc.lxState = nil, lxNone
	gc.upDeadline.Store(0)
	gc.onLoop = false
	gc.outbound.Store(int64(gc.c.OutboundBuffered()))
	if workers.Submit(gc.relayRest) != nil {
		go gc.relayRest()
	}
}

// relayRest relays the rest of a handed-off exchange on a worker goroutine, then ends the
// request as serve does.
func (gc *gconn) relayRest() {
	gc.finishServe(gc.guarded((*gconn).relayToEnd), 0)
}

func (gc *gconn) relayToEnd() bool {
	rc := gc.rc
	var err error
	for {
		var done bool
		if done, err = rc.RelayStep(gc); done {
			break
		}
	}
	rc.Finish()
	return err == nil && rc.KeepAlive()
}

// detachSocket duplicates uc's socket into a blocking net.Conn for a worker and closes the gnet
// connection. gnet's close is asynchronous: until it runs, the loop may still read the socket,
// so the bytes it read and did not relay, and those it reads until then, go in front of the
// socket's, and the worker reads the socket only once the loop no longer does (upClosed).
func detachSocket(uc *upConn) (net.Conn, error) {
	fd, err := uc.c.Dup()
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "upstream")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	h := &handoffConn{Conn: nc, ready: make(chan struct{}), done: make(chan struct{})}
	if n := uc.c.InboundBuffered(); n > 0 {
		h.rest = make([]byte, n)
		_, _ = uc.c.Read(h.rest)
	}
	uc.detached = true
	uc.handoff = h
	uc.owner = nil
	_ = uc.c.Close()
	return h, nil
}

// handoffConn is an upstream socket taken off its event loop: it returns rest, the bytes the
// loop read, before reading the socket itself, which it does only once ready is closed (the
// loop has let go of the socket).
type handoffConn struct {
	net.Conn
	rest      []byte // appended by the loop until ready is closed
	ready     chan struct{}
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

// took runs on the loop: bytes it read from the socket after the hand-off.
func (h *handoffConn) took(p []byte) { h.rest = append(h.rest, p...) }

// released runs on the loop once gnet has closed its copy of the socket.
func (h *handoffConn) released() { close(h.ready) }

func (h *handoffConn) Read(b []byte) (int, error) {
	select {
	case <-h.ready:
	case <-h.done:
		return 0, net.ErrClosed
	}
	if len(h.rest) > 0 {
		n := copy(b, h.rest)
		h.rest = h.rest[n:]
		return n, nil
	}
	return h.Conn.Read(b)
}

func (h *handoffConn) Close() error {
	h.closeOnce.Do(func() { close(h.done) })
	return h.Conn.Close()
}

// endLoop ends the loop's part of the request: the upstream connection goes back to the idle
// list (or closes), and the request completes, on a worker when completing may wait (the
// access log) or the connection must close once a slow client has read the response.
func (gc *gconn) endLoop(keepAlive bool, now time.Time) {
	rc := gc.rc
	if !gc.onLoop {
		return // ended already: a write that failed closed the client under the relay
	}
	gc.ls.releaseAt = now.UnixNano()
	rc.ReleaseUpstream()
	gc.ls.releaseAt = 0
	gc.lxUp, gc.lxB, gc.lxState = nil, nil, lxNone
	gc.upDeadline.Store(0)
	if gc.overflow.Load() {
		keepAlive = false // the connection ends after this response: finishServe may wait for it
	}
	if !rc.FinishWaits() && (keepAlive || gc.closed.Load()) {
		// onLoop holds until the request is finished: a completion stage that panics leaves
		// the loop a request to abandon (recoverOnLoop).
		rc.FinishAt(now)
		gc.onLoop = false
		gc.finishServe(keepAlive, now.UnixNano())
		return
	}
	gc.onLoop = false
	gc.outbound.Store(int64(gc.c.OutboundBuffered()))
	gc.endKeep = keepAlive
	if workers.Submit(gc.endFn) != nil {
		go gc.endOnWorker()
	}
}

func (gc *gconn) endOnWorker() {
	gc.finishServe(gc.guarded((*gconn).finish), 0)
}

func (gc *gconn) finish() bool {
	gc.rc.Finish()
	return gc.endKeep
}

// loopClosed runs on the loop when the client of a loop-driven exchange left: the request
// ends as cancelled (Cancel already aborted the upstream connection or the dial's wait).
func (gc *gconn) loopClosed() {
	if !gc.onLoop {
		return
	}
	if gc.stepping {
		gc.closedInStep = true // stepDone ends the request once the step has returned
		return
	}
	rc := gc.rc
	if gc.lxStop != nil {
		gc.lxConnect = nil // abandoned, not failed: its OnClose counts nothing
		gc.lxStop()
		gc.lxStop = nil
	}
	switch gc.lxState {
	case lxDial, lxHead:
		gc.lxState = lxNone
		gc.lxUp = nil
		// A client that left ends the request: no next backend comes back.
		_ = rc.LoopTried(gc.lxB, pipeline.ErrClientGone)
	case lxWait:
		gc.lxState = lxNone
		_ = rc.LoopResume(true)
	}
	gc.endLoop(false, time.Now())
}

// recoverOnLoop, deferred around a request's handling on the event loop, keeps a panic there
// (a bug in a loop-safe stage, say) from ending the process, as guarded does on a worker: a
// request driven by the loop ends with a 500 when no byte of its response went out, gives back
// what it holds (its upstream connection closes, its completion stages run on a worker:
// pipeline.RequestCtx.FinishAfterPanic), and the client connection closes. Outside such a
// request (a request being read, or one a worker runs) the connection just closes.
func (gc *gconn) recoverOnLoop() {
	v := recover()
	if v == nil {
		return
	}
	gc.e.panics.report(gc.e.log, gc.e.set.Name, v)
	ours := gc.onLoop
	if again := gc.abandonOnLoop(); again != nil {
		gc.e.panics.report(gc.e.log, gc.e.set.Name, again)
		_ = gc.c.Close()
		if ours && gc.onLoop {
			// The request's state is unknown: its RequestCtx is left to the collector, and the
			// connection's part of the request ends as any other (the count of requests in
			// flight that a drain waits for).
			gc.onLoop = false
			gc.setCancel(pipeline.CancelHandle{})
			gc.rc = nil
			go gc.finishServe(false, 0)
		}
	}
}

// abandonOnLoop ends the loop's part of a request whose handling panicked; it returns a panic
// of its own, recovered.
func (gc *gconn) abandonOnLoop() (again any) {
	defer func() { again = recover() }()
	gc.stepping, gc.closedInStep = false, false
	if !gc.onLoop {
		_ = gc.c.Close() // OnClose ends a request being read; a worker's request sees the close
		return nil
	}
	rc := gc.rc
	if gc.lxStop != nil {
		gc.lxConnect = nil
		gc.lxStop()
		gc.lxStop = nil
	}
	if x := rc.Exchange(); x != nil {
		x.Abort() // its state is unknown: the upstream connection closes
	}
	rc.ReleaseUpstream() // on the loop, which owns the upstream connection
	gc.lxUp, gc.lxB, gc.lxNext, gc.lxState = nil, nil, nil, lxNone
	gc.lxSeq++ // a retry's timer or a dial still to come finds itself stale
	gc.upDeadline.Store(0)
	gc.onLoop = false
	if !gc.answering && !gc.closed.Load() {
		_, _ = gc.c.Write(internalErrorResponse(nil, &rc.Req))
	}
	gc.outbound.Store(int64(gc.c.OutboundBuffered()))
	if workers.Submit(gc.endAfterPanic) != nil {
		go gc.endAfterPanic()
	}
	return nil
}

// endAfterPanic completes a request whose handling panicked on the loop (completion may write
// the access log) and closes the connection once the client has what was written.
func (gc *gconn) endAfterPanic() {
	gc.finishAfterPanic()
	gc.finishServe(false, 0)
}

func (gc *gconn) loopClosedGuarded() {
	defer gc.recoverOnLoop()
	gc.loopClosed()
}

// stepDone ends a write step of the loop path (gconn.stepping) and reports whether the client
// connection closed during it; the request has then been ended as the close ends it.
func (gc *gconn) stepDone() bool {
	gc.stepping = false
	if !gc.closedInStep {
		return false
	}
	gc.closedInStep = false
	gc.loopClosed()
	return true
}

// checkDeadline runs on the loop when the sweep woke a loop-driven exchange: an upstream past
// its response-head or stream-idle timeout fails as it would on a worker.
func (gc *gconn) checkDeadline(now int64) {
	d := gc.upDeadline.Load()
	if d == 0 || now < d {
		return
	}
	gc.upDeadline.Store(0)
	x := gc.rc.Exchange()
	t := time.Now() // now is wall-clock nanoseconds: stamps need the monotonic reading
	switch gc.lxState {
	case lxDial:
		gc.connectTimedOut() // a worker's dial has its own timeout
	case lxHead:
		err := x.Timeout(pool.OpReadHead)
		gc.lxState, gc.lxUp = lxNone, nil
		gc.tryOn(gc.rc.LoopTried(gc.lxB, err), t)
	case lxRest:
		_ = x.Timeout(pool.OpReadBody)
		gc.respond(t)
	case lxBody:
		_ = x.Timeout(pool.OpReadBody)
		gc.relay(t)
	}
}

// upstream events, dispatched by the engine's handlers.

func (e *GnetEngine) upTraffic(uc *upConn) gnet.Action {
	if uc.detached {
		// Read after the hand-off, before gnet's close ran: the worker gets it first.
		if buf, _ := uc.c.Next(-1); len(buf) > 0 {
			uc.handoff.took(buf)
		}
		return gnet.None
	}
	if uc.owner == nil || uc.owner.lxUp != uc {
		// Idle: an upstream that sends unasked is not in step with its requests.
		return gnet.Close
	}
	defer uc.owner.recoverOnLoop()
	uc.owner.onUpstream(time.Now()) // the one clock read of this event
	return gnet.None
}

func (e *GnetEngine) upClosed(uc *upConn, err error) {
	if uc.detached {
		uc.handoff.released()
		return
	}
	uc.closed, uc.closeErr = true, err
	if uc.connecting {
		// The connect the loop began failed, or the request that waited for it ended (Close,
		// err nil): only a failure is counted, and reported to a request still waiting.
		uc.connecting = false
		if uc.spare != nil {
			if err == nil {
				uc.ls.spareDone(uc.p, nil) // the engine stops
			} else {
				uc.ls.spareDone(uc.p, uc.p.ConnectDone(err))
			}
			return
		}
		gc := uc.owner
		if gc == nil || gc.lxConnect != uc {
			return
		}
		gc.lxConnect, gc.lxStop = nil, nil
		if err == nil {
			err = errUpstreamGone
		}
		e.dialFailed(uc, uc.p.ConnectDone(err))
		return
	}
	if uc.inIdle {
		uc.ls.dropIdle(uc) // the upstream closed it, or the engine stops: it holds no idle slot
		return
	}
	if gc := uc.owner; gc != nil && gc.lxUp == uc {
		defer gc.recoverOnLoop()
		gc.onUpstream(time.Now())
	}
}

// sweepLoops asks each event loop to close its stale idle upstream connections.
func (e *GnetEngine) sweepLoops(now int64) {
	e.loops.Range(func(_, v any) bool {
		ls := v.(*loopState)
		_ = ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			ls.sweepIdle(now)
			return nil
		}))
		return true
	})
}
