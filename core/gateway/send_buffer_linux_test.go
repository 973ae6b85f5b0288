package gateway_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// send_buffer_bytes caps the kernel send buffer of the gateway's end of every client
// connection. The test runs the gateway in its own process, so it reads the accepted socket's
// SO_SNDBUF directly: the socket among the process's descriptors whose address pair is the
// client's, reversed. Linux reports the value set doubled; the same socket without the cap
// reports what autotuning gave it (megabytes on loopback), never that.

// Caps used below: both under the kernel's smallest default net.core.wmem_max (212992), over
// its minimum, and far from what autotuning gives a loopback socket.
const (
	smallSendBuffer = 16 << 10
	largeSendBuffer = 48 << 10
)

func TestSendBufferBytesCapsClientSockets(t *testing.T) {
	requireWmemMax(t, largeSendBuffer)
	up := serveUpstream(t, echo)
	for _, engine := range append(append([]string{}, engines...), "fasthttp-tls") {
		t.Run(engine, func(t *testing.T) {
			for _, n := range []int{0, smallSendBuffer} {
				extra := ""
				if n > 0 {
					extra = fmt.Sprintf("send_buffer_bytes = %d", n)
				}
				got := sendBufferOfServedConn(t, engine, up.addr(), extra)
				if n == 0 {
					require.NotEqual(t, 2*smallSendBuffer, got, "without send_buffer_bytes the kernel sizes the buffer")
					continue
				}
				require.Equal(t, 2*n, got, "SO_SNDBUF of the accepted connection (the kernel doubles the value set)")
			}
		})
	}
}

// A reload that changes only send_buffer_bytes hands the listening socket to the entrypoint's
// new transport (the port stays), and the connections accepted after it get the new cap; one
// back to 0 gives them the kernel's autotuning again, which a cap set on the shared listening
// socket could not (the lock SO_SNDBUF sets on it is never cleared).
func TestReloadChangesSendBufferBytes(t *testing.T) {
	requireWmemMax(t, largeSendBuffer)
	u := upstreams{up: serveUpstream(t, echo).addr(), ws: deadUpstream(t), js: deadUpstream(t)}
	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			ep := func(n int) string {
				return fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %q\nsend_buffer_bytes = %d\n", engine, n)
			}
			g, path := startFromFile(t, epReloadConfig(ep(smallSendBuffer), u, 1))
			addr := g.Addr("web")
			require.Equal(t, 2*smallSendBuffer, servedSendBuffer(t, dialServed(t, addr, nil)))

			require.NoError(t, reloadWith(t, g, path, epReloadConfig(ep(largeSendBuffer), u, 2)))
			require.Equal(t, addr, g.Addr("web"), "the new transport took the listening socket over")
			require.Equal(t, 2*largeSendBuffer, servedSendBuffer(t, dialServed(t, addr, nil)))

			require.NoError(t, reloadWith(t, g, path, epReloadConfig(ep(0), u, 3)))
			require.Equal(t, addr, g.Addr("web"))
			got := servedSendBuffer(t, dialServed(t, addr, nil))
			require.NotContains(t, []int{2 * smallSendBuffer, 2 * largeSendBuffer}, got, "send_buffer_bytes = 0 leaves the buffer to the kernel")
		})
	}
}

// requireWmemMax skips the test when the kernel caps SO_SNDBUF (net.core.wmem_max) below n:
// the values it checks would be the cap's, not the ones set.
func requireWmemMax(t *testing.T, n int) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	require.NoError(t, err)
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	if max < n {
		t.Skipf("net.core.wmem_max is %d, under the %d bytes the test sets", max, n)
	}
}

// sendBufferOfServedConn runs a gateway on engine ("fasthttp-tls": fasthttp with TLS) with
// extra in its entrypoint table, and returns the SO_SNDBUF of the gateway's end of a client
// connection that has been served a request.
func sendBufferOfServedConn(t *testing.T, engine, upstream, extra string) int {
	t.Helper()
	var roots *tls.Config
	if engine == "fasthttp-tls" {
		cert, key, pool := selfSigned(t, t.TempDir())
		extra += fmt.Sprintf("\ntls = { cert_file = %q, key_file = %q }", cert, key)
		engine, roots = "fasthttp", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	}
	_, addr := startGateway(t, engine, upstream, extra)
	return servedSendBuffer(t, dialServed(t, addr, roots))
}

// dialServed opens a client connection to addr (over TLS with tlsConf) and has one request
// answered on it: the gateway then has set its end up and written to it.
func dialServed(t *testing.T, addr string, tlsConf *tls.Config) net.Conn {
	t.Helper()
	raw := dial(t, addr)
	c := raw
	if tlsConf != nil {
		c = tls.Client(raw, tlsConf)
	}
	send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
	return raw
}

// servedSendBuffer returns the SO_SNDBUF of the gateway's end of the client connection c:
// each descriptor of this process whose local address is c's remote one and whose peer is
// c's local one (gnet may hold duplicates of the socket; they agree).
func servedSendBuffer(t *testing.T, c net.Conn) int {
	t.Helper()
	local, remote := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	found := -1
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		// The descriptor may be closed, or be another file, by now: only a socket with this
		// exact address pair counts.
		if !sockaddrIs(unix.Getsockname(fd)).equal(remote) || !sockaddrIs(unix.Getpeername(fd)).equal(local) {
			continue
		}
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
		if err != nil {
			continue
		}
		if found >= 0 {
			require.Equal(t, found, v, "duplicates of one socket disagree")
		}
		found = v
	}
	require.GreaterOrEqual(t, found, 0, "no socket of this process is the gateway's end of %s -> %s", local, remote)
	return found
}

// sockaddr is an IPv4 socket address as Getsockname or Getpeername returned it, or nothing.
type sockaddr struct{ sa unix.Sockaddr }

func sockaddrIs(sa unix.Sockaddr, err error) sockaddr {
	if err != nil {
		return sockaddr{}
	}
	return sockaddr{sa}
}

func (s sockaddr) equal(a *net.TCPAddr) bool {
	in, ok := s.sa.(*unix.SockaddrInet4)
	return ok && in.Port == a.Port && net.IP(in.Addr[:]).Equal(a.IP)
}
