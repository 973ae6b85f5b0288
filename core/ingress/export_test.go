package ingress

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// WithLinger returns set with the bounds of its lingering closes replaced, so that tests can
// watch a bound end one quickly; a zero bound keeps its default.
func WithLinger(set Settings, total, idle time.Duration, maxBytes int64) Settings {
	set.linger = lingerLimits{total: total, idle: idle, bytes: maxBytes}
	return set
}

// LoopServed returns how many requests the event loops of a gnet engine served on the loop
// path (upstream_io = "loop").
func LoopServed(tr Transport) int64 {
	e := tr.(*GnetEngine)
	var n int64
	e.loops.Range(func(_, v any) bool {
		ls := v.(*loopState)
		ch := make(chan int64, 1)
		if ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			ch <- ls.served
			return nil
		})) == nil {
			n += <-ch
		}
		return true
	})
	return n
}

// ConnBuffered returns, for each open client connection of a gnet engine, the response bytes
// the gateway holds for it: the loop's outbound buffer, the bytes a worker queued for it, and
// what its upstream connection on the loop holds unread.
func ConnBuffered(tr Transport) []int64 {
	e := tr.(*GnetEngine)
	e.mu.Lock()
	conns := make([]*gconn, 0, len(e.live))
	for gc := range e.live {
		conns = append(conns, gc)
	}
	e.mu.Unlock()
	var out []int64
	for _, gc := range conns {
		ch := make(chan int64, 1)
		err := gc.c.Wake(func(c gnet.Conn, _ error) error {
			n := int64(c.OutboundBuffered()) + gc.queued.Load()
			if uc := gc.lxUp; uc != nil && uc.alive() {
				n += int64(uc.c.InboundBuffered())
			}
			ch <- n
			return nil
		})
		if err == nil {
			out = append(out, <-ch)
		}
	}
	return out
}

// LoopBufferBound is what a connection's exchange may hold in the gateway on either path.
const LoopBufferBound = sendHighWaterBytes + 2*64<<10

// SetDialedHook makes f run in every dial of the loop path once the upstream connection is
// established and before the socket is enrolled on the loop, with the dial's context, until
// the returned restore is called. Set it before starting an engine.
func SetDialedHook(f func(ctx context.Context)) (restore func()) {
	dialedHook = f
	return func() { dialedHook = nil }
}

// LoopIdle returns how many idle upstream connections the event loops of a gnet engine hold.
func LoopIdle(tr Transport) int {
	e := tr.(*GnetEngine)
	n := 0
	e.loops.Range(func(_, v any) bool {
		ls := v.(*loopState)
		ch := make(chan int, 1)
		if ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			k := 0
			for _, l := range ls.idle {
				k += len(l)
			}
			ch <- k
			return nil
		})) == nil {
			n += <-ch
		}
		return true
	})
	return n
}

// SpareConns is how many idle connections per backend a loop keeps ready for concurrent
// requests.
const SpareConns = spareConns

// SetAcceptHook makes f run in the gnet engine's accept goroutine before each Accept, until
// restore is called.
func SetAcceptHook(f func()) (restore func()) {
	acceptHook = f
	return func() { acceptHook = nil }
}

// LoopAccepted returns how many connections the engine's event loops accepted themselves.
func LoopAccepted(tr Transport) int64 { return tr.(*GnetEngine).loopAccepted.Load() }

// SetBacklogHook sets the hook closeListener runs once no event loop accepts any more, before
// it takes the listener's backlog; restore unsets it.
func SetBacklogHook(f func()) (restore func()) {
	backlogHook = f
	return func() { backlogHook = nil }
}

// SetAcceptGate sets the gate the fasthttp engine's listener passes before each accept;
// restore unsets it.
func SetAcceptGate(f func()) (restore func()) {
	acceptGate = f
	return func() { acceptGate = nil }
}

// HoldLoop blocks the event loop of a gnet engine's one open client connection until release
// is called, so that the bytes its client sends meanwhile stay unread in its socket.
func HoldLoop(tr Transport) (release func()) {
	e := tr.(*GnetEngine)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	e.mu.Lock()
	var gc *gconn
	for c := range e.live {
		gc = c
	}
	e.mu.Unlock()
	if gc == nil {
		return release
	}
	started := make(chan struct{})
	if gc.c.Wake(func(gnet.Conn, error) error {
		close(started)
		<-gate
		return nil
	}) == nil {
		<-started
	}
	return release
}

// HoldRead makes fasthttp's goroutine of a fasthttp engine's connection wait before it reads,
// until release is called, so that the bytes its client sends meanwhile stay unread in its
// socket: before the connection's first request (first), or as it waits for the next one
// after a response. waiting is closed once it waits. Call it before the connection's first
// request.
func HoldRead(first bool) (waiting <-chan struct{}, release func()) {
	held, gate := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	hold := func(isFirst bool) {
		if isFirst != first {
			return
		}
		heldOnce.Do(func() { close(held) })
		<-gate
	}
	waitReadHook.Store(&hold)
	release = func() {
		releaseOnce.Do(func() {
			waitReadHook.Store(nil)
			close(gate)
		})
	}
	return held, release
}

// AwaitUnreadInput waits up to d for the socket of an engine's one open client connection to
// hold bytes the engine has not read (a poll for input; nothing is read).
func AwaitUnreadInput(tr Transport, d time.Duration) bool {
	in := false
	withClientFd(tr, func(fd int) {
		deadline := time.Now().Add(d)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond))
			switch {
			case err == unix.EINTR && time.Now().Before(deadline):
				continue
			case err != nil || n == 0:
				return
			}
			in = unreadInput(fd)
			return
		}
	})
	return in
}

// withClientFd runs f with the socket descriptor of an engine's one open client connection;
// not when there is none.
func withClientFd(tr Transport, f func(fd int)) {
	switch e := tr.(type) {
	case *GnetEngine:
		fd := -1
		e.mu.Lock()
		for gc := range e.live {
			fd = gc.fd
		}
		e.mu.Unlock()
		if fd >= 0 {
			f(fd)
		}
	case *FastEngine:
		sl := e.ln.(*serveListener)
		var sc *servedConn
		sl.mu.Lock()
		for c := range sl.conns {
			sc = c
		}
		sl.mu.Unlock()
		if sc == nil {
			return
		}
		if tc := unwrapTCP(sc.Conn); tc != nil {
			if rc, err := tc.SyscallConn(); err == nil {
				_ = rc.Control(func(fd uintptr) { f(int(fd)) })
			}
		}
	}
}

// SweepDraining runs once the sweep a drain begins with, after its listener closed, without
// the rest of Drain.
func SweepDraining(tr Transport) { SweepDrainingAt(tr, 0) }

// SweepDrainingAt runs once the sweep of a drain, after its listener closed, as it would run
// later than now (past freshDrainGrace, say), without the rest of Drain.
func SweepDrainingAt(tr Transport, later time.Duration) {
	now := time.Now().Add(later).UnixNano()
	switch e := tr.(type) {
	case *GnetEngine:
		e.draining.Store(true)
		e.sweep(now)
	case *FastEngine:
		e.draining.Store(true)
		e.ln.(*serveListener).closeIdle(now)
	}
}

// FreshDrainGrace is how long a drain spares a connection whose client may be sending a
// request it had every reason to send.
const FreshDrainGrace = freshDrainGrace

// SetTunnelClientHook makes f wrap the client connection of every WebSocket tunnel, on both
// engines, until restore is called. Set it before starting an engine.
func SetTunnelClientHook(f func(net.Conn) net.Conn) (restore func()) {
	tunnelClientHook.Store(&f)
	return func() { tunnelClientHook.Store(nil) }
}

// NewConnDrainGrace is how long a drain of the fasthttp engine spares a connection that has
// sent nothing yet.
const NewConnDrainGrace = newConnDrainGrace
