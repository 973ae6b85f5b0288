package pool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// A connect to a listening loopback upstream finishes within connect(2): connectDirect returns
// an established connection that carries bytes, with the dialer's socket options.
func TestConnectDirectLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	nc, ok, err := connectDirect(context.Background(), netip.MustParseAddrPort(ln.Addr().String()))
	require.True(t, ok)
	require.NoError(t, err)
	defer nc.Close()
	require.Equal(t, ln.Addr().String(), nc.RemoteAddr().String())

	rc, err := nc.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) {
		nodelay, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY)
		require.NoError(t, err)
		require.Equal(t, 1, nodelay, "TCP_NODELAY")
		ka, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		require.NoError(t, err)
		require.Equal(t, 1, ka, "SO_KEEPALIVE")
		idle, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		require.NoError(t, err)
		require.Equal(t, int(keepAliveIdle/time.Second), idle, "TCP_KEEPIDLE")
	}))

	var up net.Conn
	select {
	case up = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the listener accepted nothing")
	}
	defer up.Close()
	_, err = nc.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	require.NoError(t, up.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = up.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))
}

// A refused connect fails with the dialer's error shape: a *net.OpError holding the errno.
func TestConnectDirectRefused(t *testing.T) {
	addr := testenv.RefusingAddr(t) // no listener can be given its port meanwhile
	_, ok, err := connectDirect(context.Background(), netip.MustParseAddrPort(addr))
	require.True(t, ok)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "dial tcp "+addr+": connect: connection refused", err.Error())
}

// fullListener returns the address of a loopback listener whose accept queue is full, so
// that a further connect stays in progress (the listener drops its SYN), and a function that
// accepts the queued connection, after which the pending one completes at the client's next
// SYN retransmission.
func fullListener(t *testing.T) (netip.AddrPort, func()) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fd) })
	require.NoError(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, unix.Listen(fd, 0)) // room for one connection in the accept queue
	sa, err := unix.Getsockname(fd)
	require.NoError(t, err)
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
	first, err := net.Dial("tcp", ap.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close() })
	return ap, func() {
		nfd, _, err := unix.Accept(fd)
		require.NoError(t, err)
		t.Cleanup(func() { _ = unix.Close(nfd) })
	}
}

// A connect still in progress waits within its context: the deadline ends it with the
// dialer's timeout error, a cancel ends it with the context's error, and one that completes
// later returns an established connection.
func TestConnectDirectPending(t *testing.T) {
	ap, acceptOne := fullListener(t)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, ok, err := connectDirect(ctx, ap)
	require.True(t, ok)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a timeout error: %v", err)

	ctx, cancel = context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, _, err := connectDirect(ctx, ap)
		res <- err
	}()
	cancel()
	select {
	case err := <-res:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled connect went on waiting")
	}

	// Pending, then established once the listener's queue has room.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		nc  net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, _, err := connectDirect(ctx, ap)
		done <- result{nc, err}
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, synSent(c, ap.Port())) }, 5*time.Second, time.Millisecond,
		"the connect is in progress")
	acceptOne()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.NoError(t, r.nc.Close())
	case <-time.After(10 * time.Second):
		t.Fatal("a connect that the listener took later did not complete")
	}
}

// synSent reports whether a socket of this host is in SYN-SENT to loopback port (a connect in
// progress), from /proc/net/tcp. t may be an assert.CollectT, for a check that is retried.
func synSent(t require.TestingT, port uint16) bool {
	b, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	want := fmt.Sprintf("0100007F:%04X 02", port) // remote address, then the state (02: SYN_SENT)
	return strings.Contains(string(b), want)
}

// Only an IP literal with a port is connected to directly; a name is resolved by the dialer.
func TestLiteralAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8000": true, "[::1]:8000": true, "[::ffff:127.0.0.1]:80": true,
		"localhost:8000": false, "[fe80::1%eth0]:80": false, "127.0.0.1:0": false, "127.0.0.1": false,
	} {
		ap, ok := literalAddr(addr)
		require.Equal(t, want, ok, addr)
		if addr == "[::ffff:127.0.0.1]:80" {
			require.True(t, ap.Addr().Is4(), "a v4-mapped address is connected to over IPv4")
		}
	}
}
