package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// loopMiddlewares are middlewares of each kind for the loop tests: loop-safe ones (headers,
// strip-prefix, cors, ip-allow, body-limit, retry) and ones that are not (compress codes
// bodies, jwt checks a signature and parses JSON).
const loopMiddlewares = `
[middlewares.hdrs]
type = "headers"
request_set = { "X-Env" = "prod" }
request_remove = ["Cookie"]
response_set = { "X-Version" = "2" }
response_remove = ["Server"]

[middlewares.strip]
type = "strip-prefix"
prefixes = ["/api"]

[middlewares.cors]
type = "cors"
allow_origins = ["https://app.example"]

[middlewares.local]
type = "ip-allow"
source_range = ["127.0.0.0/8"]

[middlewares.small]
type = "body-limit"
max_bytes = 1024

[middlewares.zip]
type = "compress"

[middlewares.auth]
type = "jwt"
value = "0123456789abcdef0123456789abcdef"
`

// loopSeries is the loop-served count of entrypoint ep.
func loopSeries(ep string) string {
	return fmt.Sprintf(`sluice_loop_requests_total{entrypoint=%q}`, ep)
}

// A route whose middlewares are all loop-safe, with an access log, is served whole on the
// event loop with upstream_io = "loop" (counted in sluice_loop_requests_total), and its
// middlewares act on both sides exactly as on the worker path and on fasthttp: request
// fields set and removed, the prefix stripped, response fields rewritten (a response stage),
// a CORS preflight answered by the gateway, and one access log line per request.
func TestLoopSafeMiddlewaresServeOnTheLoop(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			heads := make(chan string, 8)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				heads <- head
				_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nServer: secret/1.0\r\nX-Version: old\r\n"+
					"Access-Control-Allow-Origin: https://evil.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				return err == nil
			})
			ep, router := "loopmw_"+engine, "loopmw_"+engine
			logPath := filepath.Join(t.TempDir(), "access.log")
			m := startMetricsGateway(t, engine, ep, "loopmw_plain_"+engine, up.addr(), fmt.Sprintf(`
[routers.%s]
rule = "PathPrefix(`+"`/api`"+`)"
service = "up"
middlewares = ["local", "hdrs", "cors", "small", "strip"]
%s
[log]
access_log = %q
`, router, loopMiddlewares, logPath))
			base := m.value(t, loopSeries(ep))

			c := dial(t, m.addr)
			r := bufio.NewReader(c)
			const n = 3
			for i := 0; i < n; i++ {
				send(t, c, "GET /api/v1/models?x=1 HTTP/1.1\r\nHost: gw\r\nCookie: a=b\r\nX-Env: dev\r\nOrigin: https://app.example\r\n\r\n")
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.Equal(t, "{}", string(resp.body))
				require.Equal(t, "2", resp.headers["x-version"], "the response field is replaced")
				require.NotContains(t, resp.headers, "server", "the response field is removed")
				require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"], "the gateway's CORS, not the upstream's")
				require.Equal(t, "Origin", resp.headers["vary"])
				head := <-heads
				require.True(t, strings.HasPrefix(head, "GET /v1/models?x=1 HTTP/1.1\r\n"), "the prefix is stripped: %q", head)
				require.Contains(t, head, "X-Env: prod\r\n")
				require.NotContains(t, head, "Cookie")
				require.NotContains(t, head, "dev")
			}
			// A preflight is answered by the cors stage, on the loop too.
			send(t, c, "OPTIONS /api/v1/models HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
			pre := readResponse(t, r, false)
			require.Equal(t, 204, pre.status)
			require.Equal(t, "https://app.example", pre.headers["access-control-allow-origin"])
			require.Equal(t, "2", pre.headers["x-version"], "the headers middleware's response fields are on the gateway's answers too")
			// A body over the route's bound is refused by body-limit.
			send(t, c, "PUT /api/v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 2000\r\n\r\n"+strings.Repeat("x", 2000))
			require.Equal(t, 413, readResponse(t, r, false).status)

			lines := accessLines(t, logPath, n+2)
			for i, l := range lines {
				require.Equal(t, router, l["router"], "line %d", i)
			}
			for _, l := range lines[:n] {
				require.EqualValues(t, 200, l["status"])
				require.Equal(t, "/api/v1/models", l["path"], "the client's path, before strip-prefix")
			}
			require.EqualValues(t, 204, lines[n]["status"])
			require.EqualValues(t, 413, lines[n+1]["status"])
			require.Len(t, heads, 0, "the preflight and the refused body never reached the upstream")

			want := base
			if engine == "gnet" {
				want += n + 2
			}
			require.Equal(t, want, m.value(t, loopSeries(ep)), "requests served on the event loop")
		})
	}
}

// A route with a stage that is not loop-safe runs on a worker with upstream_io = "loop",
// whatever loop-safe stages it has besides: compress codes response bodies (CPU) and jwt
// checks a signature. The requests are answered as on the other engines.
func TestLoopUnsafeStageKeepsRequestOnWorker(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		body := strings.Repeat(`{"a":1}`, 400)
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			ep := "loopunsafe_" + engine
			m := startMetricsGateway(t, engine, ep, "loopunsafe_plain_"+engine, up.addr(), fmt.Sprintf(`
[routers.loopunsafe_zip_%[1]s]
rule = "PathPrefix(`+"`/zip`"+`)"
service = "up"
middlewares = ["hdrs", "zip"]

[routers.loopunsafe_jwt_%[1]s]
rule = "PathPrefix(`+"`/jwt`"+`)"
service = "up"
middlewares = ["hdrs", "auth"]
%[2]s`, engine, loopMiddlewares))
			base := m.value(t, loopSeries(ep))
			c := dial(t, m.addr)
			r := bufio.NewReader(c)

			send(t, c, "GET /zip HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: gzip\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "gzip", resp.headers["content-encoding"])
			require.Equal(t, "2", resp.headers["x-version"])

			send(t, c, "GET /jwt HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 401, resp.status)
			require.Equal(t, "2", resp.headers["x-version"])

			// The plain route beside them runs on the loop: the entrypoint does serve there.
			send(t, c, "GET /v1/x HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: gzip\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.NotContains(t, resp.headers, "content-encoding")

			want := base
			if engine == "gnet" {
				want++ // the plain route's request only
			}
			require.Equal(t, want, m.value(t, loopSeries(ep)))
		})
	}
}

// The retry middleware runs on the loop: its backoff is a timer there, not a sleep. An
// attempt the upstream answers 503 is sent again after the backoff and the client gets the
// second attempt's answer; a client that leaves during a backoff ends its request there,
// with no further attempt.
func TestLoopRetryWaitsBackoffWithoutBlocking(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var arrivals, xs atomic.Int32
			first := make(chan struct{}, 4)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				arrivals.Add(1)
				slow := strings.HasPrefix(head, "GET /slow")
				status := "200 OK"
				if slow || (strings.HasPrefix(head, "GET /x") && xs.Add(1) == 1) {
					status = "503 Service Unavailable"
				}
				_, err := fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 2\r\n\r\n{}", status)
				if slow {
					first <- struct{}{}
				}
				return err == nil
			})
			ep, router := "loopretry_"+engine, "loopretry_"+engine
			m := startMetricsGateway(t, engine, ep, "loopretry_plain_"+engine, up.addr(), fmt.Sprintf(`
[routers.%s]
rule = "PathPrefix(`+"`/x`"+`)"
service = "up"
middlewares = ["again"]

[middlewares.again]
type = "retry"
attempts = 2
initial_backoff = "50ms"
max_backoff = "50ms"

[routers.%[1]s_slow]
rule = "PathPrefix(`+"`/slow`"+`)"
service = "up"
middlewares = ["later"]

[middlewares.later]
type = "retry"
attempts = 2
initial_backoff = "1m"
max_backoff = "1m"
`, router))
			base := m.value(t, loopSeries(ep))

			// The first attempt is refused with 503: the client gets the second's 200.
			c := dial(t, m.addr)
			send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
			require.EqualValues(t, 2, arrivals.Load(), "the request was sent again after its backoff")

			// A minute's backoff: the client leaves during it, and the request ends there.
			canceled := fmt.Sprintf(`sluice_client_canceled_total{router="%s_slow",service="up"}`, router)
			before := m.value(t, canceled)
			c2 := dial(t, m.addr)
			send(t, c2, "GET /slow HTTP/1.1\r\nHost: gw\r\n\r\n")
			<-first
			require.NoError(t, c2.Close())
			m.waitValue(t, canceled, before+1)
			require.EqualValues(t, 3, arrivals.Load(), "no attempt after the client left")

			want := base
			if engine == "gnet" {
				want += 2
			}
			require.Equal(t, want, m.value(t, loopSeries(ep)))
		})
	}
}
