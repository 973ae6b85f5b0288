package ingress

import (
	"bytes"
	"testing"

	gio "github.com/panjf2000/gnet/v2/pkg/io"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The event loops read and write sockets with raw system calls (the patched gnet in
// internal/gnet): these tests hold them to unix.Read's and unix.Write's shapes on a real
// non-blocking socket pair, including the errors the loops branch on.
func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fds[0]); _ = unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func TestRawReadWriteShapes(t *testing.T) {
	a, b := socketPair(t)
	buf := make([]byte, 64)

	n, err := gio.Read(b, buf)
	require.Equal(t, -1, n, "nothing to read: n is -1, as unix.Read's")
	require.Equal(t, unix.EAGAIN, err)

	n, err = gio.Write(a, []byte("hello"))
	require.NoError(t, err)
	require.Equal(t, 5, n)
	n, err = gio.Read(b, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n]))

	n, err = gio.Write(a, nil)
	require.NoError(t, err)
	require.Zero(t, n)

	require.NoError(t, unix.Close(a))
	n, err = gio.Read(b, buf)
	require.NoError(t, err, "the peer's close reads as 0 bytes, no error")
	require.Zero(t, n)

	n, err = gio.Write(-1, []byte("x"))
	require.Equal(t, -1, n)
	require.Equal(t, unix.EBADF, err)
}

func TestRawWriteFullSocketWouldBlock(t *testing.T) {
	a, _ := socketPair(t)
	chunk := make([]byte, 64<<10)
	var err error
	for i := 0; i < 1<<12 && err == nil; i++ { // a socket buffer is far below 256 MiB
		_, err = gio.Write(a, chunk)
	}
	require.Equal(t, unix.EAGAIN, err)
	_, err = gio.RawWritev(a, [][]byte{chunk, chunk})
	require.Equal(t, unix.EAGAIN, err)
}

// TestRawWritevCapsItsVectors: empty buffers are skipped and at most 64 non-empty ones go in
// one call; the rest is a short write, which the loops already finish later.
func TestRawWritevCapsItsVectors(t *testing.T) {
	a, b := socketPair(t)
	n, err := gio.RawWritev(a, nil)
	require.NoError(t, err)
	require.Zero(t, n)

	var iov [][]byte
	var want bytes.Buffer
	for i := 0; i < 100; i++ {
		iov = append(iov, nil, []byte{byte('a' + i%26), byte('A' + i%26)})
		if i < 64 {
			want.Write(iov[len(iov)-1])
		}
	}
	n, err = gio.RawWritev(a, iov)
	require.NoError(t, err)
	require.Equal(t, 128, n, "64 two-byte buffers")
	got := make([]byte, 1024)
	m, err := gio.Read(b, got)
	require.NoError(t, err)
	require.Equal(t, want.String(), string(got[:m]))
}

// TestRawWriteToAGonePeer: a socket is written with sendto and MSG_NOSIGNAL, so a peer that
// left is the EPIPE the loops branch on, with no SIGPIPE raised for it.
func TestRawWriteToAGonePeer(t *testing.T) {
	a, b := socketPair(t)
	require.NoError(t, unix.Close(b))
	n, err := gio.Write(a, []byte("more"))
	require.Equal(t, -1, n)
	require.Equal(t, unix.EPIPE, err)
}

// TestRawIOFallsBackOnNonSockets: a descriptor that is not a socket (a pipe here) is read and
// written with read(2) and write(2), where recvfrom and sendto fail with ENOTSOCK.
func TestRawIOFallsBackOnNonSockets(t *testing.T) {
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC))
	t.Cleanup(func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) })

	n, err := gio.Write(p[1], []byte("piped"))
	require.NoError(t, err)
	require.Equal(t, 5, n)
	buf := make([]byte, 16)
	n, err = gio.Read(p[0], buf)
	require.NoError(t, err)
	require.Equal(t, "piped", string(buf[:n]))
	n, err = gio.Read(p[0], buf)
	require.Equal(t, -1, n)
	require.Equal(t, unix.EAGAIN, err)
}

// The loops check an idle upstream connection with a raw MSG_PEEK before reuse: nothing
// pending is EAGAIN, pending bytes are seen and left in place, a peer's close reads as 0.
func TestRawPeekShapes(t *testing.T) {
	a, b := socketPair(t)
	buf := make([]byte, 8)

	n, err := gio.Peek(b, buf)
	require.Equal(t, -1, n)
	require.Equal(t, unix.EAGAIN, err)
	require.False(t, peekClosed(b), "an idle connection with nothing pending is reusable")

	_, err = gio.Write(a, []byte("xy"))
	require.NoError(t, err)
	n, err = gio.Peek(b, buf[:1])
	require.NoError(t, err)
	require.Equal(t, "x", string(buf[:n]))
	require.True(t, peekClosed(b), "bytes the upstream sent unasked make it unusable")
	n, err = gio.Read(b, buf)
	require.NoError(t, err)
	require.Equal(t, "xy", string(buf[:n]), "the peek took nothing from the queue")

	require.NoError(t, unix.Close(a))
	n, err = gio.Peek(b, buf)
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, peekClosed(b), "a peer's close makes it unusable")
}
