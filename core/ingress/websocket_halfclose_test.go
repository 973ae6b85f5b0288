package ingress_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// A TCP half-close through a WebSocket tunnel, on every engine, relayed as HAProxy and Envoy
// relay it: the side that ends its sending first (a FIN) still gets what the other side sends
// until that one ends too. The half-open tunnel still ends when its other side resets, when a
// drain runs out of time, and at the idle timeout. Every wait is for an event with a deadline.

func TestWebSocketHalfClose(t *testing.T) {
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			t.Run("ClientHalfCloseGetsUpstreamsLastBytes", func(t *testing.T) { testHalfCloseByClient(t, ce) })
			t.Run("UpstreamHalfCloseStillGetsClientsBytes", func(t *testing.T) { testHalfCloseByUpstream(t, ce) })
			t.Run("ClientResetAfterHalfCloseEndsTunnel", func(t *testing.T) { testResetAfterHalfClose(t, ce, true) })
			t.Run("UpstreamResetAfterHalfCloseEndsTunnel", func(t *testing.T) { testResetAfterHalfClose(t, ce, false) })
			t.Run("DrainCutsHalfClosedTunnel", func(t *testing.T) { testHalfClosedDrain(t, ce) })
			t.Run("HalfClosedTunnelIdlesOut", func(t *testing.T) { testHalfClosedIdle(t, ce) })
		})
	}
}

// rawWSUpstream accepts one connection on loopback, answers its WebSocket handshake with a
// valid 101, and hands the connection to serve, with a reader that holds what followed the
// handshake. serve runs on its own goroutine (it reports by channels); the connection is
// closed when it returns.
func rawWSUpstream(t *testing.T, serve func(c *net.TCPConn, r *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(c)
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		if _, err := fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:])); err != nil {
			return
		}
		serve(c.(*net.TCPConn), r)
	}()
	return ln.Addr().String()
}

// upgradeThrough opens a tunnel through the engine at addr and returns the client's
// connection, with a reader that holds what followed the 101.
func upgradeThrough(t *testing.T, addr string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	resp, c, r := rawHandshake(t, addr, "GET",
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n")
	require.Equal(t, 101, resp.StatusCode)
	return c.(*net.TCPConn), r
}

// readAllResult is what an io.ReadAll on a connection returned.
type readAllResult struct {
	got string
	err error
}

// receive waits for a result on ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(eventWait):
		t.Fatal(what)
		var zero T
		return zero
	}
}

// The client sends a message and its FIN; the upstream reads until that FIN reaches it, then
// answers and closes: the client gets the answer, then the upstream's FIN.
func testHalfCloseByClient(t *testing.T, ce contractEngine) {
	upGot := make(chan readAllResult, 1)
	addr := rawWSUpstream(t, func(c *net.TCPConn, r *bufio.Reader) {
		b, err := io.ReadAll(r)
		upGot <- readAllResult{string(b), err}
		if err == nil {
			_, _ = io.WriteString(c, "last words after "+string(b))
		}
	})
	tr := startWSTransport(t, ce, addr, "")
	c, r := upgradeThrough(t, tr.Addr())
	_, err := io.WriteString(c, "hello")
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	up := receive(t, upGot, "the client's FIN did not reach the upstream")
	require.NoError(t, up.err)
	require.Equal(t, "hello", up.got)
	rest, err := io.ReadAll(r)
	require.NoError(t, err, "the client's read ends with the upstream's FIN, not a reset")
	require.Equal(t, "last words after hello", string(rest), "what the upstream sent after the client's FIN")
	waitStats(t, tr, ingress.Stats{})
}

// The upstream sends a message and its FIN; the client reads until that FIN, then sends and
// closes: the upstream gets what the client sent, then the client's FIN.
func testHalfCloseByUpstream(t *testing.T, ce contractEngine) {
	upGot := make(chan readAllResult, 1)
	addr := rawWSUpstream(t, func(c *net.TCPConn, r *bufio.Reader) {
		if _, err := io.WriteString(c, "server done"); err != nil {
			upGot <- readAllResult{"", err}
			return
		}
		if err := c.CloseWrite(); err != nil {
			upGot <- readAllResult{"", err}
			return
		}
		b, err := io.ReadAll(r)
		upGot <- readAllResult{string(b), err}
	})
	tr := startWSTransport(t, ce, addr, "")
	c, r := upgradeThrough(t, tr.Addr())
	rest, err := io.ReadAll(r)
	require.NoError(t, err, "the client's read ends with the upstream's FIN")
	require.Equal(t, "server done", string(rest))
	_, err = io.WriteString(c, "client still talking")
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	up := receive(t, upGot, "the client's bytes and FIN did not reach the upstream")
	require.NoError(t, up.err, "the upstream's read ends with the client's FIN, not a reset")
	require.Equal(t, "client still talking", up.got, "what the client sent after the upstream's FIN")
	waitStats(t, tr, ingress.Stats{})
}

// One side sends its FIN, which reaches the other, and then resets its connection while the
// other side is silent: the tunnel ends at once (the engine counts it no more, and its other
// side is closed), not at the idle timeout (5m).
func testResetAfterHalfClose(t *testing.T, ce contractEngine, clientFirst bool) {
	upConn := make(chan *net.TCPConn, 1)
	finSeen := make(chan error, 1)
	reset := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	addr := rawWSUpstream(t, func(c *net.TCPConn, r *bufio.Reader) {
		upConn <- c
		if clientFirst {
			_, err := io.ReadAll(r)
			finSeen <- err
			<-release // silent, and open
			return
		}
		if err := c.CloseWrite(); err != nil {
			return
		}
		select {
		case <-reset:
			_ = c.SetLinger(0)
			_ = c.Close() // a reset
		case <-release:
		}
	})
	tr := startWSTransport(t, ce, addr, "")
	c, r := upgradeThrough(t, tr.Addr())
	up := receive(t, upConn, "no upstream connection")
	// other is the side that stays: once the tunnel ended, a write of it fails (the first may
	// be taken; the reset that answers it fails a later one).
	other := net.Conn(c)
	if clientFirst {
		other = up
		require.NoError(t, c.CloseWrite())
		require.NoError(t, receive(t, finSeen, "the client's FIN did not reach the upstream"))
		require.NoError(t, c.SetLinger(0))
		require.NoError(t, c.Close()) // a reset
	} else {
		_, err := io.ReadAll(r)
		require.NoError(t, err, "the upstream's FIN did not reach the client")
		close(reset)
	}
	waitStats(t, tr, ingress.Stats{})
	require.Eventually(t, func() bool {
		_, err := other.Write([]byte("x"))
		return err != nil
	}, eventWait, 5*time.Millisecond, "the tunnel's other side was left open")
}

// A drain lets a half-closed tunnel relay until its deadline, then cuts it.
func testHalfClosedDrain(t *testing.T, ce contractEngine) {
	finSeen := make(chan error, 1)
	speak := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	addr := rawWSUpstream(t, func(c *net.TCPConn, r *bufio.Reader) {
		_, err := io.ReadAll(r)
		finSeen <- err
		<-speak
		_, _ = io.WriteString(c, "during the drain")
		<-release
	})
	tr := startWSTransport(t, ce, addr, "")
	c, r := upgradeThrough(t, tr.Addr())
	require.NoError(t, c.CloseWrite())
	require.NoError(t, receive(t, finSeen, "the client's FIN did not reach the upstream"))

	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- tr.Drain(ctx) }()
	close(speak)
	got := make([]byte, len("during the drain"))
	_, err := io.ReadFull(r, got)
	require.NoError(t, err, "the half-closed tunnel stopped relaying when the drain began")
	require.Equal(t, "during the drain", string(got))
	select {
	case err := <-drained:
		require.ErrorIs(t, err, context.DeadlineExceeded, "the drain did not wait for the half-closed tunnel")
	case <-time.After(deadline + cutSlack):
		t.Fatal("the drain did not end at its deadline")
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventWait)))
	_, err = r.ReadByte()
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the drain left the half-closed tunnel open")
	waitStats(t, tr, ingress.Stats{})
}

// A half-closed tunnel that carries nothing more ends at websocket_idle_timeout.
func testHalfClosedIdle(t *testing.T, ce contractEngine) {
	finSeen := make(chan error, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	addr := rawWSUpstream(t, func(c *net.TCPConn, r *bufio.Reader) {
		_, err := io.ReadAll(r)
		finSeen <- err
		<-release // silent, and open
	})
	tr := startWSTransport(t, ce, addr, `websocket_idle_timeout = "300ms"`)
	start := time.Now() // every byte of the tunnel moves after this: the idle clock starts later
	c, r := upgradeThrough(t, tr.Addr())
	require.NoError(t, c.CloseWrite())
	require.NoError(t, receive(t, finSeen, "the client's FIN did not reach the upstream"))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventWait)))
	_, err := r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle half-closed tunnel was not closed")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "closed before the idle timeout")
	waitStats(t, tr, ingress.Stats{})
}
