package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// Out of descriptors, the gateway cannot open a connection to a healthy upstream. That is
// the gateway's shortage, not the upstream's failure: the client gets 503 with Retry-After
// and a code that says so, and neither passive health nor a circuit breaker (here one that
// opens after a single failure, for a day) holds it against the backend, so the next request
// after descriptors are back is served. Every engine and way of connecting.
func TestOutOfDescriptorsDoesNotCountAgainstTheUpstream(t *testing.T) {
	up := closingUpstream(t)
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	for name, keys := range map[string]string{
		"gnet":              "",
		"gnet-loop-connect": `upstream_connect = "loop"`,
		"gnet-worker":       `upstream_io = "worker"`,
		"fasthttp":          `engine = "fasthttp"`,
	} {
		t.Run(name, func(t *testing.T) {
			port := testenv.FreePort(t)
			cfg := filepath.Join(t.TempDir(), "sluice.toml")
			require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
%s
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["breaker"]
[middlewares.breaker]
type = "circuit-breaker"
failure_threshold = 1
cooldown_secs = 86400
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = ""
`, port, keys, up)), 0o644))
			cmd := exec.Command("sh", "-c", `ulimit -n 48 && exec "$0" serve --config "$1"`, bin, cfg)
			p := testenv.StartProcessCmd(t, cmd)
			p.WaitOutput(t, "entrypoint listening", 10*time.Second)
			addr := fmt.Sprintf("127.0.0.1:%d", port)

			client := dialGateway(t, addr)
			require.Equal(t, "HTTP/1.1 200 OK", roundTrip(t, client, "/before").status)

			// Connections the gateway accepts until it has no descriptor left.
			held := holdUntilAcceptFails(t, p, addr)
			r := roundTrip(t, client, "/starved")
			require.Equal(t, "HTTP/1.1 503 Service Unavailable", r.status, r.body)
			require.Equal(t, "1", r.headers["retry-after"])
			require.Contains(t, r.body, `"code":"gateway_resources_exhausted"`)
			require.Contains(t, r.body, `"type":"server_error"`)

			for _, c := range held {
				_ = c.Close()
			}
			// The gateway accepts and closes the released connections; until it has, a
			// request may still find it short.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				conn, err := net.Dial("tcp", addr)
				if !assert.NoError(c, err) {
					return
				}
				defer conn.Close()
				r, err = roundTripErr(&gatewayConn{c: conn, r: bufio.NewReader(conn)}, "/after")
				assert.NoError(c, err)
				assert.NotContains(c, r.body, "gateway_resources_exhausted")
			}, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, "HTTP/1.1 200 OK", r.status, "the backend was held to blame: %s", r.body)
			require.NotContains(t, p.Output(), "circuit breaker opened")
			// The log goes out through a writer goroutine, so the line may follow the answer.
			require.Eventually(t, func() bool {
				return strings.Contains(p.Output(), "cannot connect upstream: the gateway is short of resources")
			}, 5*time.Second, 10*time.Millisecond, "the log does not say the gateway was short of resources: %s", p.Output())
			require.NotContains(t, p.Output(), "upstream failed", "the log blames the upstream")
		})
	}
}

// closingUpstream serves 200 "ok" on loopback and closes each connection after its response,
// so that every request through the gateway needs a new upstream connection.
func closingUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	srv.SetKeepAlivesEnabled(false)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// gatewayConn is a client connection with its reader.
type gatewayConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialGateway(t *testing.T, addr string) *gatewayConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &gatewayConn{c: c, r: bufio.NewReader(c)}
}

type response struct {
	status  string
	headers map[string]string // lower-case names
	body    string
}

// roundTrip sends GET path on g and reads a response with Content-Length.
func roundTrip(t *testing.T, g *gatewayConn, path string) response {
	t.Helper()
	r, err := roundTripErr(g, path)
	require.NoError(t, err)
	return r
}

// roundTripErr is roundTrip for a caller that is not the test's goroutine.
func roundTripErr(g *gatewayConn, path string) (response, error) {
	if err := g.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return response{}, err
	}
	if _, err := fmt.Fprintf(g.c, "GET %s HTTP/1.1\r\nHost: gw\r\n\r\n", path); err != nil {
		return response{}, err
	}
	return readResponse(g)
}

// readResponse reads a response with Content-Length from g.
func readResponse(g *gatewayConn) (response, error) {
	resp, err := http.ReadResponse(g.r, nil)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	h := map[string]string{}
	for k, v := range resp.Header {
		h[strings.ToLower(k)] = v[0]
	}
	return response{status: resp.Proto + " " + resp.Status, headers: h, body: string(body)}, nil
}

// The model router's workers are polled for their observations. Out of descriptors the polls
// fail, the observations go stale, and a request then finds no worker to take it: it is
// answered for the gateway's shortage (503 gateway_resources_exhausted), not as if every
// worker were gone, and the log says why.
func TestOutOfDescriptorsModelRouterSaysTheGatewayIsShort(t *testing.T) {
	simPort, port := testenv.FreePort(t), testenv.FreePort(t)
	sim := testenv.StartProcessCmd(t, exec.Command(testenv.BuildBinary(t, "./cmd/llmsim"),
		"--listen", fmt.Sprintf("127.0.0.1:%d", simPort), "--ttft", "0s", "--itl", "1ms", "--tokens", "4"))
	sim.WaitOutput(t, "listening", 10*time.Second)
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.llm.load_balancer]
servers = [{ url = "http://127.0.0.1:%d" }]
[services.llm.workers]
observe_interval = "50ms"
observation_ttl = "2s"
[models.chat]
[models.chat.targets.t1]
service = "llm"
upstream_model = "llmsim"
[admin]
address = ""
`, port, simPort)), 0o644))
	cmd := exec.Command("sh", "-c", `ulimit -n 48 && exec "$0" serve --config "$1"`, testenv.BuildBinary(t, "./cmd/sluice"), cfg)
	p := testenv.StartProcessCmd(t, cmd)
	p.WaitOutput(t, "entrypoint listening", 10*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	const body = `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`
	chat := func(g *gatewayConn) (response, error) {
		if err := g.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return response{}, err
		}
		if _, err := fmt.Fprintf(g.c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return response{}, err
		}
		return readResponse(g)
	}
	client := dialGateway(t, addr)
	var r response
	var err error
	require.EventuallyWithT(t, func(c *assert.CollectT) { // once the worker is observed
		r, err = chat(client)
		assert.NoError(c, err)
		assert.Equal(c, "HTTP/1.1 200 OK", r.status, r.body)
	}, 10*time.Second, 20*time.Millisecond)

	// The worker stops: the polls' keep-alive connection ends, so that each poll must open
	// one, and its observation goes stale. Then the held connections take every descriptor.
	require.NoError(t, sim.Stop(5*time.Second))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err = chat(client)
		assert.NoError(c, err)
		assert.Contains(c, r.body, `"code":"no_backend"`)
	}, 10*time.Second, 20*time.Millisecond)
	held := holdUntilAcceptFails(t, p, addr)
	p.WaitOutput(t, "cannot observe the worker: the gateway is short of resources", 10*time.Second)
	r, err = chat(client)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 503 Service Unavailable", r.status)
	require.Contains(t, r.body, `"code":"gateway_resources_exhausted"`)
	require.Equal(t, "1", r.headers["retry-after"])
	for _, c := range held {
		_ = c.Close()
	}
}
