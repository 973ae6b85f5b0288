package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// The Transport contract (transport.go), run against both engines on loopback. Nothing here
// waits on a sleep: every wait is for an event (a request reaching the upstream, a read, a
// return) and has a deadline, so a broken engine fails the test instead of hanging it.

// contractEngine builds one engine of the contract test.
type contractEngine struct {
	name string
	make func(set ingress.Settings, res pipeline.Resolver) ingress.Transport
}

var contractEngines = []contractEngine{
	{"gnet", func(set ingress.Settings, res pipeline.Resolver) ingress.Transport {
		set.EventLoops = 1
		return ingress.NewGnet(set, res, nil)
	}},
	{"gnet-loop", func(set ingress.Settings, res pipeline.Resolver) ingress.Transport {
		set.EventLoops = 1
		set.UpstreamLoop = true
		return ingress.NewGnet(set, res, nil)
	}},
	{"fasthttp", func(set ingress.Settings, res pipeline.Resolver) ingress.Transport {
		return ingress.NewFast(set, res, nil)
	}},
}

// Deadlines of the contract. A drain of an idle engine must return well within drainPrompt;
// one whose context ended must return within cutSlack of that end.
const (
	drainPrompt = 5 * time.Second
	cutSlack    = 3 * time.Second
	eventWait   = 5 * time.Second
	// refusePrompt bounds the time from Drain's call to the first refused connection: closing
	// a listener takes microseconds; the rest is slack for a loaded machine.
	refusePrompt = 2 * time.Second
)

func TestTransportContract(t *testing.T) {
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			t.Run("StartBindsAndServes", func(t *testing.T) { testStartBindsAndServes(t, ce) })
			t.Run("BusyPortFailsAndLeavesNothing", func(t *testing.T) { testBusyPort(t, ce) })
			t.Run("DrainWithoutStartOrTwice", func(t *testing.T) { testDrainAnyTime(t, ce) })
			t.Run("DrainRightAfterStart", func(t *testing.T) { testDrainRightAfterStart(t, ce) })
			t.Run("DrainDeadlineCutsStuckRequest", func(t *testing.T) { testDrainDeadline(t, ce) })
			t.Run("DrainLetsRequestFinish", func(t *testing.T) { testDrainLetsRequestFinish(t, ce) })
			t.Run("DrainRefusesNewConnectionsAtOnce", func(t *testing.T) { testDrainRefusesAtOnce(t, ce) })
			t.Run("DrainClosesSilentConnection", func(t *testing.T) { testDrainClosesSilentConnection(t, ce) })
			t.Run("DrainEndsKeptAliveConnectionAfterGrace", func(t *testing.T) { testDrainEndsKeptAliveConnection(t, ce) })
			t.Run("StatsCountConnectionsAndRequests", func(t *testing.T) { testStats(t, ce) })
		})
	}
}

func testStartBindsAndServes(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerNow)
	tr := startTransport(t, ce, up.addr())
	host, port, err := net.SplitHostPort(tr.Addr())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port, "Addr must be the bound port, not the configured 0")

	c := dialClient(t, tr.Addr())
	for i := 0; i < 2; i++ { // keep-alive: the same connection serves again
		resp, body := roundTrip(t, c, "/hello")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "hello", string(body))
	}
	drainWithin(t, tr, context.Background(), drainPrompt)
}

func testBusyPort(t *testing.T, ce contractEngine) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	busy := ln.Addr().String()
	tr := ce.make(ingress.Settings{Name: "busy-ep", Address: busy}, newResolver(t, "127.0.0.1:1"))
	err = tr.Start()
	require.Error(t, err)
	require.Contains(t, err.Error(), "busy-ep", "the error names the entrypoint")
	require.Contains(t, err.Error(), busy, "the error names the address")

	// Nothing runs: a drain has nothing to wait for, no engine goroutine is left, and the port
	// is free once its owner lets go of it.
	require.NoError(t, drainWithin(t, tr, context.Background(), drainPrompt))
	waitNoEngineGoroutines(t)
	require.NoError(t, ln.Close())
	ln2, err := net.Listen("tcp", busy)
	require.NoError(t, err, "the failed engine must not hold the port")
	require.NoError(t, ln2.Close())
}

func testDrainAnyTime(t *testing.T, ce contractEngine) {
	res := newResolver(t, "127.0.0.1:1")
	never := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, res)
	require.NoError(t, drainWithin(t, never, context.Background(), drainPrompt), "Drain without Start")

	tr := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, res)
	require.NoError(t, tr.Start())
	addr := tr.Addr()
	require.NoError(t, drainWithin(t, tr, context.Background(), drainPrompt))
	require.NoError(t, drainWithin(t, tr, context.Background(), drainPrompt), "a second Drain")
	requireRefused(t, addr)
	waitNoEngineGoroutines(t)
}

// The race this guards against: Drain reached the server before its listener did, and the
// server then served on after the drain (Drain waited forever).
func testDrainRightAfterStart(t *testing.T, ce contractEngine) {
	res := newResolver(t, "127.0.0.1:1")
	canceled, cancel := context.WithCancel(context.Background())
	cancel() // what a gateway whose later entrypoint failed to bind drains with
	for i := 0; i < 50; i++ {
		tr := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, res)
		require.NoError(t, tr.Start(), "start %d", i)
		addr := tr.Addr()
		ctx := context.Background()
		if i%2 == 0 {
			ctx = canceled
		}
		require.NoError(t, drainWithin(t, tr, ctx, drainPrompt), "drain %d", i)
		requireRefused(t, addr)
	}
	waitNoEngineGoroutines(t)
}

func testDrainDeadline(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerNever)
	tr := startTransport(t, ce, up.addr())
	c := dialClient(t, tr.Addr())
	writeRequest(t, c, "/stuck")
	up.waitRequest(t)

	const grace = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	start := time.Now()
	err := drainWithin(t, tr, ctx, grace+cutSlack)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), grace, "the request in flight gets the whole grace")

	// The stuck request is cut: the client sees its connection end (no response), and nothing of
	// the engine is left serving.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventWait)))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the client connection must be closed, not left open")
	require.NotContains(t, string(got), "200 OK")
	require.Eventually(t, func() bool { return tr.Stats() == ingress.Stats{} }, eventWait, 10*time.Millisecond,
		"stats after a cut drain: %+v", tr.Stats())
	waitNoEngineGoroutines(t)
	requireRefused(t, tr.Addr())
	up.waitClosed(t) // the upstream exchange was aborted, not left waiting
}

func testDrainLetsRequestFinish(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerWhenReleased)
	tr := startTransport(t, ce, up.addr())
	c := dialClient(t, tr.Addr())
	writeRequest(t, c, "/slow")
	up.waitRequest(t)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- tr.Drain(ctx) }()
	// The drain has begun once new connections are refused; only then does the answer go.
	waitRefused(t, tr.Addr(), eventWait)
	close(up.release)

	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, bigBody, string(body), "the response in flight arrives whole")
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection closes after the drained response")
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(drainPrompt):
		t.Fatal("Drain did not return after the last request finished")
	}
	require.Equal(t, ingress.Stats{}, tr.Stats())
	waitNoEngineGoroutines(t)
}

// A drain refuses new connections at once (the listening socket is closed, so a client or a
// load balancer tries elsewhere), not after the requests in flight are done, and not by
// accepting them and closing them unanswered; the request in flight still gets its response.
func testDrainRefusesAtOnce(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerWhenReleased)
	tr := startTransport(t, ce, up.addr())
	c := dialClient(t, tr.Addr())
	writeRequest(t, c, "/in-flight")
	up.waitRequest(t)

	drained := make(chan error, 1)
	go func() { drained <- tr.Drain(context.Background()) }()
	// The request in flight holds the drain open until the upstream is released: a refusal
	// seen now is the drain's, not the stopped engine's.
	waitRefused(t, tr.Addr(), refusePrompt)
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a request in flight", err)
	default:
	}
	require.Equal(t, int64(1), tr.Stats().Active, "the request in flight is still served")

	close(up.release)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, bigBody, string(body), "the response in flight arrives whole")
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(drainPrompt):
		t.Fatal("Drain did not return after the last request finished")
	}
}

// A drain does not wait read_header_timeout for a connection that has sent nothing: it closes
// it without an answer (a request that never came cannot be answered), after a short grace
// for a request that was on its way when the listener closed. The grace is the engine's:
// fasthttp counts a new connection as idle 5 s after it opened, the gnet engine 1 s; both are
// well within the default read_header_timeout of 10 s.
func testDrainClosesSilentConnection(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerNow)
	tr := startTransport(t, ce, up.addr())
	c := dialClient(t, tr.Addr())
	waitStats(t, tr, ingress.Stats{Connections: 1})
	require.NoError(t, drainWithin(t, tr, context.Background(), 5*time.Second+cutSlack))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventWait)))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the silent connection must be closed")
	require.Empty(t, string(got), "no answer to a request that never came")
}

// A stream whose head went out before the drain began promised keep-alive; its client may send
// the next request the moment it ends, so the connection is not closed under that request at
// once (core/gateway's drain_keepalive_test.go sees it served). A client that sends nothing
// does not hold the drain: the connection closes unanswered after the engine's grace.
func testDrainEndsKeptAliveConnection(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerStreamWhenReleased)
	tr := startTransport(t, ce, up.addr())
	c := dialClient(t, tr.Addr())
	writeRequest(t, c, "/stream")
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.False(t, resp.Close, "the stream's head, sent before the drain, promises keep-alive")
	first := make([]byte, len(streamFirst))
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)

	drained := make(chan error, 1)
	go func() { drained <- tr.Drain(context.Background()) }()
	waitRefused(t, tr.Addr(), refusePrompt)
	close(up.release)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, streamLast, string(rest), "the stream in flight arrives whole")
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(drainPrompt):
		t.Fatal("Drain did not return: a connection that promised keep-alive held it")
	}
	got, err := io.ReadAll(r)
	require.NoError(t, err, "the connection must be closed")
	require.Empty(t, string(got), "no answer to a request that never came")
}

func testStats(t *testing.T, ce contractEngine) {
	up := newUpstream(t, answerWhenReleased)
	tr := startTransport(t, ce, up.addr())
	require.Equal(t, ingress.Stats{}, tr.Stats())

	a := dialClient(t, tr.Addr())
	b := dialClient(t, tr.Addr())
	waitStats(t, tr, ingress.Stats{Connections: 2})
	writeRequest(t, a, "/counted")
	up.waitRequest(t)
	waitStats(t, tr, ingress.Stats{Connections: 2, Active: 1})

	close(up.release)
	resp, err := http.ReadResponse(bufio.NewReader(a), nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	waitStats(t, tr, ingress.Stats{Connections: 2})
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	waitStats(t, tr, ingress.Stats{})
}

// startTransport starts an engine named "web" on a loopback port, routing every path to
// upstream, and drains it at cleanup.
func startTransport(t *testing.T, ce contractEngine, upstream string) ingress.Transport {
	t.Helper()
	tr := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, newResolver(t, upstream))
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = drainWithin(t, tr, ctx, time.Second+cutSlack)
	})
	return tr
}

// newResolver compiles a config whose one router sends every path to upstream.
func newResolver(t *testing.T, upstream string) *snapshot.Live {
	t.Helper()
	return newResolverWith(t, upstream, "")
}

// newResolverWith is newResolver with more keys of the service's load_balancer table.
func newResolverWith(t *testing.T, upstream, lbKeys string) *snapshot.Live {
	t.Helper()
	toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n"+
		"[services.up.load_balancer]\nservers = [{ url = \"http://%s\" }]\n%s\n[admin]\naddress = \"\"\n", upstream, lbKeys)
	cfg, err := config.LoadBytes("contract.toml", []byte(toml))
	require.NoError(t, err)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	var live snapshot.Live
	live.Activate(snap)
	t.Cleanup(func() { live.Load().Retire(nil) })
	return &live
}

// drainWithin drains tr with ctx and fails t if Drain has not returned within limit.
func drainWithin(t *testing.T, tr ingress.Transport, ctx context.Context, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- tr.Drain(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Drain did not return within %v", limit)
		return nil
	}
}

func waitStats(t *testing.T, tr ingress.Transport, want ingress.Stats) {
	t.Helper()
	require.Eventually(t, func() bool { return tr.Stats() == want }, eventWait, 5*time.Millisecond,
		"stats %+v, want %+v", tr.Stats(), want)
}

func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

// waitRefused waits until a new connection to addr is refused by the kernel (ECONNREFUSED: no
// socket listens), for at most within; a connection that is accepted, even if closed at once,
// is not a refusal.
func waitRefused(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	end := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if err == nil {
			_ = c.Close()
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not refuse new connections within %v of the drain (last dial: %v)", addr, within, err)
		}
	}
}

func requireRefused(t *testing.T, addr string) {
	t.Helper()
	require.True(t, refused(addr), "%s still accepts connections after Drain", addr)
}

// engineFrames mark a goroutine that serves for an engine: fasthttp's accept loop and
// connection workers, gnet's engine and event loops, and the ingress package's own code.
// fasthttp's worker-pool cleaner is not among them: it serves nothing, and notices the stop
// only after sleeping out MaxIdleWorkerDuration.
var engineFrames = []string{
	"github.com/valyala/fasthttp.(*Server).",
	"github.com/valyala/fasthttp.(*workerPool).workerFunc",
	"github.com/panjf2000/gnet/v2.(*engine).",
	"github.com/panjf2000/gnet/v2.(*eventloop).",
	"github.com/panjf2000/gnet/v2.run(",
	"github.com/sluice-gw/sluice/core/ingress.(",
}

// goroutineStacks returns the stack of every live goroutine, as runtime.Stack writes them
// (each begins "goroutine N [state...]:").
func goroutineStacks() [][]byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Split(buf[:n], []byte("\n\n"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// engineGoroutines returns the stacks of live goroutines that run engine code.
func engineGoroutines() []string {
	var out []string
	for _, g := range goroutineStacks() {
		for _, f := range engineFrames {
			if bytes.Contains(g, []byte(f)) {
				out = append(out, string(g))
				break
			}
		}
	}
	return out
}

// waitNoEngineGoroutines fails t unless every engine goroutine is gone within eventWait.
func waitNoEngineGoroutines(t *testing.T) {
	t.Helper()
	end := time.Now().Add(eventWait)
	for {
		left := engineGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("engine goroutines left running after %v:\n%s", eventWait, strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dialClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	return c
}

func writeRequest(t *testing.T, c net.Conn, path string) {
	t.Helper()
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.NoError(t, err)
}

// roundTrip sends one request on c and reads its whole response.
func roundTrip(t *testing.T, c net.Conn, path string) (*http.Response, []byte) {
	t.Helper()
	writeRequest(t, c, path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// bigBody is the answer of answerWhenReleased: large enough to take several writes.
var bigBody = strings.Repeat("0123456789abcdef", 16<<10)

// contractUpstream is a loopback HTTP/1.1 server; answer decides what each request gets.
type contractUpstream struct {
	ln      net.Listener
	got     chan struct{} // one value per request head read
	closed  chan struct{} // one value per connection the gateway closed
	release chan struct{} // answerWhenReleased answers once this is closed
	stop    chan struct{} // closed at cleanup
	conns   atomic.Int64  // connections accepted
	wg      sync.WaitGroup
}

// signal sends one value on ch, unless cleanup stops the upstream first (nobody counts any
// more).
func (u *contractUpstream) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	case <-u.stop:
	}
}

type answer func(u *contractUpstream, c net.Conn) bool

// answerNow answers "hello" at once and keeps the connection.
func answerNow(_ *contractUpstream, c net.Conn) bool {
	_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	return err == nil
}

// answerNever holds the request until the gateway closes the connection (or cleanup).
func answerNever(u *contractUpstream, c net.Conn) bool { return false }

// answerWhenReleased answers bigBody once u.release is closed.
func answerWhenReleased(u *contractUpstream, c net.Conn) bool {
	select {
	case <-u.release:
	case <-u.stop:
		return false
	}
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(bigBody), bigBody)
	return err == nil
}

// The events of answerStreamWhenReleased: the first at once, the last once u.release is closed.
const (
	streamFirst = "data: first\n\n"
	streamLast  = "data: last\n\n"
)

// answerStreamWhenReleased answers with a chunked event stream whose head and first event go
// at once and whose last event and end wait until u.release is closed.
func answerStreamWhenReleased(u *contractUpstream, c net.Conn) bool {
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(streamFirst), streamFirst)
	if err != nil {
		return false
	}
	select {
	case <-u.release:
	case <-u.stop:
		return false
	}
	_, err = fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(streamLast), streamLast)
	return err == nil
}

func newUpstream(t *testing.T, a answer) *contractUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &contractUpstream{ln: ln, got: make(chan struct{}, 16), closed: make(chan struct{}, 16),
		release: make(chan struct{}), stop: make(chan struct{})}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				go func() { <-u.stop; _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					if !readHead(r) {
						u.signal(u.closed)
						return
					}
					u.signal(u.got)
					if !a(u, c) {
						// Hold the connection until the gateway closes it (or cleanup).
						_, _ = io.Copy(io.Discard, r)
						u.signal(u.closed)
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { close(u.stop); _ = ln.Close(); u.wg.Wait() })
	return u
}

func (u *contractUpstream) addr() string { return u.ln.Addr().String() }

func (u *contractUpstream) waitRequest(t *testing.T) {
	t.Helper()
	select {
	case <-u.got:
	case <-time.After(eventWait):
		t.Fatal("the request did not reach the upstream")
	}
}

func (u *contractUpstream) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-u.closed:
	case <-time.After(eventWait):
		t.Fatal("the gateway did not close its upstream connection")
	}
}

// readHead reads one request head (the contract's requests have no body).
func readHead(r *bufio.Reader) bool {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		if line == "\r\n" {
			return true
		}
	}
}
