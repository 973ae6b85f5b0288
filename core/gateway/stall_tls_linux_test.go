package gateway_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Over TLS too, a client cut for stalling is reset at once, while it still reads nothing: the
// gateway does not first try to send TLS's close_notify alert to a client that takes nothing,
// which would hold the connection (and the response bytes queued for it) for that alert's own
// 5 s write deadline.
func TestStalledClientIsResetAtOnceOverTLS(t *testing.T) {
	var written atomic.Int64
	full := make(chan struct{}, 1)
	up := bigUpstream(t, &written, full)
	cert, key, roots := selfSigned(t, t.TempDir())
	_, addr := startGateway(t, "fasthttp", up.addr(),
		fmt.Sprintf("client_stall_timeout = \"500ms\"\nsend_buffer_bytes = 65536\ntls = { cert_file = %q, key_file = %q }", cert, key))
	before := shedCount(t, "client_stall")
	// The receive buffer shrinks after the connect: the gateway saw a full window at first and
	// filled its own send buffer, which is then what a close_notify alert would wait behind.
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	require.NoError(t, raw.(*net.TCPConn).SetReadBuffer(4096))
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	require.NoError(t, c.Handshake())
	send(t, c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\n")
	_, err = c.Read(make([]byte, 300)) // the head; then nothing more
	require.NoError(t, err)
	waitShed(t, "client_stall", before+1)
	hup := waitHangUp(t, raw, 3*time.Second)
	require.True(t, hup, "the connection is reset while its client reads nothing")
	up.waitConnClosed(t, 10*time.Second)
}

// waitHangUp waits up to d for c's socket to be hung up (the peer's reset or close), without
// reading what it holds: a poll for no event reports only a hang-up or an error.
func waitHangUp(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var revents int16
	require.NoError(t, rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd)}}
		if n, err := unix.Poll(fds, int(d/time.Millisecond)); err == nil && n == 1 {
			revents = fds[0].Revents
		}
	}))
	return revents&(unix.POLLHUP|unix.POLLERR) != 0
}
