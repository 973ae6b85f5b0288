//go:build linux

// The clients here are raw sockets opened with Linux's socket flags, to hold thousands of
// connections without a Go net.Conn each (whose memory would count against the gateway's).

package ingress_test

import (
	"bytes"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/ingress"
)

// idleConnBudget bounds the Go heap the gnet engine holds per idle keep-alive connection
// that has served one request: 10,000 of them within 64 MiB of RSS leaves the GC its
// headroom over the live heap (GOGC=100 lets the heap reach twice the live one) and the
// runtime and gnet their share.
const idleConnBudget = 2048

// idleConns is how many idle connections the measurement holds: enough that per-connection
// cost dominates, few enough for a fast test under the race detector.
const idleConns = 500

// idleWarm is how many connections serve a request before the measurement starts.
const idleWarm = 50

// The Go heap held per idle keep-alive connection, on both gnet paths. The clients are raw
// sockets (no Go heap of their own), so the heap delta is the gateway's.
func TestIdleConnectionHeap(t *testing.T) {
	for _, ce := range contractEngines[:2] {
		t.Run(ce.name, func(t *testing.T) {
			up := newUpstream(t, answerNow)
			tr := startTransport(t, ce, up.addr())
			addr := tcpAddr(t, tr.Addr())
			fds := make([]int, 0, idleWarm+idleConns)
			t.Cleanup(func() {
				for _, fd := range fds {
					_ = unix.Close(fd)
				}
			})
			go func() { // the upstream counts requests on a channel this test does not wait on
				for {
					select {
					case <-up.got:
					case <-up.stop:
						return
					}
				}
			}()
			// The first connections warm what is shared (buffer pools, the upstream
			// connection, the loop's state), which the measurement leaves out.
			for range idleWarm {
				fds = append(fds, rawRoundTrip(t, addr))
			}
			waitStats(t, tr, ingress.Stats{Connections: idleWarm})
			before := liveHeap()
			for range idleConns {
				fds = append(fds, rawRoundTrip(t, addr))
			}
			waitStats(t, tr, ingress.Stats{Connections: idleWarm + idleConns})
			per := float64(liveHeap()-before) / idleConns
			t.Logf("%s: %.0f bytes of Go heap per idle connection (%d connections)", ce.name, per, idleConns)
			require.LessOrEqual(t, per, float64(idleConnBudget), "an idle connection holds more heap than its budget")
		})
	}
}

// liveHeap returns the bytes of live heap objects after a collection (twice: sync.Pool keeps
// its objects one collection longer).
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func tcpAddr(t *testing.T, hostport string) *unix.SockaddrInet4 {
	t.Helper()
	ap, err := netip.ParseAddrPort(hostport)
	require.NoError(t, err)
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
}

// rawRoundTrip connects to addr with a blocking socket, sends one GET and reads the response
// ("hello", the upstream's answer), and returns the socket, open and idle.
func rawRoundTrip(t *testing.T, addr *unix.SockaddrInet4) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	tv := unix.NsecToTimeval((10 * time.Second).Nanoseconds())
	require.NoError(t, unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))
	// A blocking system call returns EINTR when the Go runtime signals the thread (goroutine
	// preemption): each is retried. A connect that was interrupted goes on in the kernel;
	// calling it again reports EALREADY until it is done (EISCONN).
	for err = unix.Connect(fd, addr); err == unix.EINTR || err == unix.EALREADY; err = unix.Connect(fd, addr) {
	}
	if err != unix.EISCONN {
		require.NoError(t, err)
	}
	req := []byte("GET /idle HTTP/1.1\r\nHost: gw\r\n\r\n")
	for len(req) > 0 {
		n, err := unix.Write(fd, req)
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err)
		req = req[n:]
	}
	var buf [4096]byte
	got := 0
	for !bytes.HasSuffix(buf[:got], []byte("\r\n\r\nhello")) {
		n, err := unix.Read(fd, buf[got:])
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err, "reading the response; got %q", buf[:got])
		require.Positive(t, n, "the gateway closed the connection")
		got += n
	}
	require.True(t, bytes.HasPrefix(buf[:got], []byte("HTTP/1.1 200 ")), "response: %q", buf[:got])
	return fd
}
