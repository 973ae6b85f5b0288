package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// deadUpstream returns an address that refuses connections while tb runs, for upstreams that
// refuse them: no listener, of the test or of the machine, can have its port
// (testenv.RefusingAddr).
func deadUpstream(tb testing.TB) string { return testenv.RefusingAddr(tb) }

// engines are the two ingress engines, gnet with each place for its upstream I/O (the event
// loop, its default, or worker goroutines: "gnet-worker"); every gateway behaviour test runs
// on each.
var engines = []string{"gnet", "gnet-worker", "fasthttp"}

// engineTOML is the entrypoint's engine key for one of engines, quoted, with the upstream_io
// line "gnet-worker" needs.
func engineTOML(engine string) string {
	if engine == "gnet-worker" {
		return `"gnet"` + "\nupstream_io = \"worker\""
	}
	return strconv.Quote(engine)
}

// startGateway runs a gateway with one entrypoint of the given engine proxying every path to
// upstream ("host:port"); extra is appended to the entrypoint's table. It returns the
// entrypoint address.
func startGateway(t testing.TB, engine, upstream, extra string) (*gateway.Gateway, string) {
	t.Helper()
	return startGatewayRule(t, engine, upstream, "PathPrefix(`/`)", extra)
}

// startGatewayRule is startGateway with one router of the given rule.
func startGatewayRule(t testing.TB, engine, upstream, rule, extra string) (*gateway.Gateway, string) {
	t.Helper()
	return startGatewayTOML(t, engine, rule, extra, fmt.Sprintf(`servers = [{ url = "http://%s" }]`, upstream))
}

// startGatewayServers is startGateway whose service "up" has the given load_balancer lines.
func startGatewayServers(t testing.TB, engine, lb string) (*gateway.Gateway, string) {
	t.Helper()
	return startGatewayTOML(t, engine, "PathPrefix(`/`)", "", lb)
}

func startGatewayTOML(t testing.TB, engine, rule, extra, lb string) (*gateway.Gateway, string) {
	t.Helper()
	g := runGateway(t, "test.toml", gatewayTOML(engine, rule, extra, lb))
	return g, g.Addr("web")
}

// startGatewayLogged is startGateway whose gateway writes its log, in the text format, to the
// returned buffer.
func startGatewayLogged(t testing.TB, engine, upstream, extra string) (string, *syncBuffer) {
	t.Helper()
	logs := new(syncBuffer)
	g := runGatewayLog(t, "test.toml", gatewayTOML(engine, "PathPrefix(`/`)", extra, fmt.Sprintf(`servers = [{ url = "http://%s" }]`, upstream)),
		slog.New(slog.NewTextHandler(logs, nil)))
	return g.Addr("web"), logs
}

// gatewayTOML is the configuration of startGatewayTOML.
func gatewayTOML(engine, rule, extra, lb string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
%s

[routers.api]
rule = %q
service = "up"

[services.up.load_balancer]
%s

[admin]
address = ""
`, engineTOML(engine), extra, rule, lb)
}

// runGateway runs a gateway on the configuration text toml (named name in errors), drained
// when the test ends.
func runGateway(t testing.TB, name, toml string) *gateway.Gateway {
	t.Helper()
	return runGatewayLog(t, name, toml, nil)
}

// runGatewayLog is runGateway logging to log (nil: the default logger).
func runGatewayLog(t testing.TB, name, toml string, log *slog.Logger) *gateway.Gateway {
	t.Helper()
	cfg, err := config.LoadBytes(name, []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", log)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	return g
}

// upstream is a scripted raw-TCP HTTP/1.1 server: each accepted connection's requests are
// handed to the script, which writes whatever bytes the test needs.
type upstream struct {
	ln     net.Listener
	closed chan struct{} // one value per connection the gateway closed (EOF seen by the server)
	stop   chan struct{} // closed at cleanup: scripts that hold a connection return
	wg     sync.WaitGroup
}

// serveUpstream starts an upstream whose script is called once per request, with the request
// head and body read; the script returns false to stop serving that connection.
func serveUpstream(t testing.TB, script func(c net.Conn, r *bufio.Reader, head string, body []byte) bool) *upstream {
	return serveUpstreamU(t, func(_ *upstream, c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		return script(c, r, head, body)
	})
}

// serveUpstreamU is serveUpstream whose script also gets the upstream.
func serveUpstreamU(t testing.TB, script func(u *upstream, c net.Conn, r *bufio.Reader, head string, body []byte) bool) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serveUpstreamOn(t, ln, script)
}

// serveUpstreamOn is serveUpstreamU serving the connections ln accepts (a TLS listener, say).
func serveUpstreamOn(t testing.TB, ln net.Listener, script func(u *upstream, c net.Conn, r *bufio.Reader, head string, body []byte) bool) *upstream {
	t.Helper()
	u := &upstream{ln: ln, closed: make(chan struct{}, 64), stop: make(chan struct{})}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					head, body, err := readRequest(r)
					if err != nil {
						select {
						case u.closed <- struct{}{}:
						case <-u.stop: // nobody counts closes any more
						}
						return
					}
					if !script(u, c, r, head, body) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { close(u.stop); _ = ln.Close(); u.wg.Wait() })
	return u
}

func (u *upstream) addr() string { return u.ln.Addr().String() }

// readRequest reads one request head and its Content-Length body.
func readRequest(r *bufio.Reader) (string, []byte, error) {
	var head strings.Builder
	n := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	var body []byte
	if n > 0 {
		body = make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return "", nil, err
		}
	}
	return head.String(), body, nil
}

// watchClose reports on u.closed when the gateway closes the connection behind r; the
// script must not read r itself afterwards.
func (u *upstream) watchClose(r *bufio.Reader) {
	go func() {
		_, _ = io.Copy(io.Discard, r)
		u.closed <- struct{}{}
	}()
}

// waitConnClosed waits for the upstream to see one connection closed by the gateway.
func (u *upstream) waitConnClosed(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-u.closed:
	case <-time.After(within):
		t.Fatalf("the upstream did not see its connection closed within %v", within)
	}
}

// echo is a script answering every request with its body (or "{}" when empty) as JSON.
func echo(c net.Conn, _ *bufio.Reader, _ string, body []byte) bool {
	if len(body) == 0 {
		body = []byte("{}")
	}
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return err == nil
}

// dial opens a raw client connection to addr.
func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// readResponse reads one response: status, header fields, and a body delimited by
// Content-Length, chunked coding or close (decoded).
type response struct {
	status  int
	proto   string
	reason  string            // the status line's reason phrase
	headers map[string]string // last value of each field, by lower-case name
	fields  [][2]string       // every field line in order: name as received, value
	body    []byte
	chunked bool
}

// all returns the values of every field named name (any case), in order.
func (r *response) all(name string) []string {
	var vs []string
	for _, f := range r.fields {
		if strings.EqualFold(f[0], name) {
			vs = append(vs, f[1])
		}
	}
	return vs
}

func readResponse(t testing.TB, r *bufio.Reader, head bool) *response {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err, "status line")
	parts := strings.SplitN(strings.TrimSpace(line), " ", 3)
	require.GreaterOrEqual(t, len(parts), 2, "status line %q", line)
	st, err := strconv.Atoi(parts[1])
	require.NoError(t, err)
	resp := &response{status: st, proto: parts[0], headers: map[string]string{}}
	if len(parts) == 3 {
		resp.reason = parts[2]
	}
	for {
		l, err := r.ReadString('\n')
		require.NoError(t, err)
		if l == "\r\n" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		resp.headers[strings.ToLower(k)] = strings.TrimSpace(v)
		resp.fields = append(resp.fields, [2]string{k, strings.TrimSpace(v)})
	}
	if head || st == 204 || st == 304 || st < 200 {
		return resp
	}
	switch {
	case strings.EqualFold(resp.headers["transfer-encoding"], "chunked"):
		resp.chunked = true
		for {
			szLine, err := r.ReadString('\n')
			require.NoError(t, err)
			sz, err := strconv.ParseInt(strings.TrimSpace(szLine), 16, 64)
			require.NoError(t, err, "chunk size %q", szLine)
			if sz == 0 {
				_, err = r.ReadString('\n')
				require.NoError(t, err)
				break
			}
			b := make([]byte, sz+2)
			_, err = io.ReadFull(r, b)
			require.NoError(t, err)
			resp.body = append(resp.body, b[:sz]...)
		}
	case resp.headers["content-length"] != "":
		n, _ := strconv.Atoi(resp.headers["content-length"])
		resp.body = make([]byte, n)
		_, err := io.ReadFull(r, resp.body)
		require.NoError(t, err)
	default:
		resp.body, _ = io.ReadAll(r)
	}
	return resp
}

func send(t testing.TB, c net.Conn, s string) {
	t.Helper()
	_, err := io.WriteString(c, s)
	require.NoError(t, err)
}
