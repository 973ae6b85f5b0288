package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// TestPathRulesCannotBeBypassed: a rule that keeps /v1/admin away from the upstream must hold
// for every spelling of that path an upstream may decode to it (/v1//admin, /v1/%61dmin,
// /v1%2fadmin), and the upstream gets the
// path the rule saw. Both engines.
func TestPathRulesCannotBeBypassed(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			paths := make(chan string, 16)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				paths <- strings.Fields(head)[1]
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				return true
			})
			_, addr := startGatewayRule(t, engine, up.addr(), "PathPrefix(`/v1`) && !PathPrefix(`/v1/admin`)", "")
			for _, c := range []struct {
				target   string
				status   int
				upstream string // the path the upstream must see; "" when nothing is forwarded
			}{
				{"/v1/models", 200, "/v1/models"},
				{"/v1//models?x=%2F", 200, "/v1/models?x=%2F"},
				{"/v1/%6dodels", 200, "/v1/models"},
				{"/v1/admin/x", 404, ""},
				{"/v1//admin/x", 404, ""},
				{"//v1/admin", 404, ""},
				{"/v1/%61dmin/x", 404, ""},
				{"/v1/%41dmin/x", 200, "/v1/Admin/x"}, // a different path: rules are case-sensitive
				{"/v1%2fadmin", 400, ""},
				{"/v1%5Cadmin", 400, ""},
				{"/v1\\admin", 400, ""},
				{"/v1/x/%2e%2e/admin", 400, ""},
			} {
				conn := dial(t, addr)
				send(t, conn, "GET "+c.target+" HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, bufio.NewReader(conn), false)
				_ = conn.Close()
				require.Equal(t, c.status, resp.status, "%s: %s", c.target, resp.body)
				if c.upstream != "" {
					select {
					case got := <-paths:
						require.Equal(t, c.upstream, got, c.target)
					case <-time.After(5 * time.Second):
						t.Fatalf("%s: the upstream saw nothing", c.target)
					}
				}
				if c.status >= 400 {
					require.Contains(t, string(resp.body), `"error"`, c.target)
				}
			}
			select {
			case got := <-paths:
				t.Fatalf("the upstream also saw %q", got)
			default:
			}
		})
	}
}

// TestEncodedSlashCanBeAllowed: with allow_encoded_slash an encoded '/' passes, still encoded,
// and rules see it encoded.
func TestEncodedSlashCanBeAllowed(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			paths := make(chan string, 4)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				paths <- strings.Fields(head)[1]
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				return true
			})
			_, addr := startGatewayRule(t, engine, up.addr(), "PathPrefix(`/v1/models/`)", "allow_encoded_slash = true")
			conn := dial(t, addr)
			defer conn.Close()
			send(t, conn, "GET /v1/models/org%2fmodel HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(conn), false)
			require.Equal(t, 200, resp.status, resp.body)
			require.Equal(t, "/v1/models/org%2Fmodel", <-paths)
		})
	}
}

// TestCodedRequestBodyIsRefused: a request body with a transfer coding besides chunked
// (gzip, chunked) is refused, not forwarded de-chunked with the coding dropped (the upstream
// would get gzip bytes labelled as a plain body). Both engines.
func TestCodedRequestBodyIsRefused(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			seen := make(chan string, 1)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				seen <- head
				return false
			})
			_, addr := startGateway(t, engine, up.addr(), "")
			for _, te := range []string{"gzip, chunked", "deflate, chunked"} {
				conn := dial(t, addr)
				send(t, conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: "+te+"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
				resp := readResponse(t, bufio.NewReader(conn), false)
				_ = conn.Close()
				require.True(t, resp.status == 400 || resp.status == 501, "%s: status %d", te, resp.status)
				require.Contains(t, string(resp.body), `"error"`, te)
			}
			select {
			case h := <-seen:
				t.Fatalf("the upstream got a request:\n%s", h)
			default:
			}
		})
	}
}

// TestBusyPortIsReportedAtTheAddressKey: a bind failure names the config position of the
// address, like every other config error.
func TestBusyPortIsReportedAtTheAddressKey(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	busy := ln.Addr().String()
	for _, engine := range engines {
		err := startBusy(t, busy, engine, "")
		require.True(t, strings.HasPrefix(err.Error(), "busy.toml:3:1: entrypoints.web.address: listen tcp "+busy+": "), "%s: %v", engine, err)
		require.Contains(t, err.Error(), "address already in use", engine)
	}
	// The admin listener's error is one line too, at its own key.
	err = startBusy(t, "127.0.0.1:0", "gnet", busy)
	require.True(t, strings.HasPrefix(err.Error(), "busy.toml:13:1: admin.address: listen tcp "+busy+": "), err.Error())
	require.NotContains(t, err.Error(), "\n")
}

// startBusy starts a gateway from busy.toml (entrypoint address on line 3, admin address on
// line 13) and returns the error Start must give.
func startBusy(t *testing.T, address, engine, admin string) error {
	t.Helper()
	cfg, err := config.LoadBytes("busy.toml", []byte(fmt.Sprintf(`
[entrypoints.web]
address = %q
engine = %s
[routers.all]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://127.0.0.1:1" }]

[admin]
address = %q
`, address, engineTOML(engine), admin)))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	err = g.Start()
	require.Error(t, err, engine)
	return err
}

// TestTunnelsAndAsteriskAreNotForwarded: CONNECT is refused (no tunnels), asterisk-form is
// only for OPTIONS, and OPTIONS * is answered by the gateway (none is forwarded). Both engines.
func TestTunnelsAndAsteriskAreNotForwarded(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			seen := make(chan string, 4)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				seen <- head
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
				return true
			})
			_, addr := startGateway(t, engine, up.addr(), "")
			for target, status := range map[string]int{"CONNECT example.com:443": 501, "CONNECT /v1/ok": 501, "GET *": 400} {
				conn := dial(t, addr)
				send(t, conn, target+" HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, bufio.NewReader(conn), false)
				_ = conn.Close()
				require.Equal(t, status, resp.status, "%s: %s", target, resp.body)
				require.Contains(t, string(resp.body), `"error"`, target)
			}
			// OPTIONS * asks about the server in general: the gateway answers it, whatever the
			// routes (none matches "*"), with or without Max-Forwards.
			for _, head := range []string{"OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n", "OPTIONS * HTTP/1.1\r\nHost: gw\r\nMax-Forwards: 5\r\n\r\n"} {
				conn := dial(t, addr)
				send(t, conn, head)
				resp := readResponse(t, bufio.NewReader(conn), false)
				_ = conn.Close()
				require.Equal(t, 200, resp.status, "%q: %s", head, resp.body)
				require.Equal(t, "0", resp.headers["content-length"], head)
				require.Empty(t, resp.body, head)
			}
			select {
			case h := <-seen:
				t.Fatalf("the upstream got:\n%s", h)
			default:
			}
		})
	}
}

// TestFasthttpParseErrorsSayWhy: the fasthttp engine's 400s name the cause (the gateway's
// parser's, as on the gnet engine), without fasthttp's buffer dump; a bare-LF head gets 400 at
// once, and only a head that never completes gets 408.
func TestFasthttpParseErrorsSayWhy(t *testing.T) {
	up := serveUpstream(t, echo)
	_, addr := startGateway(t, "fasthttp", up.addr(), `read_header_timeout = "300ms"`)
	for head, want := range map[string]string{
		"GET / HTTP/1.1\r\nHost x-secret\r\n\r\n":  "colon",
		"G@T / HTTP/1.1\r\nHost: gw\r\n\r\n":       "method",
		"GET / HTTP/1.1\r\nHost: gw\r\n\n":         "bare LF",
		"GET / HTTP/1.1\r\nHost: gw\r\nX-A: 1\r\n": "read_header_timeout",
	} {
		conn := dial(t, addr)
		send(t, conn, head)
		resp := readResponse(t, bufio.NewReader(conn), false)
		_ = conn.Close()
		body := string(resp.body)
		require.Contains(t, body, want, "%q", head)
		require.NotEqual(t, `malformed request`, body, "%q", head)
		if want == "read_header_timeout" {
			require.Equal(t, 408, resp.status, "%q", head)
		} else {
			require.Equal(t, 400, resp.status, "%q", head)
		}
	}
}
