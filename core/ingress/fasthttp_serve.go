package ingress

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
)

// stopTimeout bounds how long a drain waits for an engine to stop once its connections are
// closed (a drain that ran out of time closes them).
const stopTimeout = 5 * time.Second

// maxWraps bounds the walk through connection wrappers (tracking, counting, TLS).
const maxWraps = 8

// drainSweepInterval is how often a drain of the fasthttp engine looks for connections it may
// close; a connection between requests is closed up to one interval after it may be.
const drainSweepInterval = 50 * time.Millisecond

// newConnDrainGrace is how long a drain of the fasthttp engine spares a connection accepted
// before the listener closed that has sent nothing yet: its request is on the way. net/http and
// fasthttp's own Shutdown count a new connection as idle after 5 s too.
const newConnDrainGrace = 5 * time.Second

// serveListener is the listener the fasthttp engine hands to fasthttp.Server. Its first Accept
// tells Start that Serve runs. It keeps every open connection: the engine drains them itself
// (drain), and the Transport contract is that a drain ends them.
type serveListener struct {
	net.Listener
	accepting chan struct{} // closed at the first Accept
	once      sync.Once
	linger    lingerLimits
	limits    *http1.Limits                      // of the framing check of each connection (fasthttp_framing.go)
	bound     func(*http1.Request) (int64, bool) // the framing check's body bound by route (framingCheck.bound)
	bodyIdle  time.Duration                      // read_header_timeout: how long a request body may pause
	m         *metrics.Entrypoint
	shed      *shedLog // the engine's log of shed connections
	retry     acceptRetry

	closed    chan struct{} // closed once the listening socket is
	closeOnce sync.Once
	// acceptEnded is closed once Accept has reported the listener closed: every connection
	// taken from the backlog at the close (backlogListener) was accepted before.
	acceptEnded chan struct{}
	endOnce     sync.Once

	mu    sync.Mutex
	conns map[*servedConn]struct{}
	cut   bool          // the drain ran out of time: every connection is closed on sight
	empty chan struct{} // closed when conns becomes empty; made by waitGone
}

func newServeListener(ln net.Listener, linger lingerLimits, limits *http1.Limits, m *metrics.Entrypoint, shed *shedLog) *serveListener {
	return &serveListener{Listener: ln, accepting: make(chan struct{}), closed: make(chan struct{}), acceptEnded: make(chan struct{}), conns: make(map[*servedConn]struct{}), linger: linger, limits: limits, m: m, shed: shed}
}

// Close implements net.Listener: a drain calls it first, and Serve then returns.
func (l *serveListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// Accept implements net.Listener.
func (l *serveListener) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	var c net.Conn
	for {
		var err error
		if c, err = l.Listener.Accept(); err == nil {
			l.retry.accepted()
			break
		}
		// fasthttp's Serve returns on any accept error but a timeout, and the entrypoint
		// would never accept again: out of descriptors, wait a little and try again.
		if errors.Is(err, net.ErrClosed) {
			l.endOnce.Do(func() { close(l.acceptEnded) })
			return nil, err
		}
		if !l.retry.wait(l.shed.log, l.shed.entrypoint, err, l.closed) {
			l.endOnce.Do(func() { close(l.acceptEnded) })
			return nil, net.ErrClosed
		}
	}
	sc := &servedConn{Conn: c, l: l, check: framingCheck{lim: l.limits, bound: l.bound, cutBound: -1}}
	sc.since.Store(time.Now().UnixNano())
	l.mu.Lock()
	cut := l.cut
	if !cut {
		l.conns[sc] = struct{}{}
	}
	l.mu.Unlock()
	if cut {
		_ = c.Close()
		return nil, net.ErrClosed // fasthttp's Serve returns on this
	}
	return sc, nil
}

func (l *serveListener) forget(c *servedConn) {
	l.mu.Lock()
	delete(l.conns, c)
	if len(l.conns) == 0 && l.empty != nil {
		close(l.empty)
		l.empty = nil
	}
	l.mu.Unlock()
}

// waitGone waits until fasthttp has let go of every connection, or stop is closed; it reports
// whether none is left.
func (l *serveListener) waitGone(stop <-chan struct{}) bool {
	l.mu.Lock()
	if len(l.conns) == 0 {
		l.mu.Unlock()
		return true
	}
	if l.empty == nil {
		l.empty = make(chan struct{})
	}
	empty := l.empty
	l.mu.Unlock()
	select {
	case <-empty:
		return true
	case <-stop:
		return false
	}
}

// drain closes the connections a drain need not wait for (servedConn.claimIdle), at once and
// as more come to be, until none is left (it returns true) or stop is closed (false). A
// connection serving a request is left to finish it.
func (l *serveListener) drain(stop <-chan struct{}) bool {
	t := time.NewTicker(drainSweepInterval)
	defer t.Stop()
	for {
		empty := l.closeIdle(time.Now().UnixNano())
		if empty == nil {
			return true
		}
		select {
		case <-empty:
			return true
		case <-stop:
			return false
		case <-t.C:
		}
	}
}

// closeIdle closes the connections a drain at now (unix ns) need not wait for; fasthttp's
// goroutine of each then finds it closed and lets it go. It returns a channel closed once
// no connection is left, or nil when none is left already.
func (l *serveListener) closeIdle(now int64) <-chan struct{} {
	var idle []*servedConn
	l.mu.Lock()
	if len(l.conns) == 0 {
		l.mu.Unlock()
		return nil
	}
	for c := range l.conns {
		if c.claimIdle(now) {
			idle = append(idle, c)
		}
	}
	if l.empty == nil {
		l.empty = make(chan struct{})
	}
	empty := l.empty
	l.mu.Unlock()
	for _, c := range idle {
		_ = c.Conn.Close()
	}
	return empty
}

// cutAll closes every open connection, aborting the upstream exchange of the request in flight
// on it, and reports how many there were. Connections accepted later are closed at once.
func (l *serveListener) cutAll() int {
	l.mu.Lock()
	l.cut = true
	conns := make([]*servedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.cut()
	}
	return len(conns)
}

// stopped waits up to d for Serve to have returned (done closed) and for every connection to be
// let go; it reports whether both happened.
func (l *serveListener) stopped(done <-chan struct{}, d time.Duration) bool {
	late := make(chan struct{})
	timer := time.AfterFunc(d, func() { close(late) })
	defer timer.Stop()
	select {
	case <-done:
	case <-late:
		return false
	}
	return l.waitGone(late)
}

// The phases of a served connection, as a drain sees them (servedConn.phase): connNew until a
// byte of its first request arrives; connBusy while a request arrives or is answered, and for
// good once fasthttp hands the connection over (Hijack); connAnswered once its response is
// written (fasthttp ends the connection after one that says Connection: close), and connIdle
// once fasthttp waits for the next request; connClaimed once a drain took it to close it. Only
// a connection in connNew or connIdle may be closed by a drain: not one whose next request
// fasthttp read with the last (pipelined), nor one whose answer is still in fasthttp's buffer
// because such a request follows.
const (
	connNew int32 = iota
	connBusy
	connAnswered
	connIdle
	connClaimed
)

// servedConn is one client connection of the fasthttp engine.
type servedConn struct {
	net.Conn
	l *serveListener

	phase atomic.Int32 // connNew, connBusy, ...
	// since is when it was accepted (connNew), or when its last response was written during a
	// drain (0: before the drain), in unix ns.
	since atomic.Int64

	mu    sync.Mutex
	w     *disconnectWatch // the watch of the request in flight, if it started
	isCut bool

	lingers atomic.Bool // the last response ends the connection: Close lingers (linger.go)
	// ending: the response being written is the connection's last (endAfterResponse).
	ending atomic.Bool
	// stall is client_stall_timeout in ns while a response body is written under it (0 when
	// not): each write gets that long, and one that times out is a stalled client (counted
	// once).
	stall atomic.Int64
	// reset: a write timed out under stall, so Close resets the connection at once.
	reset atomic.Bool

	// check follows the request stream with the gateway's parser; only fasthttp's goroutine
	// of the connection (and, after an upgrade, the tunnel it hands the connection to) reads.
	check  framingCheck
	served uint64 // requests that reached the handler
}

// Read implements net.Conn: the bytes pass through the framing check first. Once the check
// has refused a request, reads return its error (an *http1.Error), so that fasthttp stops
// waiting for a head that will never end as it expects and hands the error to the
// ErrorHandler.
//
// A read that times out while the head so far is only the empty lines a client may send
// before a request line (RFC 9112 §2.2) returns stallMark with the timeout. fasthttp takes a
// failed head read whose bytes are all CR and LF for a peer that closed after a message (it
// tolerates the CRLFs some peers leave behind a body) and closes the connection without an
// answer; with the mark in its buffer the timeout reaches the ErrorHandler, which answers 408
// and counts the shed, as for any other head that stalls and as the gnet engine does. The
// mark comes with the error, so no head that holds it can ever complete. Empty lines at the
// start of a read before a request line never reach fasthttp (framingCheck.dropEmptyLines).
func (c *servedConn) Read(p []byte) (int, error) {
	if c.ending.Load() {
		return 0, net.ErrClosed // fasthttp takes it for the close it is, without an answer
	}
	if p := c.phase.Load(); p != connBusy {
		if p == connAnswered {
			c.phase.CompareAndSwap(connAnswered, connIdle) // fasthttp waits for the next request
		}
		if h := waitReadHook.Load(); h != nil {
			(*h)(p == connNew)
		}
	}
	for {
		if c.check.err != nil {
			return 0, c.check.err
		}
		n, err := c.read(p)
		if n > 0 || err != nil || len(p) == 0 {
			return n, err
		}
		// All the read held was empty lines before a request line: read on.
	}
}

// read is one Read of the connection; it returns 0 and no error when the bytes read were all
// empty lines before a request line, dropped (framingCheck.dropEmptyLines).
func (c *servedConn) read(p []byte) (int, error) {
	if c.check.pendingCR && len(p) == 1 {
		// No room for the CR held back in front of what follows it: it goes on alone, and
		// the check follows it as the start of a head.
		c.check.pendingCR = false
		p[0] = '\r'
		_ = c.check.feed(p[:1])
		return 1, nil
	}
	off := 0
	if c.check.pendingCR {
		off = 1 // room for the CR held back, should it not begin an empty line
	}
	n, err := c.Conn.Read(p[off:])
	if n > 0 && c.phase.Load() != connBusy && !c.begin() {
		return 0, net.ErrClosed // fasthttp takes it for the close it is, without an answer
	}
	if n > 0 && len(p) > 1 {
		blank := c.check.empty > 0 || c.check.pendingCR
		kept := c.check.dropEmptyLines(p[off:off+n], p)
		n = copy(p, kept)
		if n == 0 && !blank && c.l.bodyIdle > 0 {
			// fasthttp, seeing nothing, still waits for a request to begin: the empty lines
			// start the head's clock, read_header_timeout, as a head's first byte does.
			_ = c.Conn.SetReadDeadline(time.Now().Add(c.l.bodyIdle))
		}
	}
	if n > 0 && !c.check.off {
		_ = c.check.feed(p[:n])
		if c.check.inBody && c.l.bodyIdle > 0 {
			// The body is still arriving: read_header_timeout bounds a pause in it, not the
			// whole upload (fasthttp's ReadTimeout runs from the request's first byte), as
			// nginx's client_body_timeout does.
			_ = c.Conn.SetReadDeadline(time.Now().Add(c.l.bodyIdle))
		}
	}
	if n == 0 && len(p) > 0 && err != nil && c.check.blankHead() && isTimeout(err) {
		p[0] = stallMark
		return 1, err
	}
	if c.check.blankRefused && len(p) > 0 {
		// Refused for the empty lines of this read. fasthttp holds no byte of a request line,
		// or only empty lines: a failed read would look to it like a client that left after
		// its last response, and it would close without the answer. The mark in their place
		// makes it a head that failed.
		c.check.blankRefused = false
		p[0] = stallMark
		return 1, c.check.err
	}
	return n, err
}

// endAfterResponse makes the response being written, or just written, the connection's last,
// when the connection cannot be trusted with another request: fasthttp's next read of it
// fails as a closed connection's (Read), a request it had already read behind that response
// is not served (fastExchange.start), and the close lingers, since the client may have sent
// more.
func (c *servedConn) endAfterResponse() {
	c.lingers.Store(true)
	c.ending.Store(true)
}

// begin marks the connection busy: a request has begun to arrive on it. It reports false
// when a drain closed the connection first: the bytes read are then dropped unanswered, as a
// request that arrives after the close.
func (c *servedConn) begin() bool {
	for {
		p := c.phase.Load()
		switch {
		case p == connClaimed:
			return false
		case p == connBusy, c.phase.CompareAndSwap(p, connBusy):
			return true
		}
	}
}

// answered marks the connection's response as written and flushed, with the promise of
// keep-alive. During a drain that response's head went out before the drain began (those
// after say Connection: close): its client may send the next request at once, and claimIdle
// gives it freshDrainGrace to.
func (c *servedConn) answered(draining bool) {
	var since int64
	if draining {
		since = time.Now().UnixNano()
	}
	c.since.Store(since)
	c.phase.CompareAndSwap(connBusy, connAnswered)
}

// claimIdle takes the connection for a drain at now (unix ns) to close, and reports whether it
// did: one waiting for its next request, at once when its last response was written before
// the drain began and after freshDrainGrace when during it, or a new one that has sent nothing
// newConnDrainGrace after its accept. A request that begins first keeps it (begin), and so does
// one whose bytes wait in the socket, not yet read by fasthttp's goroutine (socketHasInput).
func (c *servedConn) claimIdle(now int64) bool {
	p := c.phase.Load()
	switch p {
	case connIdle:
		if s := c.since.Load(); s != 0 && now-s <= freshDrainGrace.Nanoseconds() {
			return false
		}
	case connNew:
		if now-c.since.Load() <= newConnDrainGrace.Nanoseconds() {
			return false
		}
	default:
		return false
	}
	if socketHasInput(c.Conn) {
		// A request came, and its goroutine has not read it yet (it is runnable, not run):
		// closing would reset the connection under a request its client sent (a POST is not
		// sent again). The goroutine reads it and fasthttp serves it, with Connection: close.
		return false
	}
	return c.phase.CompareAndSwap(p, connClaimed)
}

// socketHasInput reports whether the TCP socket under c holds received bytes not read yet
// (unreadInput, one ioctl). Over TLS such bytes are a record the client sent: a request, or a
// part of one. False when c has no TCP socket under it or the queue cannot be read. Only a
// drain looks, once for each connection it would close, never a request.
func socketHasInput(c net.Conn) bool {
	tc := unwrapTCP(c)
	if tc == nil {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	in := false
	// Control keeps the descriptor open while the ioctl runs on it.
	_ = rc.Control(func(fd uintptr) { in = unreadInput(int(fd)) })
	return in
}

// waitReadHook, when set, runs on fasthttp's goroutine of a connection before each read while
// no request is arriving on it; first: the connection has sent nothing yet (tests hold the
// goroutine there).
var waitReadHook atomic.Pointer[func(first bool)]

// stallMark is the byte servedConn.Read adds to a head of empty lines that timed out: a NUL,
// which neither ends a line nor starts a request line.
const stallMark = 0

// isTimeout reports whether err is a timeout, such as a read past the connection's deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// headTooLarge returns the refusal of the head fasthttp found over its read buffer on the
// connection behind c: 414 or 431 by where the header size limit ran out; nil when the
// framing check does not hold that head.
func headTooLarge(c net.Conn) error {
	if sc := servedConnOf(c); sc != nil && !sc.check.off && len(sc.check.head) > 0 {
		return sc.check.tooLarge()
	}
	return nil
}

// stalledInBody reports whether the framing check of the connection behind c was inside a
// request body when the stream stopped: a timeout then says the body did not complete, not
// the head. False when the check does not follow the stream.
func stalledInBody(c net.Conn) bool {
	sc := servedConnOf(c)
	return sc != nil && !sc.check.off && sc.check.inBody
}

// servedConnOf finds the servedConn among c and the connections it wraps.
func servedConnOf(c net.Conn) *servedConn {
	for i := 0; i < maxWraps && c != nil; i++ {
		if sc, ok := c.(*servedConn); ok {
			return sc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// refusal returns the framing check's refusal of the request fasthttp reads next on the
// connection (the one after the last that reached the handler), or nil. A refusal of a later
// request, pipelined behind it, is not its.
func (c *servedConn) refusal() error {
	if c.check.err != nil && c.check.errMsg <= c.served+1 {
		return c.check.err
	}
	return nil
}

// Write implements net.Conn. While a response body is written, each write must finish within
// client_stall_timeout from its own start, so that time the stream spent waiting for the
// upstream is not counted against the client; a write that times out counts and logs the
// client as shed for stalling.
func (c *servedConn) Write(p []byte) (int, error) {
	stall := c.stall.Load()
	var start time.Time
	if stall > 0 {
		start = time.Now()
		_ = c.Conn.SetWriteDeadline(start.Add(time.Duration(stall)))
	}
	n, err := c.Conn.Write(p)
	if err != nil && stall > 0 {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && c.stall.Swap(0) != 0 {
			if tc := unwrapTCP(c.Conn); tc != nil {
				_ = tc.SetLinger(0) // reset, not closed: resetOnClose says why
				c.reset.Store(true)
			}
			if c.l.m != nil {
				c.l.m.Shed(metrics.ShedClientStall)
			}
			if c.l.shed != nil {
				c.l.shed.clientStall(c.RemoteAddr(), int64(len(p)-n), time.Since(start))
			}
		}
	}
	return n, err
}

// armStall puts the writes of c (a served connection) under client_stall_timeout d, or takes
// them from under it (d = 0).
func armStall(c net.Conn, d time.Duration) {
	if sc, ok := c.(*servedConn); ok {
		sc.stall.Store(int64(d))
	}
}

// Close implements net.Conn; fasthttp calls it when it is done with the connection, from the
// connection's worker once its last response is written. After a response that ends the
// connection the client may still be sending, so the close lingers there: the connection keeps
// its worker, and so counts against max_connections as on the gnet engine, and stays among
// those a drain waits for (or cuts).
func (c *servedConn) Close() error {
	if c.lingers.Swap(false) {
		lingerClose(c.Conn, c.l.linger)
		c.l.forget(c)
		return nil
	}
	c.l.forget(c)
	if c.reset.Load() {
		// The socket goes first: over TLS, closing the TLS connection sends its close_notify
		// alert first, and that write would wait for the client that stopped reading, up to
		// the alert's own 5 s deadline, holding the connection and its queued bytes.
		err := unwrapTCP(c.Conn).Close()
		_ = c.Conn.Close() // the layers above the socket: TLS, the connection count
		return err
	}
	return c.Conn.Close()
}

// lingerOnClose makes the close of c (or of the served connection it wraps) linger.
func lingerOnClose(c net.Conn) {
	for i := 0; i < maxWraps && c != nil; i++ {
		if sc, ok := c.(*servedConn); ok {
			sc.lingers.Store(true)
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

// NetConn returns the wrapped connection (for the disconnect watch).
func (c *servedConn) NetConn() net.Conn { return c.Conn }

// hold implements watchHolder.
func (c *servedConn) hold(w *disconnectWatch) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCut {
		return false
	}
	c.w = w
	return true
}

// release implements watchHolder.
func (c *servedConn) release(w *disconnectWatch) {
	c.mu.Lock()
	if c.w == w {
		c.w = nil
	}
	c.mu.Unlock()
}

// cut ends the request in flight (its watch aborts the upstream exchange, and a watch that has
// not started yet finds the connection cut) and closes the socket under fasthttp, whose
// goroutine then unwinds and calls Close.
func (c *servedConn) cut() {
	c.mu.Lock()
	c.isCut = true
	w := c.w
	c.mu.Unlock()
	if w != nil {
		w.cut()
	}
	_ = c.Conn.Close()
}

// watchHolder is a client connection that keeps the disconnect watch of the request in flight
// on it, so that a drain that runs out of time can end that request (servedConn).
type watchHolder interface {
	// hold records w as the watch of the request in flight; it reports false when the
	// connection was already cut, and then the caller ends the request itself.
	hold(w *disconnectWatch) bool
	// release forgets w: its request has ended.
	release(w *disconnectWatch)
}

// holderOf finds the watchHolder among c and the connections it wraps.
func holderOf(c net.Conn) watchHolder {
	for i := 0; i < maxWraps && c != nil; i++ {
		if h, ok := c.(watchHolder); ok {
			return h
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}
