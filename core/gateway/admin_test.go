package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

func adminGet(t require.TestingT, url string) (int, string) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// waitMetric polls the metrics page until series has a value for which ok is true, or fails
// after 5 s. (Counters are process-wide, so with -count>1 they only grow.)
func waitMetric(t *testing.T, url, series string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, body := adminGet(t, url)
		for _, line := range strings.Split(body, "\n") {
			if v, found := strings.CutPrefix(line, series+" "); found {
				if f, err := strconv.ParseFloat(v, 64); err == nil && ok(f) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %s never reached the expected value", series)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not an assertion
	}
}

func writeConfig(t *testing.T, path, upstream, rule string) {
	t.Helper()
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"

[routers.api]
rule = "%s"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[admin]
address = "127.0.0.1:0"
`, rule, upstream)
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
}

func TestAdminAPIAndReload(t *testing.T) {
	up := serveUpstream(t, echo)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	writeConfig(t, path, up.addr(), "PathPrefix(`/v1`)")
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })
	admin := "http://" + g.AdminAddr()

	st, body := adminGet(t, admin+"/api/gateway/health")
	require.Equal(t, 200, st)
	var health struct {
		Status     string
		Generation uint64
	}
	require.NoError(t, json.Unmarshal([]byte(body), &health))
	require.Equal(t, "ok", health.Status)

	st, body = adminGet(t, admin+"/api/gateway/routes")
	require.Equal(t, 200, st)
	require.Contains(t, body, "PathPrefix(`/v1`)")

	// One proxied request shows in the metrics.
	c := dial(t, g.Addr("web"))
	send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
	require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
	// The client has its response before the worker finishes its accounting: wait for it.
	waitMetric(t, admin+"/metrics", `sluice_responses_total{router="api",service="up",code="2xx"}`, func(v float64) bool { return v >= 1 })
	waitMetric(t, admin+"/metrics", `sluice_upstream_active{service="up",backend="http://`+up.addr()+`"}`, func(v float64) bool { return v == 0 })

	// A bad config is refused with its position; the running config stays in force.
	require.NoError(t, os.WriteFile(path, []byte("[routers.api]\nrule = 5\n"), 0o644))
	resp, err := http.Post(admin+"/api/gateway/reload", "application/json", nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	require.Contains(t, string(b), "sluice.toml:2:")
	send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)

	// A good config takes effect: /v1 no longer routes, /v2 does.
	writeConfig(t, path, up.addr(), "PathPrefix(`/v2`)")
	resp, err = http.Post(admin+"/api/gateway/reload", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	c2 := dial(t, g.Addr("web"))
	r2 := bufio.NewReader(c2)
	send(t, c2, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
	nr := readResponse(t, r2, false)
	require.Equal(t, 404, nr.status)
	require.True(t, strings.Contains(string(nr.body), `"code":"no_route"`), "%s", nr.body)
	send(t, c2, "GET /v2/models HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.Equal(t, 200, readResponse(t, r2, false).status)
}

func TestAdminRedactsSecretsAndAnswersJSON(t *testing.T) {
	up := serveUpstream(t, echo)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.unused]
type = "jwt"
value = "s3cret-top-s3cret-top-s3cret-top-s3cret-top"
issuer = "visible"
[middlewares.per-tenant]
type = "rate-limit"
rate = 60
key = "header:X-Tenant"
[admin]
address = "127.0.0.1:0"
`, up.addr())), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })
	admin := "http://" + g.AdminAddr()
	st, body := adminGet(t, admin+"/api/gateway/config")
	require.Equal(t, 200, st)
	require.NotContains(t, body, "s3cret")
	require.Contains(t, body, "visible")
	require.Contains(t, body, "header:X-Tenant", "a rate limit's key is no secret")
	st, body = adminGet(t, admin+"/api/gateway/nope")
	require.Equal(t, 404, st)
	require.Contains(t, body, `"code": "not_found"`)
}

func TestAdminTokenSchemeIsCaseInsensitive(t *testing.T) {
	t.Setenv("SLUICE_TEST_ADMIN_TOKEN", "tok-123")
	up := serveUpstream(t, echo)
	cfg, err := config.LoadBytes("t.toml", []byte(fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = "127.0.0.1:0"
token_env = "SLUICE_TEST_ADMIN_TOKEN"
`, up.addr())))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })
	for auth, want := range map[string]int{"": 401, "Bearer wrong": 401, "Bearer tok-123": 200, "bearer tok-123": 200, "BEARER tok-123": 200} {
		req, _ := http.NewRequest("GET", "http://"+g.AdminAddr()+"/api/gateway/health", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "Authorization %q", auth)
	}
}

// While the gateway drains, its health answer says so with 503, so that a load balancer stops
// sending it connections its entrypoints already refuse.
func TestHealthSaysDrainingWith503(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		arrived <- struct{}{}
		<-release // hold the request in flight, so the drain lasts
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
		return err == nil
	})
	toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://%s\" }]\n[admin]\naddress = \"127.0.0.1:0\"\n", up.addr())
	cfg, err := config.LoadBytes("drain.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	health := "http://" + g.AdminAddr() + "/api/gateway/health"
	code, body := adminGet(t, health)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"status": "ok"`)

	c := dial(t, g.Addr("web"))
	send(t, c, "GET /slow HTTP/1.1\r\nHost: gw\r\n\r\n")
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- g.Drain(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body = adminGet(t, health)
		if code == 503 {
			break
		}
		require.True(t, time.Now().Before(deadline), "health never said draining: %d %s", code, body)
		time.Sleep(10 * time.Millisecond) // polling the admin API, not asserting on time
	}
	require.Contains(t, body, `"status": "draining"`)
	close(release)
	require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status, "the request in flight finishes")
	require.NoError(t, <-drained)
}
