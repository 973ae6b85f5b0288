package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The HTTP policy middlewares on a real gateway, on both engines: a browser app's preflight
// and request, a path prefix stripped, header edits both ways, a body bound and an address
// allow-list, all against a real upstream on loopback.
func TestPolicyMiddlewaresOnBothEngines(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var heads = make(chan string, 16)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				heads <- head
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nServer: upstream/1.0\r\nAccess-Control-Allow-Origin: *\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				return err == nil
			})
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[routers.api]
rule = "PathPrefix(`+"`/api`"+`)"
service = "up"
middlewares = ["cors", "edit", "strip", "small"]
[routers.internal]
rule = "PathPrefix(`+"`/internal`"+`)"
service = "up"
middlewares = ["office"]

[middlewares.cors]
type = "cors"
allow_origins = ["https://app.example"]
expose_headers = ["X-Request-Id"]
[middlewares.edit]
type = "headers"
request_set = { "X-Env" = "prod" }
request_remove = ["Cookie"]
response_remove = ["Server"]
[middlewares.strip]
type = "strip-prefix"
prefixes = ["/api"]
[middlewares.small]
type = "body-limit"
max_bytes = 16
[middlewares.office]
type = "ip-allow"
source_range = ["192.0.2.0/24"]
`, engineTOML(engine), up.addr()))
			addr := strings.TrimPrefix(base, "http://")
			c := dial(t, addr)
			r := bufio.NewReader(c)

			send(t, c, "OPTIONS /api/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 204, resp.status)
			require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"])
			require.Equal(t, "GET, HEAD, POST", resp.headers["access-control-allow-methods"])

			send(t, c, "POST /api/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nCookie: s=1\r\nContent-Length: 2\r\n\r\n{}")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, []string{"https://app.example"}, resp.all("Access-Control-Allow-Origin"), "the upstream's * is replaced")
			require.Empty(t, resp.all("Server"))
			head := <-heads
			require.True(t, strings.HasPrefix(head, "POST /v1/chat/completions HTTP/1.1\r\n"), head)
			require.Contains(t, head, "X-Env: prod\r\n")
			require.Contains(t, head, "X-Forwarded-Prefix: /api\r\n")
			require.NotContains(t, head, "Cookie")

			send(t, c, "POST /api/x HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nContent-Length: 17\r\n\r\n01234567890123456")
			resp = readResponse(t, r, false)
			require.Equal(t, 413, resp.status)
			require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"], "a script can read the refusal")
			require.Equal(t, "close", resp.headers["connection"], "refused from its head, the body unread: the connection ends")
			c = dial(t, addr)
			r = bufio.NewReader(c)

			send(t, c, "GET /internal/x HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 403, resp.status, "127.0.0.1 is not in 192.0.2.0/24")
			require.Contains(t, string(resp.body), `"code":"ip_not_allowed"`)
			require.Empty(t, heads, "only the one request passed")
		})
	}
}

// A body over its route's body-limit is refused from what the head says, before it is read
// (RFC 9110 §10.1.1), by the route (its cors middleware still marks the answer): a
// Content-Length over the bound gets 413 at once, with no 100 Continue to a client waiting
// for one and without waiting for the body; a chunked body gets 413 as soon as it has come
// past the bound. Nothing of it reaches the upstream, and the connection ends after the
// answer. A body within the bound, announced with Expect, gets 100 Continue and goes through,
// as does a longer one to a route of the same entrypoint without a bound.
func TestBodyLimitRefusesFromTheHead(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var reached atomic.Int32
			up := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
				reached.Add(1)
				return echo(c, r, head, body)
			})
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["cors", "small"]
[routers.uploads]
rule = "PathPrefix(`+"`/uploads`"+`)"
service = "up"
[middlewares.cors]
type = "cors"
allow_origins = ["https://app.example"]
[middlewares.small]
type = "body-limit"
max_bytes = 1024
`, engineTOML(engine), up.addr()))
			addr := strings.TrimPrefix(base, "http://")
			const head = "POST /v1/x HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\n"
			chunk := fmt.Sprintf("%x\r\n%s\r\n", 1100, strings.Repeat("x", 1100))
			refused := func(t *testing.T, c net.Conn, r *bufio.Reader, what string) {
				t.Helper()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp := readResponse(t, r, false)
				require.Equal(t, 413, resp.status, "%s: answered at once, without its body: %s", what, resp.body)
				require.Contains(t, string(resp.body), `"code":"body_too_large"`, what)
				require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"], "%s: the route answers", what)
				require.Equal(t, "close", resp.headers["connection"], what)
				_, err := r.ReadByte()
				require.ErrorIs(t, err, io.EOF, "%s: the connection ends", what)
			}
			for _, c := range []struct{ what, send string }{
				{"Content-Length with Expect", head + "Expect: 100-continue\r\nContent-Length: 4096\r\n\r\n"},
				{"Content-Length, body begun", head + "Content-Length: 4096\r\n\r\n" + strings.Repeat("x", 10)},
				{"Content-Length, head alone", head + "Content-Length: 4096\r\n\r\n"},
				{"chunked, past the bound", head + "Transfer-Encoding: chunked\r\n\r\n" + chunk},
			} {
				conn := dial(t, addr)
				send(t, conn, c.send)
				refused(t, conn, bufio.NewReader(conn), c.what)
			}

			// Chunked with Expect: no length to judge by, so 100 Continue, then 413 once the
			// chunks pass the bound.
			conn := dial(t, addr)
			r := bufio.NewReader(conn)
			send(t, conn, head+"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
			require.Equal(t, 100, readResponse(t, r, false).status)
			send(t, conn, chunk)
			refused(t, conn, r, "chunked with Expect")

			conn = dial(t, addr)
			r = bufio.NewReader(conn)
			send(t, conn, head+"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
			require.Equal(t, 100, readResponse(t, r, false).status)
			send(t, conn, "{}")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "{}", string(resp.body))

			// Another route of the entrypoint, without a bound, takes the body the first refused.
			big := strings.Repeat("x", 4096)
			send(t, conn, "POST /uploads HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 4096\r\n\r\n")
			require.Equal(t, 100, readResponse(t, r, false).status)
			send(t, conn, big)
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, big, string(resp.body))
			require.EqualValues(t, 2, reached.Load(), "only the bodies within their route's bound reached the upstream")

			// A later request of a kept-alive connection is refused from its head alone too.
			send(t, conn, head+"Content-Length: 4096\r\n\r\n")
			refused(t, conn, r, "Content-Length, head alone, after a request")
			require.EqualValues(t, 2, reached.Load())
		})
	}
}

// The cors middleware's Vary: Origin is not added again to an upstream response that already
// varies by Origin (on any line, in any case, within a list) or by everything (Vary: *).
func TestCORSVaryOnceWithTheUpstreams(t *testing.T) {
	varies := map[string]string{
		"/plain": "",
		"/lower": "Vary: origin\r\n",
		"/list":  "Vary: Accept-Encoding, ORIGIN\r\n",
		"/lines": "Vary: Accept\r\nVary: Origin\r\n",
		"/star":  "Vary: *\r\n",
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				_, rest, _ := strings.Cut(head, " ")
				path, _, _ := strings.Cut(rest, " ")
				_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"+varies[path]+"Content-Length: 2\r\n\r\n{}")
				return err == nil
			})
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["cors"]
[middlewares.cors]
type = "cors"
allow_origins = ["https://app.example"]
`, engineTOML(engine), up.addr()))
			c := dial(t, strings.TrimPrefix(base, "http://"))
			r := bufio.NewReader(c)
			for path, vary := range varies {
				send(t, c, "GET "+path+" HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\n\r\n")
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"])
				n := 0
				for _, m := range varyMembers(resp) {
					if m == "origin" {
						n++
					}
				}
				want := 1
				if vary == "Vary: *\r\n" {
					want = 0
				}
				require.Equal(t, want, n, "%s: Vary %q", path, resp.all("Vary"))
			}
			// The gateway's own answer, a preflight, varies by Origin once.
			send(t, c, "OPTIONS /x HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 204, resp.status)
			require.Equal(t, []string{"Origin"}, resp.all("Vary"))
		})
	}
}
