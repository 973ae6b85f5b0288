package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/internal/loglimit"
)

// tickInterval is how often idle, header-read and drain deadlines are checked. gnet has no
// per-connection deadlines, so timeouts are enforced by this sweep; a timeout
// fires up to one interval late.
const tickInterval = 250 * time.Millisecond

// freshDrainGrace is how long a drain waits before it closes a connection whose client may
// be sending a request it had every reason to send: the first request of a connection that was
// accepted and has sent nothing yet, or the next request of one whose response ended during the
// drain under a head sent before it, which did not say Connection: close.
const freshDrainGrace = time.Second

// GnetEngine serves one plaintext entrypoint on gnet event loops. Event loops only parse,
// buffer and write; each request is proxied on its own goroutine, which hands response bytes
// back to the loop with AsyncWrite (only AsyncWrite, Wake and Close are safe off the loop).
//
// The engine accepts connections itself and hands each to gnet (Engine.Register), rather than
// letting gnet listen, so that a drain can close the listening socket at once while the event
// loops go on serving the requests in flight: new connections are then refused (RST, so a
// client or load balancer tries elsewhere) instead of accepted and closed. gnet v2 has no way
// to close only its listener: its accept loop takes the error a closed or shut-down listening
// socket gives (EINVAL) as fatal and stops the whole engine, connections and all. gnet still
// needs a listener of its own to run (and to take registrations); it gets a loopback port
// that nothing is meant to connect to, and a connection that does is closed at once (OnOpen
// knows acceptLoop's connections by their context). Not a Unix socket: that needs a writable
// directory, which a container with a read-only root file system does not have.
type GnetEngine struct {
	gnet.BuiltinEventEngine
	set  Settings
	pipe *pipeline.Entrypoint
	log  *slog.Logger

	ln           net.Listener   // the entrypoint's listener, accepted by acceptLoop
	loopAccepted atomic.Int64   // connections the event loops accepted (shareListener)
	panics       panicGuard     // requests whose handling panicked
	accept       acceptRetry    // acceptLoop's pace after failed accepts, and its log
	registerLog  loglimit.Limit // "accepted connection dropped" lines
	shed         shedLog        // "client connection shed" lines
	lnOnce       sync.Once
	// shareMu guards sharedFD (a duplicate of ln's descriptor that every event loop accepts
	// from, shareListener; -1: none) and lnClosed against a close that races the sharing.
	shareMu    sync.Mutex
	sharedFD   int
	lnClosed   bool
	closing    chan struct{}  // closed once the listener is
	acceptDone chan struct{}  // closed when acceptLoop has returned
	enrolling  sync.WaitGroup // connections handed to gnet and not yet opened by a loop

	eng      gnet.Engine   // set by OnBoot, before running is closed
	launched atomic.Bool   // Start got as far as running gnet
	running  chan struct{} // closed by the first OnTick: the event loops take connections
	runOnce  sync.Once
	stopped  chan struct{} // closed when gnet.Run has returned
	runErr   error
	draining atomic.Bool
	counters
	m         *metrics.Entrypoint
	release   func() // of the entrypoint's gauges, once it serves (Start)
	inherited bool   // ln came from Settings.Listener: its accepted connections need keep-alive off
	// donated is set once ListenerFile gave the socket to a transport taking over the address:
	// the backlog is that transport's to accept then (closeListener).
	donated atomic.Bool

	mu      sync.Mutex
	live    map[*gconn]struct{}   // open connections, for the deadline sweep
	tunnels map[net.Conn]struct{} // WebSocket tunnels, off the event loops (websocket.go)

	loops sync.Map // gnet.EventLoop → *loopState: upstream connections per loop (gnet_loop.go)

	// The loop path's dials (gnet_loop.go): each one's context derives from dialCtx, which
	// stopDials cancels when gnet stops; dials counts those in flight.
	dialCtx      context.Context
	stopDials    context.CancelFunc
	dialMu       sync.Mutex
	dialsStopped bool
	dials        sync.WaitGroup
}

// NewGnet returns an engine for the entrypoint described by set, routing with res.
func NewGnet(set Settings, res pipeline.Resolver, log *slog.Logger) *GnetEngine {
	set.fill()
	if log == nil {
		log = slog.Default()
	}
	e := &GnetEngine{set: set, log: log, running: make(chan struct{}), stopped: make(chan struct{}), acceptDone: make(chan struct{}), closing: make(chan struct{}), sharedFD: -1, live: make(map[*gconn]struct{}), tunnels: make(map[net.Conn]struct{})}
	e.shed.log, e.shed.entrypoint = log, set.Name
	e.dialCtx, e.stopDials = context.WithCancel(context.Background())
	e.m = metrics.ForEntrypoint(set.Name)
	e.pipe = pipeline.NewEntrypoint(set.Name, false, res, e.m, log)
	e.pipe.TrustedIPs = set.TrustedIPs
	return e
}

// Listen implements Transport.
func (e *GnetEngine) Listen() error {
	if e.ln != nil {
		return nil
	}
	ln := e.set.Listener
	if ln == nil {
		// No TCP keep-alive probes, as when gnet listened: idle_timeout ends idle connections.
		lc := net.ListenConfig{KeepAlive: -1}
		var err error
		if ln, err = lc.Listen(context.Background(), "tcp", e.set.Address); err != nil {
			return fmt.Errorf("sluice: entrypoint %s: %w", e.set.Name, err)
		}
	} else {
		e.inherited = true
	}
	e.set.Address = ln.Addr().String()
	e.pipe.Port = listenPort(ln.Addr())
	e.ln = ln
	return nil
}

// Refusing implements Transport.
func (e *GnetEngine) Refusing() <-chan struct{} { return e.closing }

// ListenerFile implements Transport.
func (e *GnetEngine) ListenerFile() (*os.File, error) {
	f, err := listenerFile(e.ln)
	if err == nil {
		e.donated.Store(true)
	}
	return f, err
}

// Start implements Transport.
func (e *GnetEngine) Start() error {
	if err := e.Listen(); err != nil {
		return err
	}
	e.launched.Store(true)
	go func() {
		defer close(e.stopped)
		e.runErr = gnet.Run(e, "tcp://127.0.0.1:0",
			gnet.WithNumEventLoop(e.set.eventLoops()),
			// Registrations come from acceptLoop, off the event loops: the round-robin balancer
			// is not safe for that, the least-connections one is.
			gnet.WithLoadBalancing(gnet.LeastConnections),
			gnet.WithTicker(true),
			gnet.WithLogger(gnetLogger{e.log}),
			gnet.WithLockOSThread(false),
		)
		// Whatever stopped gnet, the entrypoint no longer serves: refuse connections.
		e.closeListener()
	}()
	select {
	case <-e.running:
		e.release = e.counters.publish(e.set.Name, e.m)
		if e.shareListener() {
			close(e.acceptDone)
		} else {
			go e.acceptLoop()
		}
		return nil
	case <-e.stopped:
		return fmt.Errorf("sluice: entrypoint %s on %s: %w", e.set.Name, e.set.Address, e.runErr)
	}
}

// accepted is the context acceptLoop gives the connections it hands to gnet, and
// acceptedOnLoop the one of the connections an event loop accepted itself (shareListener).
var (
	accepted       = &struct{ byAcceptLoop bool }{true}
	acceptedOnLoop = &struct{ byAcceptLoop bool }{false}
)

// shareListener has every event loop accept from the entrypoint's listener itself, on a
// duplicate of its descriptor (gnet's ShareListener, a patch: internal/gnet/PATCHES.md): a new
// connection then costs one accept4 on the loop that will serve it (on Linux the loop whose
// turn it is: the listener is armed on one loop at a time) instead of a wait for the Go
// netpoller, a hand-off from acceptLoop and two more duplicates of its socket. It reports
// false when the listener has no descriptor or a loop refused it: acceptLoop accepts then.
func (e *GnetEngine) shareListener() bool {
	rc := e.loopListener()
	if rc == nil {
		return false
	}
	e.shareMu.Lock()
	defer e.shareMu.Unlock()
	if e.lnClosed {
		return false
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(lfd uintptr) {
		if fd, dupErr = unix.FcntlInt(lfd, unix.F_DUPFD_CLOEXEC, 0); dupErr != nil {
			return
		}
		// Go sets TCP_NODELAY on each connection it accepts; a connection the kernel accepts
		// for a loop inherits it from the listener instead.
		dupErr = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}); err != nil || dupErr != nil {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return false
	}
	if err := e.eng.ShareListener(fd, acceptedOnLoop, e.loopAcceptFailed); err != nil {
		_ = e.eng.UnshareListener(fd)
		_ = unix.Close(fd)
		e.log.Warn("event loops cannot accept from the listener; an accept goroutine will", "entrypoint", e.set.Name, "error", err.Error())
		return false
	}
	e.sharedFD = fd
	return true
}

// acceptLoop accepts the entrypoint's connections and hands each to gnet's event loops, until
// the listener is closed.
func (e *GnetEngine) acceptLoop() {
	defer close(e.acceptDone)
	for {
		if acceptHook != nil {
			acceptHook()
		}
		c, err := e.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little and try again.
			e.accept.wait(e.log, e.set.Name, err, e.closing)
			continue
		}
		e.accept.accepted()
		if tc, ok := c.(*net.TCPConn); ok && e.inherited {
			_ = tc.SetKeepAlive(false) // as the engine's own listener sets (Listen)
		}
		e.register(c)
	}
}

// acceptHook, when set (by tests), runs in acceptLoop before each Accept.
var acceptHook func()

// register hands an accepted connection to gnet: gnet takes over a copy of the socket and
// closes c; OnOpen then runs on a loop.
func (e *GnetEngine) register(c net.Conn) {
	ctx := gnet.NewContext(gnet.NewNetConnContext(context.Background(), c), accepted)
	ch, err := e.eng.Register(ctx)
	if err != nil {
		_ = c.Close()
		return
	}
	e.enrolling.Add(1)
	go func() {
		defer e.enrolling.Done()
		if res := <-ch; res.Err != nil {
			e.registerFailed(res.Err)
		}
	}()
}

// loopAcceptFailed logs, as acceptLoop and registerFailed do, that an event loop could not
// accept from the shared listener (out of descriptors: it tries again in 100 ms, or sooner when
// a connection closes) or could not
// open a connection it accepted. It runs on the loop.
func (e *GnetEngine) loopAcceptFailed(err error, dropped bool) {
	if dropped {
		e.registerFailed(err)
		return
	}
	if n, ok := e.accept.log.Allow(); ok {
		e.log.Warn("accept failed; retrying", "entrypoint", e.set.Name, "error", err.Error(), "retry_in", "100ms", "suppressed_since_last", n)
	}
}

// registerFailed logs, once a second at most, that gnet could not take over an accepted
// connection (out of descriptors, gnet's copy of the socket fails): the client sees its
// connection closed, and the operator sees why.
func (e *GnetEngine) registerFailed(err error) {
	if n, ok := e.registerLog.Allow(); ok {
		e.log.Warn("accepted connection dropped: the event loop could not take it", "entrypoint", e.set.Name, "error", err.Error(), "suppressed_since_last", n)
	}
}

// closeListener closes the entrypoint's listening socket: from then on the kernel refuses new
// connections. The connections already in its backlog are taken and served first: the kernel
// completed their handshakes, so their clients have sent requests that the last close of the
// socket would answer with a reset (unless the socket went to a transport taking over the
// address, whose to accept they are). A client connecting between the last take and the close
// can still meet that reset; the window is one system call wide, as the descriptors taken are
// only wrapped and handed to the loops after the close.
func (e *GnetEngine) closeListener() {
	e.lnOnce.Do(func() {
		e.shareMu.Lock()
		e.lnClosed = true
		if e.sharedFD >= 0 {
			// Once no loop holds the duplicate, none accepts from it: it may close.
			_ = e.eng.UnshareListener(e.sharedFD)
			_ = unix.Close(e.sharedFD)
			e.sharedFD = -1
		}
		e.shareMu.Unlock()
		if backlogHook != nil {
			backlogHook()
		}
		var fds []int
		if e.launched.Load() && !e.donated.Load() {
			fds = acceptBacklog(e.ln)
		}
		_ = e.ln.Close() // at once: the window in which a new connection is reset stays short
		close(e.closing)
		for _, c := range wrapBacklog(fds) {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetKeepAlive(false) // net.FileConn turns it on; the listener has it off
			}
			e.register(c)
		}
	})
}

// backlogHook, when set (by tests), runs when an engine closes its listener, before it takes
// the backlog: on the gnet engine once no event loop accepts from it any more.
var backlogHook func()

// waitEnrolled waits until every connection handed to gnet has been opened by a loop, or gnet
// has stopped (and will open none).
func (e *GnetEngine) waitEnrolled() {
	done := make(chan struct{})
	go func() {
		e.enrolling.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-e.stopped:
	}
}

// Addr implements Transport.
func (e *GnetEngine) Addr() string { return e.set.Address }

// Stats implements Transport.
func (e *GnetEngine) Stats() Stats { return e.counters.stats() }

// Drain implements Transport.
func (e *GnetEngine) Drain(ctx context.Context) error {
	e.draining.Store(true)
	defer func() { releaseGauges(e.release) }()
	if !e.launched.Load() {
		if e.ln != nil { // bound (Listen) and never served
			e.closeListener()
		}
		return nil // not started, or the address was busy: nothing runs
	}
	// Start returned once gnet ran or failed; only a running engine can be stopped.
	select {
	case <-e.stopped:
		return nil // Run failed, or an earlier Drain stopped it
	case <-e.running:
	}
	// Refuse new connections at once, then wait until the connections accepted just before have
	// reached a loop: gnet must not stop with one still on its way (its registration would
	// wait forever, holding the socket). Such a connection's request is on its way: it is
	// served (with Connection: close), or closed after freshDrainGrace if none comes.
	e.closeListener()
	<-e.acceptDone
	e.waitEnrolled()
	e.sweep(time.Now().UnixNano())
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var err error
wait:
	for e.liveCount() > 0 {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-t.C:
			e.sweep(time.Now().UnixNano())
		}
	}
	// WebSocket tunnels left the loops: wait for them too, then cut what is left.
	if err == nil && !e.waitTunnels(ctx.Done(), t.C) {
		err = ctx.Err()
	}
	e.closeTunnels()
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	e.cutClients(stopCtx.Done(), t)
	// gnet's Stop polls for completion every 500 ms; Run returning is the earlier signal.
	go func() { _ = e.eng.Stop(stopCtx) }()
	select {
	case <-e.stopped:
	case <-stopCtx.Done():
		return errors.Join(err, errors.New("sluice: gnet engine did not stop in time"))
	}
	// Stopping closed every connection, which aborts its upstream exchange; wait for the
	// request goroutines to see it, so that nothing of the engine runs once Drain returns.
	t.Reset(time.Millisecond)
	for e.counters.active.Load() > 0 {
		select {
		case <-stopCtx.Done():
			return errors.Join(err, errors.New("sluice: gnet engine: requests still running after stop"))
		case <-t.C:
		}
	}
	return err
}

// cutClients closes the client connections a drain that ran out of time leaves open, and
// waits until each one's OnClose has run (or stop is closed, or gnet stopped). The cut is the
// gateway's decision, so it must reach every exchange as its client leaving (a cancelled
// request) before gnet's stop closes the rest: gnet closes a loop's connections in no set
// order, and an upstream connection of the loop path closed ahead of its client would read as
// the upstream failing mid-stream (an SSE error event and a clean end for the client, an
// upstream error counted against a backend that did nothing wrong).
func (e *GnetEngine) cutClients(stop <-chan struct{}, t *time.Ticker) {
	e.mu.Lock()
	for gc := range e.live {
		_ = gc.c.Close() // queued on its loop, which runs OnClose
	}
	e.mu.Unlock()
	t.Reset(time.Millisecond)
	for e.liveCount() > 0 {
		select {
		case <-stop:
			return
		case <-e.stopped:
			return
		case <-t.C:
		}
	}
}

// waitTunnels waits until no tunnel is open or stop is closed; it reports whether none is.
func (e *GnetEngine) waitTunnels(stop <-chan struct{}, tick <-chan time.Time) bool {
	for {
		e.mu.Lock()
		n := len(e.tunnels)
		e.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-stop:
			return false
		case <-tick:
		}
	}
}

// closeTunnels closes every open tunnel's client connection, which ends the tunnel and its
// upstream connection.
func (e *GnetEngine) closeTunnels() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.tunnels {
		_ = c.Close()
	}
}

func (e *GnetEngine) liveCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.live)
}

// OnBoot records the engine handle. gnet calls it before it starts the event loops.
func (e *GnetEngine) OnBoot(eng gnet.Engine) gnet.Action {
	e.eng = eng
	return gnet.None
}

// OnOpen sets up the connection state, refusing connections over the limit. A connection
// that opens while the engine drains was accepted before the listener closed: it is served
// like the others (the sweep gives it freshDrainGrace to send its request).
func (e *GnetEngine) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if uc, ok := c.Context().(*upConn); ok {
		// An upstream connection enrolled by the loop path: not a client, outside the client
		// limits and the drain.
		e.upOpened(uc, c)
		return nil, gnet.None
	}
	switch c.Context() {
	case accepted:
	case acceptedOnLoop:
		e.loopAccepted.Add(1)
	default:
		return nil, gnet.Close // a connection to gnet's own listener, not one of the entrypoint's
	}
	if e.set.MaxConnections > 0 && e.counters.conns.Load() >= int64(e.set.MaxConnections) {
		e.m.Shed(metrics.ShedMaxConnections)
		e.shed.maxConnections(c.RemoteAddr(), e.set.MaxConnections)
		return nil, gnet.Close
	}
	capSendBuffer(c, e.set.SendBufferBytes)
	gc := newGconn(e, c)
	c.SetContext(gc)
	e.mu.Lock()
	e.live[gc] = struct{}{}
	e.mu.Unlock()
	e.counters.conns.Add(1)
	return nil, gnet.None
}

// OnClose cancels the connection's in-flight upstream exchange at once: this is the gateway's
// fastest signal that a client left (0-1 ms measured on loopback).
func (e *GnetEngine) OnClose(c gnet.Conn, err error) gnet.Action {
	gc, ok := c.Context().(*gconn)
	if !ok {
		if uc, ok := c.Context().(*upConn); ok {
			e.upClosed(uc, err)
		}
		return gnet.None
	}
	if gc.detaching.Load() {
		// Bytes the client sent past the upgrade request: the tunnel sends them on.
		if buf, _ := c.Next(-1); len(buf) > 0 {
			gc.leftover = append(gc.leftover[:0], buf...)
		}
	}
	gc.markClosed()
	gc.loopClosedGuarded()
	if gc.phase == phaseHead || gc.phase == phaseBody {
		// A request was being read: its RequestCtx is the loop's to give back. In the other
		// phases it is with the goroutine that ends the request, or already back.
		gc.releaseCtx()
	}
	e.mu.Lock()
	delete(e.live, gc)
	e.mu.Unlock()
	e.counters.conns.Add(-1)
	return gnet.None
}

// OnTraffic parses requests from the connection's inbound bytes.
func (e *GnetEngine) OnTraffic(c gnet.Conn) gnet.Action {
	gc, ok := c.Context().(*gconn)
	if !ok {
		if uc, ok := c.Context().(*upConn); ok {
			return e.upTraffic(uc)
		}
		return gnet.Close
	}
	defer gc.recoverOnLoop()
	return gc.onTraffic()
}

// OnTick enforces the header-read, idle, linger and drain deadlines. gnet starts its ticker,
// which ticks at once, after the event loops: the first tick says they take connections.
func (e *GnetEngine) OnTick() (time.Duration, gnet.Action) {
	e.runOnce.Do(func() { close(e.running) })
	now := time.Now().UnixNano()
	e.sweep(now)
	if e.set.UpstreamLoop {
		e.sweepLoops(now)
	}
	return tickInterval, gnet.None
}

func (e *GnetEngine) sweep(now int64) {
	headLimit := e.set.ReadHeaderTimeout.Nanoseconds()
	idleLimit := e.set.IdleTimeout.Nanoseconds()
	lingerLimit, lingerIdle := e.set.linger.total.Nanoseconds(), e.set.linger.idle.Nanoseconds()
	stallLimit := e.set.ClientStallTimeout.Nanoseconds()
	draining := e.draining.Load()
	e.mu.Lock()
	defer e.mu.Unlock()
	for gc := range e.live {
		// A lingering connection is neither idle nor serving: it ends by its own bounds, also
		// while draining (a drain waits for it as for a response still being written).
		if ls := gc.lingerSince.Load(); ls != 0 {
			switch {
			case now-ls > lingerLimit || now-gc.lingerLast.Load() > lingerIdle:
				_ = gc.c.Close()
			case !gc.wrShut.Load():
				// Its response was still in the loop's buffer: look again (gnet has no
				// writable callback).
				_ = gc.c.Wake(nil)
			}
			continue
		}
		if gc.stallDue(now, stallLimit) {
			_ = gc.c.Wake(checkStall)
		}
		if gc.busy.Load() {
			if d := gc.upDeadline.Load(); d != 0 && now > d {
				_ = gc.c.Wake(nil) // a loop-driven upstream is past its timeout
			}
			continue
		}
		if hs := gc.headSince.Load(); hs != 0 {
			// A drain spares a connection that has sent nothing yet for a moment: accepted
			// just before the listener closed, its request is on the way (net/http and
			// fasthttp wait 5 s before they count a new connection as idle). Its head clock
			// started when it opened.
			if draining && gc.fresh.Load() && now-hs > freshDrainGrace.Nanoseconds() {
				// Its loop looks for a request it has not read yet before it closes the
				// connection (closeIfSilent).
				_ = gc.c.Wake(closeIfSilent)
				continue
			}
			// The loop answers 408 (it owns the parser state); a connection still waiting
			// at the next tick is closed without it.
			if now-hs > headLimit {
				if gc.headExpired.Swap(true) {
					_ = gc.c.Close()
				} else {
					_ = gc.c.Wake(nil)
				}
			}
			continue
		}
		// Idle between requests: idle_timeout governs until the next request's first byte.
		if draining {
			if gc.fresh.Load() && now-gc.idleSince.Load() <= freshDrainGrace.Nanoseconds() {
				continue // its client was promised keep-alive and may be sending (finishServe)
			}
			// Its client may have sent its next request just before the drain, or just
			// before this sweep: the loop looks for it before it closes the connection
			// (closeIfIdle).
			_ = gc.c.Wake(closeIfIdle)
			continue
		}
		if now-gc.idleSince.Load() > idleLimit {
			_ = gc.c.Close()
		}
	}
}

// closeIfIdle runs on the loop for a drain: it closes an idle connection unless its socket
// holds bytes the loop has not read yet, a request that came before the close would: closing
// would lose it (a POST is not sent again). The loop serves that request, with Connection:
// close. Looking on the loop, after it handled the readiness it last fetched, leaves only the
// moment until the close runs, in the same turn of the loop, for a request to arrive unseen;
// one that arrives then, or is still on the wire, is lost, as on every server that closes an
// idle connection.
func closeIfIdle(c gnet.Conn, _ error) error {
	gc, ok := c.Context().(*gconn)
	if !ok || gc.busy.Load() || gc.headSince.Load() != 0 || unreadInput(gc.fd) {
		return nil
	}
	return c.Close()
}

// closeIfSilent runs on the loop for a drain: it closes a connection that has sent nothing
// since it opened, unless its socket holds bytes the loop has not read yet, its first request
// (closeIfIdle says why).
func closeIfSilent(c gnet.Conn, _ error) error {
	gc, ok := c.Context().(*gconn)
	if !ok || gc.busy.Load() || !gc.fresh.Load() || unreadInput(gc.fd) {
		return nil
	}
	return c.Close()
}

// gnetLogger routes gnet's own log lines to the gateway's logger, dropping its info chatter.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(string, ...any) {}
func (g gnetLogger) Infof(string, ...any)  {}
func (g gnetLogger) Warnf(f string, a ...any) {
	g.l.Warn(fmt.Sprintf(f, a...), "component", "gnet")
}
func (g gnetLogger) Errorf(f string, a ...any) {
	g.l.Error(fmt.Sprintf(f, a...), "component", "gnet")
}
func (g gnetLogger) Fatalf(f string, a ...any) {
	g.l.Error(fmt.Sprintf(f, a...), "component", "gnet")
}
