package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
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
