package ingress

import (
	"net"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// tunnel runs an upgraded request's WebSocket tunnel off the event loop. gnet has no way to
// stop reading a socket, so bytes a client sends faster than the upstream takes them would
// pile up in the loop's inbound buffer; a blocking net.Conn gives backpressure for free. So
// the socket is duplicated, gnet closes its own descriptor (OnClose sees the hand-over and
// keeps the request), and the tunnel runs on the duplicate under Go's poller, like the
// fasthttp engine's hijacked connections. The 101 goes out only after the hand-over, so a
// client (which waits for it before sending frames, RFC 6455 §4.1) sends nothing the loop
// could read in between; whatever the loop had read already is passed on.
func (gc *gconn) tunnel() {
	rc := gc.rc
	gc.flush() // responses before this one leave first
	gc.detaching.Store(true)
	gc.writeMu.Lock()
	fd := -1
	var err error
	if !gc.fdClosed {
		fd, err = unix.FcntlInt(uintptr(gc.fd), unix.F_DUPFD_CLOEXEC, 0)
	}
	gc.writeMu.Unlock()
	_ = gc.c.Close()
	<-gc.closedChan()
	if fd < 0 || err != nil {
		rc.Cancel()
		return
	}
	f := os.NewFile(uintptr(fd), "websocket")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		rc.Cancel()
		return
	}
	e := gc.e
	e.mu.Lock()
	e.tunnels[nc] = struct{}{}
	e.mu.Unlock()
	e.counters.conns.Add(1)
	// The tunnel answers the client from here, on the duplicate: after a panic, guarded has
	// nothing to write on gnet's connection, which is closed.
	gc.answering = true
	// Deferred: a panic in the tunnel (a bug in anything it runs) is recovered further up
	// (guarded), and the tunnel must end all the same, or Drain would wait for it until its
	// deadline and the engine would count the connection for good.
	defer gc.endTunnel(nc)
	_ = rc.Tunnel(tunnelClient(nc), gc.leftover)
}

// endTunnel ends the tunnel on nc: it closes nc (Tunnel closed it already, on any way out; the
// engine's count does not rest on that) and the engine forgets the tunnel.
func (gc *gconn) endTunnel(nc net.Conn) {
	_ = nc.Close()
	e := gc.e
	e.mu.Lock()
	delete(e.tunnels, nc)
	e.mu.Unlock()
	e.counters.conns.Add(-1)
	gc.leftover = nil
}

// tunnelClientHook, when set (by tests), wraps the client connection each WebSocket tunnel
// relays through, on both engines. Atomic: a tunnel still running when a test restores it
// reads it on its own goroutine.
var tunnelClientHook atomic.Pointer[func(net.Conn) net.Conn]

// tunnelClient is c as a tunnel gets it: wrapped by tunnelClientHook when that is set.
func tunnelClient(c net.Conn) net.Conn {
	if f := tunnelClientHook.Load(); f != nil {
		return (*f)(c)
	}
	return c
}
