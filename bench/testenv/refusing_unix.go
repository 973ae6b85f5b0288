//go:build unix

package testenv

import (
	"net"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// RefusingAddr returns a loopback TCP address, "127.0.0.1:PORT", that refuses connections
// for as long as tb runs: a socket bound to the port, that never listens, holds it. A connect
// there is answered with a reset (ECONNREFUSED), and no other socket can take the port
// meanwhile: not a listener of another test or of the machine (which a fixed port such as 1
// or 9 may have), nor one given the port after the test listened and closed it. The socket
// has no SO_REUSEADDR, so that a listener that sets it (as Go's do) cannot bind beside it.
func RefusingAddr(tb testing.TB) string {
	tb.Helper()
	// Not SOCK_CLOEXEC, which Darwin lacks: a child started meanwhile may inherit the socket,
	// which then holds the port a little longer, refusing all the same.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("testenv: refusing address: socket: %v", err)
	}
	unix.CloseOnExec(fd)
	tb.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("testenv: refusing address: bind: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		tb.Fatalf("testenv: refusing address: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
}
