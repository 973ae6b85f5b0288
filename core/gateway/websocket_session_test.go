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
	"syscall"
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

// A request that asks for an upgrade (Connection: upgrade) and is answered without a 101 ends
// its connection on every engine, whoever answered: the gateway's handshake check (400, 426),
// a middleware (ip-allow's 403), the upstream (a 403 refusal, or a 200 to an h2c upgrade it
// ignores). The answer says Connection: close and nothing sent after the request on that
// connection is served: a proxy in front that took the upgrade for granted relays what its
// client sends next as the tunnel's bytes, unchecked, and those must not reach the routes as
// requests of their own.
func TestRefusedUpgradeEndsTheConnection(t *testing.T) {
	const handshake = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			smuggled := make(chan string, 16)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				path := strings.Fields(head)[1]
				if strings.HasPrefix(path, "/smuggled") {
					smuggled <- path
				}
				if strings.HasPrefix(path, "/refuse") {
					_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope")
					return true
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return true
			})
			_, addr := startGateway(t, engine, up.addr(), `
[routers.private]
rule = "PathPrefix(`+"`/private`"+`)"
service = "up"
middlewares = ["lan"]
[middlewares.lan]
type = "ip-allow"
source_range = ["10.0.0.0/8"]`)
			for _, tc := range []struct {
				name, path, fields string
				status             int
			}{
				{"version 8", "/socket", handshake + "Sec-WebSocket-Version: 8\r\n", 426},
				{"no key", "/socket", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n", 400},
				{"ip-allow", "/private/socket", handshake + "Sec-WebSocket-Version: 13\r\n", 403},
				{"upstream refuses", "/refuse", handshake + "Sec-WebSocket-Version: 13\r\n", 403},
				{"h2c ignored", "/h2c", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n", 200},
			} {
				t.Run(tc.name, func(t *testing.T) {
					c := dial(t, addr)
					// The next request follows at once, as a proxy that relays it as tunnel bytes does.
					send(t, c, "GET "+tc.path+" HTTP/1.1\r\nHost: gw\r\n"+tc.fields+"\r\n"+
						"GET /smuggled/"+strings.ReplaceAll(tc.name, " ", "-")+" HTTP/1.1\r\nHost: gw\r\n\r\n")
					require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
					r := bufio.NewReader(c)
					resp := readResponse(t, r, false)
					assert.Equal(t, tc.status, resp.status)
					assert.Equal(t, "close", resp.headers["connection"], "the answer to a refused upgrade says the connection ends")
					rest, err := io.ReadAll(r)
					assert.NoError(t, err, "the connection was left open after a refused upgrade")
					assert.Empty(t, string(rest), "what followed a refused upgrade was served")
				})
			}
			select {
			case p := <-smuggled:
				t.Errorf("the upstream got %s, sent after a refused upgrade", p)
			default:
			}
		})
	}
}

// A client that reads slowly, less than the tunnel's buffer per websocket_idle_timeout, still
// moves bytes: the tunnel is not idle, and stays open while the client keeps reading what
// an upstream that sends faster sends.
func TestWebSocketSlowReaderIsNotIdle(t *testing.T) {
	const idle = time.Second
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := floodingWSUpstream(t, func(c *net.TCPConn) { flood(c) })
			// Small buffers on the way to the client, so that the client's reads are what
			// frees room for the tunnel's writes.
			addr := runGateway(t, "test.toml", gatewayTOML(engine, "PathPrefix(`/`)", "send_buffer_bytes = 4096",
				fmt.Sprintf("servers = [{ url = \"http://%s\" }]\nwebsocket_idle_timeout = %q", up, idle))).Addr("web")
			d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
				if err != nil {
					return err
				}
				return serr
			}}
			nc, err := d.Dial("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = nc.Close() })
			c := nc.(*net.TCPConn)
			send(t, c, "GET /socket HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
			r := bufio.NewReader(c)
			resp, err := http.ReadResponse(r, nil)
			require.NoError(t, err)
			require.Equal(t, 101, resp.StatusCode)
			// 1 KiB every 100 ms: 10 KiB/s, under the 16 KiB a tunnel's write holds.
			tick := time.NewTicker(idle / 10)
			defer tick.Stop()
			buf := make([]byte, 1<<10)
			end := time.Now().Add(4 * idle)
			got := 0
			for time.Now().Before(end) {
				<-tick.C
				require.NoError(t, c.SetReadDeadline(time.Now().Add(idle)))
				n, err := io.ReadFull(r, buf)
				got += n
				require.NoError(t, err, "the tunnel of a client reading slowly was closed after %d bytes", got)
			}
		})
	}
}
