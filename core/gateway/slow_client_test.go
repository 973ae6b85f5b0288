package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitEOF waits until the gateway closes c (a read returns EOF or reset) within d.
func waitEOF(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v", d)
	}
}

func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), `idle_timeout = "300ms"`)
			c := dial(t, addr)
			send(t, c, "GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
			waitEOF(t, c, 3*time.Second)
		})
	}
}

// bigUpstream streams an endless chunked body and counts the bytes its writes handed to the
// kernel; a write that cannot progress for 300 ms ends the script (the pipe is full).
func bigUpstream(t *testing.T, written *atomic.Int64, full chan<- struct{}) *upstream {
	chunk := strings.Repeat("x", 32<<10)
	frame := "8000\r\n" + chunk + "\r\n"
	return serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		u.watchClose(r)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for {
			_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := io.WriteString(c, frame)
			written.Add(int64(n))
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					select {
					case full <- struct{}{}:
					default:
					}
					<-u.stop
				}
				return false
			}
		}
	})
}

// A client that does not read stops the relay: the gateway stops reading the upstream instead
// of buffering the whole response (memory per stream is bounded).
func TestSlowReaderStopsUpstreamReads(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var written atomic.Int64
			full := make(chan struct{}, 1)
			up := bigUpstream(t, &written, full)
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\n")
			select {
			case <-full: // the upstream cannot write any more: backpressure reached it
			case <-time.After(20 * time.Second):
				t.Fatalf("the upstream was never blocked; it wrote %d bytes", written.Load())
			}
			// What is in flight is bounded by socket buffers and the gateway's high-water mark,
			// far below what an unbounded relay would have taken in 300 ms on loopback.
			t.Logf("the upstream wrote %d KiB before blocking", written.Load()>>10)
			require.Less(t, written.Load(), int64(64<<20), "bytes the upstream wrote to a client that reads nothing")
		})
	}
}

// A client that reads nothing for client_stall_timeout is closed, and so is its upstream; the
// connection counts once as shed for client_stall.
func TestStalledClientIsClosedWithItsUpstream(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var written atomic.Int64
			full := make(chan struct{}, 1)
			up := bigUpstream(t, &written, full)
			_, addr := startGateway(t, engine, up.addr(), `client_stall_timeout = "500ms"`)
			before := shedCount(t, "client_stall")
			c := dial(t, addr)
			send(t, c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\n")
			up.waitConnClosed(t, 10*time.Second)
			waitShed(t, "client_stall", before+1)
		})
	}
}

// pacedUpstream streams an endless chunked body at a token stream's pace, 1 KiB every 20 ms
// (50 KiB/s), counting the bytes its writes handed to the kernel, until the gateway closes
// the connection.
func pacedUpstream(t *testing.T, written *atomic.Int64) *upstream {
	frame := "400\r\n" + strings.Repeat("t", 1<<10) + "\r\n"
	return serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		u.watchClose(r)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-u.stop:
				return false
			case <-tick.C:
			}
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			n, err := io.WriteString(c, frame)
			written.Add(int64(n))
			if err != nil {
				return false
			}
		}
	})
}

// dialSmallWindow connects to addr with a 4 KiB receive buffer, so that a client that reads
// slowly or not at all fills the gateway's send buffer within a second of a paced stream.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startPacedStream starts a gateway on engine with client_stall_timeout = 1s and a 16 KiB
// send buffer in front of pacedUpstream, and a request for its stream from a client with a
// small window. It returns the upstream, its written byte count, the client connection and the
// client_stall shed count from before the request.
func startPacedStream(t *testing.T, engine string) (*upstream, *atomic.Int64, net.Conn, float64) {
	t.Helper()
	written := new(atomic.Int64)
	up := pacedUpstream(t, written)
	_, addr := startGateway(t, engine, up.addr(), `client_stall_timeout = "1s"
send_buffer_bytes = 16384`)
	before := shedCount(t, "client_stall")
	c := dialSmallWindow(t, addr)
	send(t, c, "GET /v1/stream HTTP/1.1\r\nHost: gw\r\n\r\n")
	return up, written, c, before
}

// client_stall_timeout counts from when the client's socket stops taking the response (the
// kernel's send buffer is full), not from when the gateway has buffered its own limit of a
// slow stream: a client that reads nothing of a token-paced stream is cut one timeout after
// its socket filled, long before the gateway would have held 256 KiB for it.
func TestStallClockStartsWhenTheSocketIsFull(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up, written, c, before := startPacedStream(t, engine)
			up.waitConnClosed(t, 30*time.Second)
			waitShed(t, "client_stall", before+1)
			// The socket buffers fill in about a second at this pace and the cut comes a
			// second later: some tens of KiB, against the 256 KiB the gateway holds for a
			// slow client before it stops reading the upstream.
			t.Logf("the upstream wrote %d KiB before the cut", written.Load()>>10)
			require.Less(t, written.Load(), int64(200<<10), "bytes streamed to a client that reads nothing before its cut")
			// The cut is a reset: a close would leave the gateway's socket holding the unsent
			// response for as long as the client's window stays shut.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.Copy(io.Discard, c)
			require.ErrorIs(t, err, syscall.ECONNRESET, "how the client's stream ended")
		})
	}
}

// A client that reads slower than the stream arrives, but reads, is not a stalled one: its
// socket stays full, and the gnet engine's clock starts again each time the client's TCP
// acknowledges more. (The fasthttp engine times each write to the socket instead, and the
// kernel wakes a blocked writer only once a third of the send buffer is free, which a reader
// this slow frees in longer than this test's timeout: docs/config.md says so.)
func TestSlowReadingClientIsNotCut(t *testing.T) {
	for _, engine := range []string{"gnet", "gnet-worker"} {
		t.Run(engine, func(t *testing.T) {
			_, _, c, before := startPacedStream(t, engine)
			// 1 KiB every 100 ms, a fifth of the stream's pace, for four stall timeouts. The
			// client's TCP acknowledges in bursts (a window update once enough of its 4 KiB
			// buffer is free), some hundreds of ms apart: well within the timeout.
			buf := make([]byte, 1<<10)
			got := 0
			for i := 0; i < 40; i++ {
				time.Sleep(100 * time.Millisecond) // the reader's pace is the behaviour under test
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := io.ReadFull(c, buf)
				got += n
				require.NoError(t, err, "the gateway cut a client that reads, after %d bytes", got)
			}
			require.Equal(t, before, shedCount(t, "client_stall"))
		})
	}
}

// client_stall_timeout is the client's to use up, not the upstream's: a stream that pauses
// longer than it (a model thinking) and then goes on reaches a client that reads everything.
func TestUpstreamPauseIsNotAClientStall(t *testing.T) {
	up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		io.WriteString(c, "d\r\ndata: first\n\n\r\n")
		select {
		case <-u.stop:
			return false
		case <-time.After(1500 * time.Millisecond): // the pause is the behaviour under test
		}
		io.WriteString(c, "c\r\ndata: last\n\n\r\n0\r\n\r\n")
		return true
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), `client_stall_timeout = "500ms"`)
			before := shedCount(t, "client_stall")
			c := dial(t, addr)
			send(t, c, "GET /v1/stream HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "data: first\n\ndata: last\n\n", string(resp.body))
			require.Equal(t, before, shedCount(t, "client_stall"))
		})
	}
}

// SIGTERM's drain: new connections are refused, the request in flight completes.
func TestDrainFinishesInFlightStream(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int)
			up := sseUpstream(t, next)
			g, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			r := bufio.NewReader(c)
			next <- 0
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, line, "200")
			drained := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				drained <- g.Drain(ctx)
			}()
			// The stream in flight keeps flowing to its end.
			next <- 1
			next <- -1
			rest, err := io.ReadAll(r)
			require.NoError(t, err)
			require.Contains(t, string(rest), `data: {"i":1}`)
			require.Contains(t, string(rest), "data: [DONE]")
			close(next)
			select {
			case err := <-drained:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("drain did not return after the last request finished")
			}
			_, err = net.DialTimeout("tcp", addr, time.Second)
			require.Error(t, err, "the listener must be closed after the drain")
		})
	}
}
