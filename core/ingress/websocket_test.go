package ingress_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// WebSocket through both engines, against a real WebSocket upstream (coder/websocket's
// server) and client. Every wait is for an event with a deadline.

// wsUpstream is a WebSocket server on loopback: it echoes every message, and reports on
// closed when a client's connection to it ends.
type wsUpstream struct {
	srv    *http.Server
	ln     net.Listener
	closed chan error    // the read error that ended a connection
	bye    chan struct{} // a message "bye" makes the upstream drop the connection (no close frame)
}

func newWSUpstream(t testing.TB) *wsUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &wsUpstream{ln: ln, closed: make(chan error, 16), bye: make(chan struct{}, 16)}
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "no sockets here", http.StatusForbidden)
			return
		}
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		// As any server: a connection whose handler ended is closed. coder/websocket leaves
		// it open after a failed read, and the gateway keeps a tunnel one side ended (a FIN)
		// open for what the other side still sends.
		defer c.CloseNow()
		c.SetReadLimit(-1)
		ctx := context.Background()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				u.closed <- err
				return
			}
			if string(msg) == "bye" {
				u.bye <- struct{}{}
				_ = c.CloseNow()
				u.closed <- nil
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				u.closed <- err
				return
			}
		}
	})}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() { _ = u.srv.Close() })
	return u
}

// startWSTransport starts engine ce routing every path to upstream, with extra keys for the
// service's load balancer.
func startWSTransport(t testing.TB, ce contractEngine, upstream, lbKeys string) ingress.Transport {
	t.Helper()
	toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n"+
		"[services.up.load_balancer]\nservers = [{ url = \"http://%s\" }]\n%s\n[admin]\naddress = \"\"\n", upstream, lbKeys)
	cfg, err := config.LoadBytes("ws.toml", []byte(toml))
	require.NoError(t, err)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	var live snapshot.Live
	live.Activate(snap)
	t.Cleanup(func() { live.Load().Retire(nil) })
	tr := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, &live)
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() { _ = tr.Drain(ctx); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second + cutSlack):
			t.Error("Drain did not return after its deadline")
		}
	})
	return tr
}

func dialWS(t *testing.T, addr string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+addr+"/socket", nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "the gateway's own fields are on the 101")
	c.SetReadLimit(-1)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func TestWebSocket(t *testing.T) {
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			t.Run("Echo", func(t *testing.T) { testWSEcho(t, ce) })
			t.Run("TenThousandMessagesEachWayInOrder", func(t *testing.T) { testWSInOrder(t, ce) })
			t.Run("UpstreamCloseReachesClient", func(t *testing.T) { testWSUpstreamClose(t, ce) })
			t.Run("ClientCloseReachesUpstream", func(t *testing.T) { testWSClientClose(t, ce) })
			t.Run("ClientResetReachesUpstream", func(t *testing.T) { testWSClientReset(t, ce) })
			t.Run("DrainWaitsThenCutsTunnel", func(t *testing.T) { testWSDrain(t, ce) })
			t.Run("HandshakeTokensAreCaseInsensitiveLists", func(t *testing.T) { testWSTokenLists(t, ce) })
			t.Run("BadHandshakesRefused", func(t *testing.T) { testWSBadHandshakes(t, ce) })
			t.Run("MalformedUpstream101Is502", func(t *testing.T) { testWSBadAccept(t, ce) })
			t.Run("UpstreamRefusalRelayed", func(t *testing.T) { testWSUpstreamRefusal(t, ce) })
			t.Run("IdleTimeoutClosesBothSides", func(t *testing.T) { testWSIdle(t, ce) })
			t.Run("IdleTimeoutCountsFromTheLastByte", func(t *testing.T) { testWSIdleFromLastByte(t, ce) })
			t.Run("BackpressureBothWays", func(t *testing.T) { testWSBackpressure(t, ce) })
		})
	}
}

func testWSEcho(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	c := dialWS(t, tr.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	// A large binary message too: frames pass as bytes, with no size cap of the gateway's.
	big := strings.Repeat("x", 3<<20)
	for _, m := range []string{"hello", big} {
		require.NoError(t, c.Write(ctx, websocket.MessageBinary, []byte(m)))
		typ, got, err := c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, websocket.MessageBinary, typ)
		require.Equal(t, len(m), len(got))
		require.Equal(t, m, string(got))
	}
	require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
}

func testWSInOrder(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	c := dialWS(t, tr.Addr())
	const n = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := c.Write(ctx, websocket.MessageText, []byte(strconv.Itoa(i))); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	for i := 0; i < n; i++ {
		_, got, err := c.Read(ctx)
		require.NoError(t, err, "message %d", i)
		require.Equal(t, strconv.Itoa(i), string(got))
	}
	require.NoError(t, <-werr)
}

func testWSUpstreamClose(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	c := dialWS(t, tr.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("bye")))
	<-u.bye
	// The upstream dropped its connection without a close frame: the client's read must end
	// well before the tunnel's idle timeout (5m).
	readCtx, cancelRead := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelRead()
	_, _, err := c.Read(readCtx)
	require.Error(t, err)
	require.NoError(t, readCtx.Err(), "the client learnt of the upstream's close only from its own deadline")
	// The upstream's FIN reached the client as one; the tunnel ends when the client closes too.
	_ = c.CloseNow()
	waitStats(t, tr, ingress.Stats{})
}

func testWSClientClose(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	c := dialWS(t, tr.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("ping")))
	_, _, err := c.Read(ctx)
	require.NoError(t, err)
	require.NoError(t, c.CloseNow()) // a TCP close, no close frame
	select {
	case err := <-u.closed:
		require.Error(t, err, "the upstream saw its read fail when the client left")
	case <-time.After(2 * time.Second):
		t.Fatal("the client's close did not reach the upstream")
	}
	waitStats(t, tr, ingress.Stats{})
}

func testWSClientReset(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	resp, c, _ := rawHandshake(t, tr.Addr(), "GET",
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n")
	require.Equal(t, 101, resp.StatusCode)
	require.NoError(t, c.(*net.TCPConn).SetLinger(0))
	require.NoError(t, c.Close()) // an RST
	select {
	case err := <-u.closed:
		require.Error(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("the client's reset did not reach the upstream")
	}
	waitStats(t, tr, ingress.Stats{})
}

// testWSDrain: a drain lets an open tunnel run until its deadline, then closes both sides.
func testWSDrain(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	c := dialWS(t, tr.Addr())
	const deadline = 2 * time.Second // long enough for the echo below on a loaded machine
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- tr.Drain(ctx) }()
	// Still open during the drain: an echo goes through.
	wctx, wcancel := context.WithTimeout(context.Background(), eventWait)
	defer wcancel()
	require.NoError(t, c.Write(wctx, websocket.MessageText, []byte("still here")))
	_, got, err := c.Read(wctx)
	require.NoError(t, err)
	require.Equal(t, "still here", string(got))
	select {
	case err := <-drained:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(deadline + cutSlack):
		t.Fatal("the drain did not end at its deadline")
	}
	_, _, err = c.Read(wctx)
	require.Error(t, err)
	require.NoError(t, wctx.Err(), "the drain left the tunnel's client side open")
	select {
	case err := <-u.closed:
		require.Error(t, err)
	case <-time.After(eventWait):
		t.Fatal("the drain left the tunnel's upstream side open")
	}
}

// rawHandshake sends a handshake with the given extra head lines and returns the response
// head and the connection.
func rawHandshake(t *testing.T, addr, method, lines string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialClient(t, addr)
	_, err := io.WriteString(c, method+" /socket HTTP/1.1\r\nHost: gw\r\n"+lines+"\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	return resp, c, r
}

const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

func testWSTokenLists(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	resp, c, r := rawHandshake(t, tr.Addr(), "GET",
		"Connection: keep-alive, Upgrade\r\nUpgrade: WebSocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n")
	require.Equal(t, 101, resp.StatusCode)
	require.True(t, strings.EqualFold(resp.Header.Get("Upgrade"), "websocket"))
	h := sha1.Sum([]byte(wsKey + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	require.Equal(t, base64.StdEncoding.EncodeToString(h[:]), resp.Header.Get("Sec-WebSocket-Accept"))
	// One masked text frame "hi" (RFC 6455 §5.2), echoed unmasked.
	mask := [4]byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | 2, mask[0], mask[1], mask[2], mask[3], 'h' ^ mask[0], 'i' ^ mask[1]}
	_, err := c.Write(frame)
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(r, got)
	require.NoError(t, err)
	require.Equal(t, []byte{0x81, 2, 'h', 'i'}, got)
}

func testWSBadHandshakes(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	for _, tc := range []struct {
		name, method, lines string
		status              int
		code                string
	}{
		{"post", "POST", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: " + wsKey + "\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n", 400, "invalid_websocket_handshake"},
		{"short key", "GET", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: c2hvcnQ=\r\nSec-WebSocket-Version: 13\r\n", 400, "invalid_websocket_handshake"},
		{"long key", "GET", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAAAAAA\r\nSec-WebSocket-Version: 13\r\n", 400, "invalid_websocket_handshake"},
		{"long padded key", "GET", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAAAA==\r\nSec-WebSocket-Version: 13\r\n", 400, "invalid_websocket_handshake"},
		{"two keys", "GET", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: " + wsKey + "\r\nSec-WebSocket-Key: " + wsKey + "\r\nSec-WebSocket-Version: 13\r\n", 400, "invalid_websocket_handshake"},
		{"no key", "GET", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n", 400, "invalid_websocket_handshake"},
		{"version 8", "GET", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: " + wsKey + "\r\nSec-WebSocket-Version: 8\r\n", 426, "unsupported_websocket_version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, _ := rawHandshake(t, tr.Addr(), tc.method, tc.lines)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, string(body))
			require.Contains(t, string(body), `"code":"`+tc.code+`"`)
			if tc.status == 426 {
				require.Equal(t, "13", resp.Header.Get("Sec-WebSocket-Version"))
			}
		})
	}
	// Without Connection: Upgrade it is no handshake but an ordinary GET, whose Upgrade is
	// hop-by-hop: the upstream sees no upgrade asked and refuses it itself.
	resp, _, _ := rawHandshake(t, tr.Addr(), "GET", "Connection: keep-alive\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n")
	require.NotEqual(t, 101, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Upgrade"))
}

// An upstream whose 101 carries the wrong Sec-WebSocket-Accept did not answer this handshake:
// the client gets a 502, not a tunnel.
func testWSBadAccept(t *testing.T, ce contractEngine) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: bm90IHRoZSBhY2NlcHQ=\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
	}()
	tr := startWSTransport(t, ce, ln.Addr().String(), "")
	resp, _, _ := rawHandshake(t, tr.Addr(), "GET",
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 502, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"code":"upstream_protocol_error"`)
}

func testWSUpstreamRefusal(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), "")
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+tr.Addr()+"/refuse", nil)
	require.Error(t, err)
	require.NotNil(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func testWSIdle(t *testing.T, ce contractEngine) {
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), `websocket_idle_timeout = "300ms"`)
	start := time.Now() // before the tunnel exists, so its idle time is at most this long
	c := dialWS(t, tr.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx) // nothing is sent either way
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the idle tunnel was not closed")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "closed before the idle timeout")
	select {
	case err := <-u.closed:
		require.Error(t, err)
	case <-time.After(eventWait):
		t.Fatal("the idle timeout did not close the upstream side")
	}
}

// testWSIdleFromLastByte: a tunnel that goes quiet is closed websocket_idle_timeout after its
// last byte, not up to twice that: here the last byte moves just after the tunnel opened,
// when each direction's idle deadline was armed.
func testWSIdleFromLastByte(t *testing.T, ce contractEngine) {
	const idle = 2 * time.Second
	u := newWSUpstream(t)
	tr := startWSTransport(t, ce, u.ln.Addr().String(), `websocket_idle_timeout = "2s"`)
	c := dialWS(t, tr.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*idle+eventWait)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("hello")))
	_, got, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	last := time.Now() // the last byte either way: nothing moves from here on
	_, _, err = c.Read(ctx)
	quiet := time.Since(last)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the idle tunnel was not closed")
	require.Less(t, quiet, idle+idle/2, "closed %v after the last byte, for websocket_idle_timeout = %v", quiet, idle)
}

// testWSBackpressure: a side that reads nothing holds the other back, each way, with a
// bounded amount in between; once it reads, every byte arrives in order.
func testWSBackpressure(t *testing.T, ce contractEngine) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	upConn := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r := bufio.NewReader(c)
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:]))
		upConn <- c
	}()
	tr := startWSTransport(t, ce, ln.Addr().String(), "")
	resp, client, cr := rawHandshake(t, tr.Addr(), "GET",
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n")
	require.Equal(t, 101, resp.StatusCode)
	var up net.Conn
	select {
	case up = <-upConn:
	case <-time.After(eventWait):
		t.Fatal("no upstream connection")
	}
	t.Cleanup(func() { _ = up.Close() })

	// The bytes are opaque to the tunnel: a counter pattern shows order and loss.
	const bound = 64 << 20 // socket buffers on both hops and the tunnel's own buffer, with room
	fill := func(w net.Conn) int {
		chunk := make([]byte, 64<<10)
		total := 0
		for total < 4*bound {
			for i := range chunk {
				chunk[i] = byte((total + i) % 251)
			}
			_ = w.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := w.Write(chunk)
			total += n
			if err != nil {
				var ne net.Error
				require.True(t, errors.As(err, &ne) && ne.Timeout(), "write failed: %v", err)
				_ = w.SetWriteDeadline(time.Time{})
				return total
			}
		}
		t.Fatalf("wrote %d bytes to a peer that reads nothing: no backpressure", total)
		return 0
	}
	drain := func(r io.Reader, total int) {
		buf := make([]byte, 64<<10)
		got := 0
		for got < total {
			n, err := r.Read(buf)
			for i := 0; i < n; i++ {
				if buf[i] != byte((got+i)%251) {
					t.Fatalf("byte %d: got %d, want %d", got+i, buf[i], byte((got+i)%251))
				}
			}
			got += n
			require.NoError(t, err)
		}
	}
	require.NoError(t, client.SetReadDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, up.SetReadDeadline(time.Now().Add(30*time.Second)))

	// Upstream to client: the client does not read.
	sent := fill(up)
	t.Logf("upstream to a client that reads nothing: %d KiB in flight when the upstream blocked", sent>>10)
	require.Less(t, sent, bound)
	drain(cr, sent)

	// Client to upstream: the upstream does not read.
	sent = fill(client)
	t.Logf("client to an upstream that reads nothing: %d KiB in flight when the client blocked", sent>>10)
	require.Less(t, sent, bound)
	drain(up, sent)
}

// panicPoint is where a panickingConn panics: a bug in code a tunnel runs, on the goroutine
// that runs it there.
type panicPoint int

const (
	panicArming  panicPoint = iota // arming the deadline of the 101's write: no byte is out
	panicWriting                   // in the 101's write: some of it may be out
	panicEchoing                   // relaying to the client, on the tunnel's own goroutine
	panicReading                   // reading the client, on the goroutine relaying it upstream
)

// panickingConn is a tunnel's client connection that panics once, at its point.
type panickingConn struct {
	net.Conn
	at        panicPoint
	deadlines atomic.Int32
	writes    atomic.Int32
}

func (c *panickingConn) SetWriteDeadline(d time.Time) error {
	if c.deadlines.Add(1) == 1 && c.at == panicArming {
		panic("a bug in the tunnel")
	}
	return c.Conn.SetWriteDeadline(d)
}

func (c *panickingConn) Write(p []byte) (int, error) {
	switch n := c.writes.Add(1); {
	case n == 1 && c.at == panicWriting, n == 2 && c.at == panicEchoing:
		panic("a bug in the tunnel")
	}
	return c.Conn.Write(p)
}

func (c *panickingConn) Read(p []byte) (int, error) {
	if c.at == panicReading {
		panic("a bug in the tunnel")
	}
	return c.Conn.Read(p)
}

// panicLog records the stacks of the engines' "request handling panicked" lines.
type panicLog struct {
	mu     sync.Mutex
	stacks []string
}

func (l *panicLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *panicLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *panicLog) WithGroup(string) slog.Handler            { return l }

func (l *panicLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request handling panicked" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "stack" {
			l.mu.Lock()
			l.stacks = append(l.stacks, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *panicLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.stacks...)
}

// makeLogged is ce.make with the engine logging to h: an engine takes the default logger when
// it is made, which is h meanwhile.
func makeLogged(ce contractEngine, set ingress.Settings, res pipeline.Resolver, h slog.Handler) ingress.Transport {
	prev, w, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(h)) // which sends package log's output to h as well
	defer func() {
		slog.SetDefault(prev)
		log.SetOutput(w)
		log.SetFlags(flags)
	}()
	return ce.make(set, res)
}

// A panic in a WebSocket tunnel costs the tunnel, not the engine nor the process, on either of
// its goroutines: the engine logs it with the stack where it happened, the client and the
// upstream both see their connection end (a client that got no byte of the 101 gets the
// gateway's 500 first), the request gives back what it held (its completion runs, the
// backend's count of requests in flight returns to 0), the engine no longer counts the
// connection, a drain has no tunnel left to wait for, and other requests are served.
func TestPanicInATunnelGivesBackItsConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		at    panicPoint
		frame string // in the stack logged: where the panic happened
	}{
		{"building the 101", panicArming, "(*panickingConn).SetWriteDeadline"},
		{"writing the 101", panicWriting, "(*panickingConn).Write"},
		{"relaying to the client", panicEchoing, "(*panickingConn).Write"},
		{"relaying to the upstream", panicReading, "(*panickingConn).Read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(ingress.SetTunnelClientHook(func(c net.Conn) net.Conn { return &panickingConn{Conn: c, at: tc.at} }))
			for _, ce := range contractEngines {
				t.Run(ce.name, func(t *testing.T) { testWSPanic(t, ce, tc.at, tc.frame) })
			}
		})
	}
}

// testWSPanic opens a tunnel whose client connection panics at at.
func testWSPanic(t *testing.T, ce contractEngine, at panicPoint, frame string) {
	u := newWSUpstream(t)
	snap := newResolver(t, u.ln.Addr().String()).Load()
	var held atomic.Int64
	chain, err := pipeline.NewChain(holdStage{&held})
	require.NoError(t, err)
	var plog panicLog
	tr := makeLogged(ce, ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, withStages{snap, chain}, &plog)
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tr.Drain(ctx) // after a failure; a second Drain returns at once
	})
	before := tr.Stats()

	c := dialClient(t, tr.Addr())
	_, err = io.WriteString(c, "GET /socket HTTP/1.1\r\nHost: gw\r\n"+
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventWait)))
	r := bufio.NewReader(c)
	switch at {
	case panicArming:
		// No byte of the 101 went out: the client learns that the gateway failed.
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err, "no answer to a handshake whose tunnel failed before its 101")
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, 500, resp.StatusCode)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		assert.True(t, resp.Close, "the connection closes after the 500")
		assert.JSONEq(t, `{"error":{"message":"the gateway failed to handle the request","type":"server_error","param":null,"code":"internal_error"}}`, string(body))
	case panicEchoing, panicReading:
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		require.Equal(t, 101, resp.StatusCode)
		if at == panicEchoing {
			// One masked text frame (RFC 6455 §5.2): writing its echo to the client panics.
			mask := [4]byte{1, 2, 3, 4}
			_, err = c.Write([]byte{0x81, 0x80 | 2, mask[0], mask[1], mask[2], mask[3], 'h' ^ mask[0], 'i' ^ mask[1]})
			require.NoError(t, err)
		}
	}

	got, err := io.ReadAll(r)
	assert.NoError(t, err, "the client's side of the tunnel was left open")
	assert.Empty(t, got, "no byte after the write that panicked")
	select {
	case err := <-u.closed:
		assert.Error(t, err, "the upstream's read ends without a close frame")
	case <-time.After(eventWait):
		t.Error("the tunnel's upstream side was left open")
	}
	assert.Eventually(t, func() bool { return tr.Stats() == before }, eventWait, time.Millisecond, "the engine still counts the tunnel")
	waitReleased(t, snap, &held)
	stacks := plog.logged()
	if assert.Len(t, stacks, 1, "the panic is logged once") {
		assert.Contains(t, stacks[0], frame, "the stack logged is the one where the tunnel panicked")
	}

	// The engine serves on: an ordinary request gets the upstream's answer.
	rc := dialClient(t, tr.Addr())
	_, err = io.WriteString(rc, "GET /refuse HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, rc.SetReadDeadline(time.Now().Add(eventWait)))
	resp, err := http.ReadResponse(bufio.NewReader(rc), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = rc.Close()
	assert.Eventually(t, func() bool { return tr.Stats() == before }, eventWait, time.Millisecond, "the engine still counts a connection")

	ctx, cancel := context.WithTimeout(context.Background(), drainPrompt)
	defer cancel()
	assert.NoError(t, drainWithin(t, tr, ctx, drainPrompt+cutSlack), "the drain waited for a tunnel that had ended")
}
