package gateway_test

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// floodingWSUpstream accepts WebSocket handshakes on loopback, answers each with a valid 101
// and hands the connection to serve on its own goroutine.
func floodingWSUpstream(t *testing.T, serve func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				if _, err := fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
					base64.StdEncoding.EncodeToString(h[:])); err != nil {
					return
				}
				serve(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

// flood writes to c until a write fails.
func flood(c net.Conn) {
	chunk := []byte(strings.Repeat("\x82\x7e\x40\x00", 1) + strings.Repeat("x", 16<<10))
	for {
		if _, err := c.Write(chunk); err != nil {
			return
		}
	}
}

// resetAfterReading reads n bytes from r and then resets c (an abortive close: RST).
func resetAfterReading(c *net.TCPConn, r io.Reader, n int64) {
	_, _ = io.CopyN(io.Discard, r, n)
	_ = c.SetLinger(0)
	_ = c.Close()
}

// A WebSocket tunnel that ends because one side reset its connection while the other was
// sending is blamed on the side that reset, whichever direction saw the failure first: a
// client that leaves mid-flow is a cancellation (no upstream error, nothing held against the
// backend by passive health), and an upstream that dies mid-flow is an upstream failure of
// reason "stream", not a client that left.
func TestWebSocketResetIsBlamedOnTheSideThatReset(t *testing.T) {
	const sessions = 6 // more than passive health's default consecutive_failures
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			t.Run("ClientResetsWhileUpstreamSends", func(t *testing.T) {
				up := floodingWSUpstream(t, func(c *net.TCPConn) { flood(c) })
				logs := wsBlameSessions(t, engine, up, sessions, func(c *net.TCPConn, r *bufio.Reader) {
					resetAfterReading(c, r, 256<<10)
				})
				for _, l := range logs {
					assert.Equal(t, float64(101), l["status"])
					assert.Equal(t, true, l["canceled"], "a client that reset is a client that left: %v", l)
					assert.Equal(t, "", l["upstream_error"], "the upstream did not fail: %v", l)
				}
			})
			t.Run("UpstreamResetsWhileClientSends", func(t *testing.T) {
				up := floodingWSUpstream(t, func(c *net.TCPConn) { resetAfterReading(c, c, 256<<10) })
				logs := wsBlameSessions(t, engine, up, sessions, func(c *net.TCPConn, _ *bufio.Reader) { flood(c) })
				for _, l := range logs {
					assert.Equal(t, float64(101), l["status"])
					assert.Equal(t, false, l["canceled"], "the client did not leave: %v", l)
					assert.Equal(t, "stream", l["upstream_error"], "an upstream that reset failed: %v", l)
				}
			})
		})
	}
}

// wsBlameSessions runs n WebSocket sessions one after the other through a gateway of engine
// in front of the upstream up, each driven by client once its 101 came, and returns their
// access log lines; a handshake after them must still get its 101 (the backend was not
// ejected).
func wsBlameSessions(t *testing.T, engine, up string, n int, client func(c *net.TCPConn, r *bufio.Reader)) []map[string]any {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "access.log")
	addr := runGateway(t, "test.toml", gatewayTOML(engine, "PathPrefix(`/`)", "", fmt.Sprintf(`servers = [{ url = "http://%s" }]`, up))+
		fmt.Sprintf("\n[log]\naccess_log = %q\n", logPath)).Addr("web")
	handshake := func() (*net.TCPConn, *bufio.Reader, int) {
		c := dial(t, addr).(*net.TCPConn)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		send(t, c, "GET /socket HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		return c, r, resp.StatusCode
	}
	for i := 0; i < n; i++ {
		c, r, status := handshake()
		require.Equal(t, 101, status, "session %d", i)
		client(c, r)
		_ = c.Close()
		accessLines(t, logPath, i+1) // one session at a time
	}
	lines := accessLines(t, logPath, n)
	c, _, status := handshake()
	_ = c.Close()
	assert.Equal(t, 101, status, "the backend was ejected for what its clients did")
	return lines
}

// A WebSocket session's access log line counts the bytes each way: bytes_out what the upstream
// sent through the tunnel, bytes_in what the client sent (the handshake has no body), as
// sluice_response_bytes_total and sluice_websocket_client_bytes_total count them.
func TestWebSocketAccessLogCountsBytesBothWays(t *testing.T) {
	const fromClient, fromUpstream = 70000, 50000
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := floodingWSUpstream(t, func(c *net.TCPConn) {
				_, _ = io.CopyN(io.Discard, c, fromClient)
				_, _ = c.Write([]byte(strings.Repeat("u", fromUpstream)))
			})
			logs := wsBlameSessions(t, engine, up, 1, func(c *net.TCPConn, r *bufio.Reader) {
				_, err := c.Write([]byte(strings.Repeat("c", fromClient)))
				require.NoError(t, err)
				n, err := io.Copy(io.Discard, r) // until the upstream's close reaches the client
				require.NoError(t, err)
				require.Equal(t, int64(fromUpstream), n)
			})
			assert.Equal(t, float64(fromUpstream), logs[0]["bytes_out"])
			assert.Equal(t, float64(fromClient), logs[0]["bytes_in"], "%v", logs[0])
		})
	}
}
