package ingress_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The event loops accept connections with accept4 on the entrypoint's listener, and Go's
// TCP_NODELAY (set on each connection net.Listener.Accept returns) is then set once on the
// listener instead: the kernel copies it to every connection it accepts. Without it each
// small response would wait for the client's delayed ACK (Nagle, RFC 896).
func TestAcceptedSocketInheritsNoDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) {
		require.NoError(t, unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1))
	}))
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	var got int
	require.NoError(t, rc.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		_, err := unix.Poll(pfd, 5000) // the connection is queued once the client's ACK is in
		require.NoError(t, err)
		nfd, _, err := unix.Accept4(int(fd), unix.SOCK_CLOEXEC)
		require.NoError(t, err)
		defer unix.Close(nfd)
		got, err = unix.GetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
		require.NoError(t, err)
	}))
	require.Equal(t, 1, got, "TCP_NODELAY of the accepted socket")
}
