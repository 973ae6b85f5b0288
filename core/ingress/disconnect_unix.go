//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package ingress

import (
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/pipeline"
)

// disconnectWatch cancels a request as soon as the client's socket reports EOF,
// including while the gateway waits for the first token. It peeks at the socket (MSG_PEEK) from
// Go's netpoller, which measured 0 ms to notice a close here, where fasthttp only
// notices on a failed write. recv(2) with MSG_PEEK|MSG_DONTWAIT behaves alike on Linux and the
// BSDs (macOS included): 0 bytes means the peer closed, EAGAIN that nothing is there yet.
type disconnectWatch struct {
	conn   net.Conn // the TCP connection whose deadline wakes the watcher on stop
	done   chan struct{}
	cancel pipeline.CancelHandle
	holder watchHolder // the connection that can cut this exchange on a forced drain, or nil
	mu     sync.Mutex
	isGone bool
}

// watchDisconnect starts watching c (a TCP connection, possibly wrapped in TLS or counting
// wrappers) and cancels the request of h when the client closes it. It returns a watch that only honours a
// forced drain (cut) when the socket cannot be reached.
func watchDisconnect(c net.Conn, h pipeline.CancelHandle) *disconnectWatch {
	w := &disconnectWatch{done: make(chan struct{}), cancel: h}
	if ho := holderOf(c); ho != nil {
		w.holder = ho
		if !ho.hold(w) {
			w.cut() // the drain already closed the connection: nothing to watch
			close(w.done)
			return w
		}
	}
	tcp := unwrapTCP(c)
	if tcp == nil {
		close(w.done)
		return w
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		close(w.done)
		return w
	}
	w.conn = tcp
	// The server's read deadline bounded reading the request; left in place, it would end the
	// watch (a timeout, not a departure) while the upstream is still working. Only stop sets
	// one from here on; fasthttp sets its own again before it reads the next request.
	_ = tcp.SetReadDeadline(time.Time{})
	go w.run(rc)
	return w
}

func unwrapTCP(c net.Conn) *net.TCPConn {
	for i := 0; i < maxWraps && c != nil; i++ {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

func (w *disconnectWatch) run(rc syscall.RawConn) {
	defer close(w.done)
	var b [1]byte
	eof := false
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return false // not readable yet: park in the netpoller
		case err != nil || n == 0:
			eof = true // reset or orderly close
			return true
		}
		// n > 0: the client sent more bytes (a pipelined request, or TLS records: a TLS client
		// that leaves sends close_notify before its FIN). The bytes hide a FIN behind them from
		// the peek, but not from the connection's TCP state; and the netpoller is edge
		// triggered, so a FIN arriving later wakes this watch again.
		switch peerState(int(fd)) {
		case peerGone:
			eof = true
			return true
		case peerOpen:
			return false
		}
		return true // the state cannot be read here: stop watching

	})
	if eof {
		w.cut()
	}
}

// cut marks the client gone and cancels the request: on EOF, or when a drain ran out of time
// and closed the connection (the exchange then ends as if the client had left).
func (w *disconnectWatch) cut() {
	w.mu.Lock()
	w.isGone = true
	w.mu.Unlock()
	w.cancel.Cancel()
}

// stop ends the watch and waits for its goroutine, so fasthttp can read the connection again.
func (w *disconnectWatch) stop() {
	if w.holder != nil {
		w.holder.release(w)
	}
	if w.conn != nil {
		select {
		case <-w.done:
		default:
			// A past read deadline wakes the parked peek with a timeout.
			_ = w.conn.SetReadDeadline(time.Unix(1, 0))
			<-w.done
			_ = w.conn.SetReadDeadline(time.Time{})
		}
	}
}
