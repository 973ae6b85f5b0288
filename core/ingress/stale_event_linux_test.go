//go:build linux

package ingress_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// staleHandler drives one batch of a single gnet loop: a connection ("pause") holds the loop
// while the test makes two others ready, in order: "writer" (data) and "reset" (its client
// reset); a fourth ("marker") becomes ready after them. The writer's handler writes to the reset connection, which fails and closes it, so
// its event, already fetched later in the batch, is stale. The handler then puts a connect in
// progress on the very descriptor the reset connection held ("probe").
type staleHandler struct {
	gnet.BuiltinEventEngine
	eng    gnet.Engine
	once   sync.Once
	booted chan gnet.Engine

	conns   map[string]gnet.Conn // by context name; the loop's goroutine only
	opened  chan string          // context names, as OnOpen sees them
	paused  chan struct{}        // the pause connection's first event is being handled
	release chan struct{}        // ends that event
	after   chan struct{}        // the marker connection's event, ready after the others: the batch is over

	probeAddr   string // a listener whose full accept queue keeps connects in progress
	probeSA     *unix.SockaddrInet4
	mu          sync.Mutex // guards the fields below, read by the test
	probeFD     int
	probeOpened bool
	probeErr    error
}

func (h *staleHandler) OnBoot(e gnet.Engine) gnet.Action {
	h.eng = e
	return gnet.None
}

func (h *staleHandler) OnTick() (time.Duration, gnet.Action) {
	h.once.Do(func() { h.booted <- h.eng })
	return time.Hour, gnet.None
}

func (h *staleHandler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	name, _ := c.Context().(string)
	if name == "probe" {
		h.mu.Lock()
		h.probeOpened = true
		h.mu.Unlock()
	}
	h.conns[name] = c
	h.opened <- name
	return nil, gnet.None
}

func (h *staleHandler) OnTraffic(c gnet.Conn) gnet.Action {
	_, _ = c.Next(-1)
	switch c.Context() {
	case "pause":
		close(h.paused)
		<-h.release
	case "marker":
		close(h.after)
	case "writer":
		reset := h.conns["reset"]
		fd := reset.Fd()
		_, _ = reset.Write([]byte("x")) // the peer reset: the write fails and closes it
		h.connectOn(c, fd)
	}
	return gnet.None
}

// connectOn starts a connect to probeAddr on descriptor fd and registers it with c's loop.
func (h *staleHandler) connectOn(c gnet.Conn, fd int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		h.probeErr = err
		return
	}
	if err = unix.Connect(s, h.probeSA); err != nil && err != unix.EINPROGRESS {
		_ = unix.Close(s)
		h.probeErr = err
		return
	}
	// The descriptor is free again (the failed write closed it); put the connect there.
	if err = unix.Dup3(s, fd, unix.O_CLOEXEC); err != nil {
		_ = unix.Close(s)
		h.probeErr = err
		return
	}
	_ = unix.Close(s)
	remote, _ := net.ResolveTCPAddr("tcp", h.probeAddr)
	h.probeFD = fd
	_, h.probeErr = c.EventLoop().(gnet.Connector).Connecting(fd, remote, "probe")
}

// TestEventOfAConnectionClosedInTheBatchIsDropped: an event that a loop fetched for a
// connection a handler of the same batch closed never reaches what the descriptor holds
// next. Here the reset client's error event would have ended, as a success, a connect still
// in progress on the reused descriptor.
func TestEventOfAConnectionClosedInTheBatchIsDropped(t *testing.T) {
	h := &staleHandler{
		booted:    make(chan gnet.Engine, 1),
		conns:     map[string]gnet.Conn{},
		opened:    make(chan string, 8),
		paused:    make(chan struct{}),
		release:   make(chan struct{}),
		after:     make(chan struct{}),
		probeAddr: fullBacklog(t),
		probeFD:   -1,
	}
	ap := netipAddrPort(t, h.probeAddr)
	h.probeSA = &unix.SockaddrInet4{Addr: [4]byte{byte(ap[0]), byte(ap[1]), byte(ap[2]), byte(ap[3])}, Port: ap[4]<<8 | ap[5]}
	done := make(chan error, 1)
	go func() {
		done <- gnet.Run(h, "tcp://127.0.0.1:0", gnet.WithNumEventLoop(1), gnet.WithTicker(true))
	}()
	var eng gnet.Engine
	select {
	case eng = <-h.booted:
	case err := <-done:
		t.Fatalf("gnet stopped at start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gnet did not boot")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Stop(ctx)
		<-done
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	clients := map[string]*net.TCPConn{}
	for _, name := range []string{"pause", "writer", "reset", "marker"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		clients[name] = c.(*net.TCPConn)
		s, err := ln.Accept()
		require.NoError(t, err)
		defer s.Close()
		res, err := eng.Register(gnet.NewNetConnContext(gnet.NewContext(context.Background(), name), s))
		require.NoError(t, err)
		select {
		case r := <-res:
			require.NoError(t, r.Err)
		case <-time.After(10 * time.Second):
			t.Fatal("registration did not finish")
		}
		require.Equal(t, name, waitFor(t, h.opened, "OnOpen of "+name))
	}

	_, err = clients["pause"].Write([]byte("p"))
	require.NoError(t, err)
	waitFor(t, h.paused, "the pause connection's event")
	// Loopback delivers within these calls, so both events are ready, in this order, before
	// the loop fetches its next batch.
	_, err = clients["writer"].Write([]byte("w"))
	require.NoError(t, err)
	require.NoError(t, clients["reset"].SetLinger(0))
	require.NoError(t, clients["reset"].Close())
	close(h.release)

	_, err = clients["marker"].Write([]byte("m"))
	require.NoError(t, err)
	waitFor(t, h.after, "the marker connection's event")

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NoError(t, h.probeErr)
	require.GreaterOrEqual(t, h.probeFD, 0, "the writer's handler ran")
	require.Equal(t, 1, connectsInProgress(t, h.probeAddr), "the probe's connect is still in progress")
	require.False(t, h.probeOpened, "the reset connection's error event opened the connect in progress on its descriptor")
}

// waitFor receives from ch within 10 s.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}
