//go:build linux

package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/ingress"
)

// fullBacklog returns the address of a listening socket whose accept queue is full and never
// drained: a connect to it stays in progress (the kernel drops its SYN) until the connector
// gives up.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fd) })
	require.NoError(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, unix.Listen(fd, 0))
	sa, err := unix.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	for i := 0; ; i++ {
		require.Less(t, i, 8, "the accept queue of %s does not fill", addr)
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // this connect stayed in progress: the queue is full
		}
		t.Cleanup(func() { _ = c.Close() })
	}
}

// connectsInProgress counts this process's TCP sockets in SYN_SENT towards addr
// (/proc/net/tcp: state 02). t may be an assert.CollectT, for a check that is retried.
func connectsInProgress(t require.TestingT, addr string) int {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	ap := netipAddrPort(t, addr)
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ap[3], ap[2], ap[1], ap[0], ap[4]<<8|ap[5])
	data, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[2] == want && f[3] == "02" {
			n++
		}
	}
	return n
}

// netipAddrPort returns an IPv4 address and port as 4 bytes of address and 2 of port.
func netipAddrPort(t require.TestingT, addr string) [6]int {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	require.NoError(t, err)
	ip := ta.IP.To4()
	return [6]int{int(ip[0]), int(ip[1]), int(ip[2]), int(ip[3]), ta.Port >> 8, ta.Port & 0xff}
}

// serveUp serves "up" on a loopback address of network ("tcp4" or "tcp6") and returns its
// address, or "" when the machine has no such loopback.
func serveUp(t *testing.T, network string) string {
	t.Helper()
	host := "127.0.0.1:0"
	if network == "tcp6" {
		host = "[::1]:0"
	}
	ln, err := net.Listen(network, host)
	if err != nil {
		return ""
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("up"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// With ConnectOnLoop (upstream_connect = "loop"), an upstream given by address (IPv4 or
// IPv6) is connected to on the event loop itself (no worker dial); one given by name still
// goes through a worker's dial and resolver, and so does every upstream without it. All
// answer alike.
func TestLoopConnectsToAnAddressOnTheLoop(t *testing.T) {
	addr := serveUp(t, "tcp4")
	_, port, _ := net.SplitHostPort(addr)
	var workerDials atomic.Int32
	t.Cleanup(ingress.SetDialedHook(func(context.Context) { workerDials.Add(1) }))
	type dialCase struct {
		upstream    string
		onLoop      bool
		workerDials int32
	}
	cases := []dialCase{{addr, true, 0}, {"localhost:" + port, true, 1}, {addr, false, 1}}
	if addr6 := serveUp(t, "tcp6"); addr6 != "" {
		cases = append(cases, dialCase{addr6, true, 0}, dialCase{addr6, false, 1})
	} else {
		t.Log("no IPv6 loopback: the IPv6 connect is not tried")
	}
	for _, c := range cases {
		workerDials.Store(0)
		tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1, UpstreamLoop: true, ConnectOnLoop: c.onLoop},
			newResolver(t, c.upstream), nil)
		require.NoError(t, tr.Start())
		resp, body := roundTrip(t, dialClient(t, tr.Addr()), "/x")
		require.Equal(t, http.StatusOK, resp.StatusCode, c.upstream)
		require.Equal(t, "up", string(body), c.upstream)
		require.Equal(t, c.workerDials, workerDials.Load(), "dials through a worker to %s (connect on the loop: %v)", c.upstream, c.onLoop)
		require.NoError(t, tr.Drain(context.Background()))
	}
	waitNoEngineGoroutines(t)
}

// A connect the loop registered that does not complete ends at dial_timeout (checked by the
// engine's 250 ms sweep) with the answer a worker's dial through the resolver gives for the same
// upstream: whether the loop began the connect (ConnectOnLoop) or a worker did and handed the
// loop its socket (an upstream given by address, without ConnectOnLoop).
func TestLoopConnectTimesOutAsAWorkersDialDoes(t *testing.T) {
	addr := fullBacklog(t)
	_, port, _ := net.SplitHostPort(addr)
	const dialTimeout = 300 * time.Millisecond
	heads := map[string]string{}
	for _, onLoop := range []bool{true, false} {
		for _, upstream := range []string{addr, "localhost:" + port} {
			name := fmt.Sprintf("%s, connect on the loop: %v", upstream, onLoop)
			tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1, UpstreamLoop: true, ConnectOnLoop: onLoop},
				newResolverWith(t, upstream, fmt.Sprintf("dial_timeout = %q", dialTimeout.String())), nil)
			require.NoError(t, tr.Start())
			c := dialClient(t, tr.Addr())
			start := time.Now()
			writeRequest(t, c, "/x")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err, name)
			took := time.Since(start)
			_ = resp.Body.Close()
			require.GreaterOrEqual(t, took, dialTimeout, name)
			require.Less(t, took, 10*dialTimeout, "%s: the connect was not cut at dial_timeout", name)
			heads[name] = fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			require.NoError(t, tr.Drain(context.Background()))
		}
	}
	want := heads[fmt.Sprintf("localhost:%s, connect on the loop: false", port)]
	for name, head := range heads {
		require.Equal(t, want, head, "%s answers as the worker's dial through the resolver", name)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Zero(c, connectsInProgress(c, addr)) }, eventWait, 10*time.Millisecond,
		"the timed-out connects are closed")
	waitNoEngineGoroutines(t)
}

// A connect the loop registered (begun by the loop with ConnectOnLoop, or by a worker
// without) and that is still in progress when the engine stops (a drain whose deadline
// passed) is closed with the loop: no socket and no engine goroutine is left.
func TestLoopConnectAtShutdownLeaksNothing(t *testing.T) {
	t.Run("connect on the loop", func(t *testing.T) { testConnectAtShutdown(t, true) })
	t.Run("connect on a worker", func(t *testing.T) { testConnectAtShutdown(t, false) })
}

func testConnectAtShutdown(t *testing.T, onLoop bool) {
	addr := fullBacklog(t)
	tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1, UpstreamLoop: true, ConnectOnLoop: onLoop}, newResolver(t, addr), nil)
	require.NoError(t, tr.Start())
	c := dialClient(t, tr.Addr())
	writeRequest(t, c, "/x")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1, connectsInProgress(c, addr)) }, eventWait, 5*time.Millisecond,
		"the gateway's connect to %s", addr)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, drainWithin(t, tr, ctx, drainPrompt+cutSlack), context.DeadlineExceeded)
	require.Zero(t, connectsInProgress(t, addr), "the connect in progress is closed once Drain returns")
	waitNoEngineGoroutines(t)
}
