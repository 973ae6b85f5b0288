package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// healthServer is an upstream whose /health and whose other paths answer statuses the test
// sets, counting each.
type healthServer struct {
	url            string
	health, status atomic.Int32
	probes, hits   atomic.Int32
	probed         chan struct{}
	hang           atomic.Bool // probes get no answer until they give up
}

func startHealthServer(t *testing.T) *healthServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &healthServer{url: "http://" + ln.Addr().String(), probed: make(chan struct{}, 4096)}
	h.health.Store(200)
	h.status.Store(200)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			h.probes.Add(1)
			select {
			case h.probed <- struct{}{}:
			default:
			}
			if h.hang.Load() {
				<-r.Context().Done() // the probe's timeout
				return
			}
			w.WriteHeader(int(h.health.Load()))
			return
		}
		h.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(h.status.Load()))
		_, _ = io.WriteString(w, `{}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

func healthConfig(engine, lb string, servers ...*healthServer) string {
	list := ""
	for _, s := range servers {
		list += fmt.Sprintf("{ url = %q }, ", s.url)
	}
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [%s]
%s
`, engineTOML(engine), list, lb)
}

func startHealthGateway(t *testing.T, path, toml string) (*gateway.Gateway, string) {
	t.Helper()
	if path != "" {
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	}
	cfg, err := config.LoadBytes("health.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	return g, "http://" + g.Addr("web")
}

// A backend answering 500s is ejected by passive health after 5 in a row and gets no request
// while ejected; once it answers 200 again it is readmitted after its ejection.
func TestPassiveHealthEjectsAndReadmits(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			bad, good := startHealthServer(t), startHealthServer(t)
			bad.status.Store(500)
			// An ejection that outlasts the twenty requests below on a loaded machine.
			_, base := startHealthGateway(t, "", healthConfig(engine, `
[services.up.load_balancer.passive_health]
ejection = "5s"
error_rate = 0
`, bad, good))
			for bad.hits.Load() < 5 {
				get(t, base+"/v1/models")
			}
			require.Equal(t, int32(5), bad.hits.Load(), "round-robin: the 5th failure ejects")
			for range 20 {
				require.Equal(t, 200, get(t, base+"/v1/models").StatusCode, "only the good backend answers")
			}
			require.Equal(t, int32(5), bad.hits.Load(), "an ejected backend gets no request")

			bad.status.Store(200)
			var err error // a request without an answer ends the wait, failing the test
			require.Eventually(t, func() bool {
				_, err = tryGet(base + "/v1/models")
				return err != nil || bad.hits.Load() >= 8
			}, 20*time.Second, 5*time.Millisecond, "readmitted after the ejection")
			require.NoError(t, err)
		})
	}
}

// A backend whose /health fails is taken out of rotation by active checks: once it is, no
// request reaches it; when it passes again it is back.
func TestActiveHealthTakesADeadBackendOut(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			sick, good := startHealthServer(t), startHealthServer(t)
			sick.health.Store(503)
			g, base := startHealthGateway(t, "", healthConfig(engine, `
health_check = { path = "/health", interval = "300ms", timeout = "250ms", unhealthy_threshold = 1, healthy_threshold = 1 }
`, sick, good))
			lb := g.Snapshot().Services["up"].Backends[0].LB
			require.Eventually(t, lb.Down, 10*time.Second, time.Millisecond)
			before := sick.hits.Load()
			for range 20 {
				require.Equal(t, 200, get(t, base+"/").StatusCode)
			}
			require.Equal(t, before, sick.hits.Load(), "a backend down by its checks gets no request")

			sick.health.Store(200)
			require.Eventually(t, func() bool { return !lb.Down() }, 10*time.Second, time.Millisecond)
			for range 4 {
				get(t, base+"/")
			}
			require.Greater(t, sick.hits.Load(), before)
		})
	}
}

// The warning for a backend its checks take out names the server as the configuration writes
// it, and so does the probe's error, which would otherwise show the URL probed: a value read
// from the environment (a private host, a port) is never shown, in the log as elsewhere.
func TestActiveHealthLogNeverShowsEnvValues(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close() // every probe fails: closed before an answer
		}
	}()
	addr := ln.Addr().String()
	t.Setenv("SLUICE_TEST_HC_ADDR", addr)
	line := unhealthyLogLine(t, "http://${SLUICE_TEST_HC_ADDR}")
	require.NotContains(t, line, addr, "the log shows the value of SLUICE_TEST_HC_ADDR")
	require.Contains(t, line, `backend=http://${SLUICE_TEST_HC_ADDR}`)
	require.Contains(t, line, `${SLUICE_TEST_HC_ADDR}/health`, "the probe's error names the URL as written")
}

// A server whose whole URL is read from the environment (url = "${NAME}", as docs/config.md
// writes it) is not shown in the warning either, in part or whole: the probe's error names the
// address it dialled, the value's host and port, which is shown as the variable too.
func TestActiveHealthLogNeverShowsAnEnvURLsAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // every probe fails: its connection is refused
	t.Setenv("SLUICE_TEST_HC_URL", "http://"+addr)
	line := unhealthyLogLine(t, "${SLUICE_TEST_HC_URL}")
	require.NotContains(t, line, addr, "the log shows the address SLUICE_TEST_HC_URL names")
	require.Contains(t, line, `backend=${SLUICE_TEST_HC_URL}`)
	require.Contains(t, line, `${SLUICE_TEST_HC_URL}/health`, "the probe's error names the URL as written")
}

// Active checks follow a reload: a server the new configuration removed is probed no more
// once the reload returns, and one it added is probed.
func TestActiveChecksFollowAReload(t *testing.T) {
	a, b, c := startHealthServer(t), startHealthServer(t), startHealthServer(t)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	const hc = `health_check = { path = "/health", interval = "100ms", timeout = "50ms" }`
	g, _ := startHealthGateway(t, path, healthConfig("gnet", hc, a, b))
	<-a.probed
	<-b.probed

	require.NoError(t, os.WriteFile(path, []byte(healthConfig("gnet", hc, b, c)), 0o644))
	require.NoError(t, g.Reload())
	<-c.probed
	for len(b.probed) > 0 {
		<-b.probed // probes from before the reload
	}
	// Counted once the new checks run: a probe of a sent before the reload may still land.
	n := a.probes.Load()
	for range 5 {
		<-b.probed
	}
	require.Equal(t, n, a.probes.Load(), "no probe to a removed server after the reload")
	require.False(t, g.Snapshot().Services["up"].Backends[1].LB.Down())
}

// A reload keeps an unhealthy server out of rotation wherever the new configuration lists it
// and however its URL is written: its judged state goes with the server (its service, scheme
// and address), not with its place in the list. Its probes hang meanwhile, so a server judged
// afresh would be in rotation until the first of them gave up.
func TestActiveJudgementFollowsTheServerAcrossAReload(t *testing.T) {
	a, sick, b, c := startHealthServer(t), startHealthServer(t), startHealthServer(t), startHealthServer(t)
	sick.health.Store(503)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	const hc = `health_check = { path = "/health", interval = "3s", timeout = "2s", unhealthy_threshold = 1, healthy_threshold = 1 }`
	g, _ := startHealthGateway(t, path, healthConfig("gnet", hc, a, sick, b))
	require.Eventually(t, g.Snapshot().Services["up"].Backends[1].LB.Down, 10*time.Second, time.Millisecond)
	sick.hang.Store(true)

	slashed := &healthServer{url: sick.url + "/"}
	for _, step := range []struct {
		name    string
		servers []*healthServer
		at      int
	}{
		{"a server before it removed", []*healthServer{sick, b}, 0},
		{"its URL written with a slash", []*healthServer{slashed, b}, 0},
		{"servers inserted before it", []*healthServer{b, c, sick}, 2},
	} {
		require.NoError(t, os.WriteFile(path, []byte(healthConfig("gnet", hc, step.servers...)), 0o644))
		require.NoError(t, g.Reload(), step.name)
		backends := g.Snapshot().Services["up"].Backends
		require.True(t, backends[step.at].LB.Down(), "%s: still out of rotation", step.name)
		for i, be := range backends {
			if i != step.at {
				require.False(t, be.LB.Down(), "%s: %s", step.name, be.URL)
			}
		}
	}
	sick.hang.Store(false)
	sick.health.Store(200)
	require.Eventually(t, func() bool { return !g.Snapshot().Services["up"].Backends[2].LB.Down() }, 10*time.Second, time.Millisecond,
		"the checks go on judging it")
}

// A stream that fails after its 200 counts as a failure of its backend: five cut streams in a
// row eject it, and the streams that follow go to the other backend and arrive whole.
func TestPassiveHealthCountsStreamsCutAfterTheirHead(t *testing.T) {
	var cut atomic.Int32
	stream := func(c net.Conn, fail bool) bool {
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return false
		}
		ev := "data: {\"i\":0}\n\n"
		if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
			return false
		}
		if fail {
			cut.Add(1)
			return false // the connection closes mid-stream
		}
		_, err := io.WriteString(c, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
		return err == nil
	}
	bad := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool { return stream(c, true) })
	good := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool { return stream(c, false) })
	_, base := startHealthGateway(t, "", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }, { url = "http://%s" }]
passive_health = { error_rate = 0 }
`, bad.addr(), good.addr()))
	read := func() string {
		resp, err := http.Get(base + "/v1/chat/completions")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for cut.Load() < 5 {
		read()
	}
	for range 10 {
		require.Contains(t, read(), "data: [DONE]", "only the healthy backend serves")
	}
	require.Equal(t, int32(5), cut.Load(), "the ejected backend got no stream")
}

// Probes of an https server verify it as requests do, with the service's CA file.
func TestActiveHealthChecksOverUpstreamTLS(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })}
	go func() { _ = srv.ServeTLS(ln, certFile, keyFile) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + ln.Addr().String()
	g, _ := startHealthGateway(t, "", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = %q }]
tls = { ca_file = %q }
health_check = { path = "/health", interval = "500ms", unhealthy_threshold = 1 }
`, url, certFile))
	ok := `sluice_health_checks_total{service="up",backend="` + url + `",result="ok"}`
	lb := g.Snapshot().Services["up"].Backends[0].LB
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, processSeries(c, ok), 2.0)
		assert.False(c, lb.Down())
	}, 10*time.Second, time.Millisecond)
}

// unhealthyLogLine starts a gateway whose one server, url as written in its configuration,
// every probe finds down, and returns the log line that takes it out.
func unhealthyLogLine(t *testing.T, url string) string {
	t.Helper()
	logs := new(syncBuffer)
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	startHealthGateway(t, "", `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "`+url+`" }]
health_check = { interval = "100ms", unhealthy_threshold = 1 }
`)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "backend unhealthy") }, 10*time.Second, 5*time.Millisecond)
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "backend unhealthy") {
			line = l
		}
	}
	return line
}
