package ingress_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// startLoopEngine runs a gnet engine with upstream_io = "loop" and one event loop in front of
// upstream.
func startLoopEngine(t *testing.T, upstream string) ingress.Transport {
	t.Helper()
	return startLoopEngineWith(t, upstream, false)
}

// startLoopEngineWith is startLoopEngine with the loop's own connects (ConnectOnLoop) on or off.
func startLoopEngineWith(t *testing.T, upstream string, connectOnLoop bool) ingress.Transport {
	t.Helper()
	return startLoopEngineSettings(t, upstream, ingress.Settings{EventLoops: 1, ConnectOnLoop: connectOnLoop})
}

// startLoopEngineSettings starts a gnet engine with set (its name, address and UpstreamLoop
// filled in) whose every route goes to upstream; cleanup drains it.
func startLoopEngineSettings(t *testing.T, upstream string, set ingress.Settings) ingress.Transport {
	t.Helper()
	set.Name, set.Address, set.UpstreamLoop = "web", "127.0.0.1:0", true
	tr := ingress.NewGnet(set, newResolver(t, upstream), nil)
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = drainWithin(t, tr, ctx, time.Second+cutSlack)
	})
	return tr
}

// A request on a plain route runs on the event loop, and keep-alive requests on one client
// connection reuse the loop's upstream connection.
func TestLoopPathServesAndReuses(t *testing.T) {
	up := newUpstream(t, answerNow)
	tr := startLoopEngine(t, up.addr())
	c := dialClient(t, tr.Addr())
	for i := 0; i < 3; i++ {
		resp, body := roundTrip(t, c, "/x")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "hello", string(body))
	}
	require.EqualValues(t, 3, ingress.LoopServed(tr))
	require.EqualValues(t, 1, up.conns.Load(), "one upstream connection for the three requests")
}

// Backpressure on the loop path: a client that reads nothing while its upstream streams as
// fast as it can. gnet cannot stop reading the upstream socket, so the exchange must leave
// the loop before the loop's buffers grow; the worker that takes it over stops reading the
// upstream. The upstream's writes then stall, and what the gateway holds for the connection
// stays within the bound whatever the upstream still has to send.
func TestLoopBackpressureBoundsMemory(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	const total = 512 << 20 // far more than any buffer on the way
	var written atomic.Int64
	stalled := make(chan struct{})
	closed := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if !readHead(br) {
			return
		}
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 536870912\r\n\r\n"))
		chunk := []byte(strings.Repeat("x", 64<<10))
		once := false
		for written.Load() < total {
			// A write that cannot finish within the deadline: the gateway stopped reading.
			_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := c.Write(chunk)
			written.Add(int64(n))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if !once {
					once = true
					close(stalled)
				}
				continue
			}
			if err != nil {
				close(closed)
				return
			}
		}
	}()

	tr := startLoopEngine(t, ln.Addr().String())
	c, err := net.Dial("tcp", tr.Addr())
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4<<10))
	_, err = c.Write([]byte("GET /stream HTTP/1.1\r\nHost: gw\r\n\r\n"))
	require.NoError(t, err)

	select {
	case <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatalf("the upstream never stalled: %d bytes written", written.Load())
	}
	require.EqualValues(t, 1, ingress.LoopServed(tr), "the request started on the loop")
	held := ingress.ConnBuffered(tr)
	require.Len(t, held, 1)
	t.Logf("held %d bytes for the connection (bound %d); the upstream wrote %d", held[0], ingress.LoopBufferBound, written.Load())
	require.LessOrEqual(t, held[0], int64(ingress.LoopBufferBound), "bytes held for the connection")
	require.Less(t, written.Load(), int64(total), "the upstream was held back")

	// The client leaves: the exchange, now on a worker, is cancelled and the upstream sees it.
	require.NoError(t, c.Close())
	select {
	case <-closed:
	case <-time.After(eventWait):
		t.Fatal("the upstream connection was not closed after the client left")
	}
}

// A body handed from the loop to a worker mid-way (the client fell behind) arrives whole and
// in order: the bytes the loop had read, and those it read while letting go of the socket,
// come before the socket's. The upstream streams until the client leaves, so the hand-off and
// the stall come whatever the kernel's buffers on the way can hold (receive buffers grow to
// tcp_rmem's maximum, tens of MiB on common hosts); the client then checks every byte the
// upstream had written by the stall, which lie past the hand-off, and a margin after them.
func TestLoopHandoffKeepsBodyIntact(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	const size = 1 << 30 // more than any buffer on the way: the stream ends with the client
	pattern := func(i int) byte { return byte(i*7 + i>>13) }
	var atStall atomic.Int64
	stalled := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if !readHead(bufio.NewReader(c)) {
			return
		}
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1073741824\r\n\r\n"))
		buf := make([]byte, 64<<10)
		once := false
		for off := 0; off < size; {
			n := min(len(buf), size-off)
			for i := 0; i < n; i++ {
				buf[i] = pattern(off + i)
			}
			_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			w, err := c.Write(buf[:n])
			off += w
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if !once {
					once = true
					atStall.Store(int64(off))
					close(stalled) // the client reads nothing yet: the gateway holds back
				}
				_ = c.SetWriteDeadline(time.Time{})
				m, err := c.Write(buf[w:n])
				off += m
				if err != nil {
					return
				}
				continue
			}
			if err != nil {
				return
			}
		}
	}()

	tr := startLoopEngine(t, ln.Addr().String())
	c, err := net.Dial("tcp", tr.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	// The client's receive buffer keeps its default: one smaller than the loopback MSS never
	// opens by a segment, so its window updates would wait on the sender's zero-window probes.
	_, err = c.Write([]byte("GET /big HTTP/1.1\r\nHost: gw\r\n\r\n"))
	require.NoError(t, err)
	select {
	case <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream never stalled")
	}
	check := int(atStall.Load()) + 1<<20
	t.Logf("the upstream had written %d bytes by the stall", atStall.Load())
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReaderSize(c, 64<<10)
	require.True(t, readHead(r), "response head")
	got := make([]byte, 64<<10)
	for off := 0; off < check; {
		n, err := r.Read(got[:min(len(got), check-off)])
		for i := 0; i < n; i++ {
			if got[i] != pattern(off+i) {
				t.Fatalf("byte %d: got %d, want %d", off+i, got[i], pattern(off+i))
			}
		}
		off += n
		require.NoError(t, err, "after %d bytes", off)
	}
}

// A worker's dial for the loop path that connects just as the engine stops (a drain whose
// deadline passed with the request still waiting for its upstream): the socket must not be
// handed to an event loop that no longer runs, where its registration would never run,
// leaving the socket open and goroutines waiting. Once Drain returns, the upstream sees its
// connection closed and no engine goroutine is left. An upstream named by host name is dialled
// through the pool (and enrolled), one given by address connected by the worker (and
// registered as it is).
func TestLoopDialAtShutdownLeaksNothing(t *testing.T) {
	t.Run("by name", func(t *testing.T) { testDialAtShutdown(t, true) })
	t.Run("by address", func(t *testing.T) { testDialAtShutdown(t, false) })
}

func testDialAtShutdown(t *testing.T, byName bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	// The dial connects, then finishes only when its context ends: when the client leaves or
	// the engine stops, the moment the socket would be enrolled.
	dialed := make(chan struct{})
	restore := ingress.SetDialedHook(func(ctx context.Context) {
		close(dialed)
		<-ctx.Done()
	})
	t.Cleanup(restore)
	upstream := ln.Addr().String()
	if byName {
		_, port, _ := net.SplitHostPort(upstream)
		upstream = "localhost:" + port
	}
	tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1, UpstreamLoop: true}, newResolver(t, upstream), nil)
	require.NoError(t, tr.Start())

	c := dialClient(t, tr.Addr())
	writeRequest(t, c, "/x")
	var up net.Conn
	select {
	case up = <-accepted:
		t.Cleanup(func() { _ = up.Close() })
	case <-time.After(eventWait):
		t.Fatal("the gateway did not connect to the upstream")
	}
	select {
	case <-dialed:
	case <-time.After(eventWait):
		t.Fatal("the dial did not complete")
	}

	// The drain's deadline passes with the client still waiting: gnet stops mid-dial.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, drainWithin(t, tr, ctx, drainPrompt+cutSlack), context.DeadlineExceeded)

	require.NoError(t, up.SetReadDeadline(time.Now().Add(eventWait)))
	_, err = up.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the gateway's upstream socket is still open after Drain: %v", err)
	waitNoEngineGoroutines(t)
}

// Concurrent requests keep spare upstream connections on the loop: a request that dials while
// another exchange is in flight leaves spares dialled in the background (connected on the
// loop for an upstream given by address with ConnectOnLoop, by a worker otherwise), and
// requests that come while no worker's dial can finish are served from them instead of
// waiting for one.
func TestLoopKeepsSpareConnections(t *testing.T) {
	t.Run("on the loop", func(t *testing.T) { testSpareConnections(t, false, true) })
	t.Run("worker, by address", func(t *testing.T) { testSpareConnections(t, false, false) })
	t.Run("worker, by name", func(t *testing.T) { testSpareConnections(t, true, false) })
}

func testSpareConnections(t *testing.T, byName, onLoop bool) {
	var held atomic.Bool
	up := newUpstream(t, func(u *contractUpstream, c net.Conn) bool {
		if held.CompareAndSwap(false, true) { // the first request waits for release
			select {
			case <-u.release:
			case <-u.stop:
				return false
			}
		}
		return answerNow(u, c)
	})
	var gated atomic.Bool
	var workerDials atomic.Int32
	gate := make(chan struct{})
	restore := ingress.SetDialedHook(func(ctx context.Context) {
		workerDials.Add(1)
		if gated.Load() {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
	})
	t.Cleanup(restore)
	upstream := up.addr()
	if byName {
		_, port, _ := net.SplitHostPort(upstream)
		upstream = "localhost:" + port
	}
	tr := startLoopEngineWith(t, upstream, onLoop)
	t.Cleanup(func() { close(gate) })

	a := dialClient(t, tr.Addr())
	writeRequest(t, a, "/held")
	select {
	case <-up.got:
	case <-time.After(eventWait):
		t.Fatal("the upstream did not get the first request")
	}
	// The second request dials while the first is in flight: spares follow it.
	resp, _ := roundTrip(t, dialClient(t, tr.Addr()), "/x")
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return ingress.LoopIdle(tr) == ingress.SpareConns+1 }, eventWait, 5*time.Millisecond,
		"the loop holds the second request's connection and %d spares", ingress.SpareConns)
	if onLoop {
		require.Zero(t, workerDials.Load(), "the loop connects its spares itself")
		close(up.release)
		return
	}

	// From now on no worker's dial finishes; two requests at once are still served at once.
	gated.Store(true)
	done := make(chan int, 2)
	for i := 0; i < 2; i++ {
		c := dialClient(t, tr.Addr())
		writeRequest(t, c, "/x")
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				done <- 0
				return
			}
			done <- resp.StatusCode
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case code := <-done:
			require.Equal(t, 200, code)
		case <-time.After(eventWait):
			t.Fatal("a request waited for a dial although spares were idle")
		}
	}
	close(up.release)
}

// The event loops accept new connections themselves (the listener is in every loop's
// poller): a client that connects while another client's stream keeps a loop busy is served,
// every connection is accepted by a loop, and the accept goroutine never runs.
func TestLoopsAcceptConnections(t *testing.T) {
	var calls atomic.Int64
	t.Cleanup(ingress.SetAcceptHook(func() { calls.Add(1) }))
	var first atomic.Bool
	up := newUpstream(t, func(u *contractUpstream, c net.Conn) bool {
		if !first.CompareAndSwap(false, true) {
			return answerNow(u, c)
		}
		// The first request streams a chunk every 2 ms until cleanup: traffic on the loop.
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return false
		}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-u.stop:
				return false
			case <-tick.C:
				if _, err := io.WriteString(c, "1\r\nx\r\n"); err != nil {
					return false
				}
			}
		}
	})
	tr := startLoopEngine(t, up.addr())

	a := dialClient(t, tr.Addr())
	writeRequest(t, a, "/stream")
	br := bufio.NewReader(a)
	require.NoError(t, a.SetReadDeadline(time.Now().Add(eventWait)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "the streaming request is answered")
	require.Equal(t, 200, resp.StatusCode)
	go func() { _, _ = io.Copy(io.Discard, br) }()

	for i := 0; i < 3; i++ {
		b := dialClient(t, tr.Addr())
		resp2, body := roundTrip(t, b, "/x")
		require.Equal(t, 200, resp2.StatusCode)
		require.Equal(t, "hello", string(body))
	}
	require.Equal(t, int64(4), ingress.LoopAccepted(tr), "the loops accepted every client")
	require.Zero(t, calls.Load(), "the accept goroutine never ran")
}
