package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/metrics"
)

// processLines returns the series lines of the process's metrics (every gateway's) that
// contain one of subs.
func processLines(subs ...string) []string {
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// releaseConfig is a configuration with entrypoint web, the entrypoints of extraEP, an admin
// listener and a catch-all router to service <p>_s of servers (TOML inline tables).
func releaseConfig(p, extraEP, servers string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
%[2]s
[admin]
address = "127.0.0.1:0"
[routers.%[1]s_r]
rule = "PathPrefix(`+"`/`"+`)"
service = "%[1]s_s"
[services.%[1]s_s.load_balancer]
servers = [%[3]s]
`, p, extraEP, servers)
}

// A reload that removes an entrypoint, or a server of a service it keeps, takes their series
// off the metrics page, as it does for routers and services; an entrypoint the reload
// replaces (its address changed) keeps counting into the same series.
func TestMetricsOfRemovedEntrypointsAndServersGo(t *testing.T) {
	upA, upB := serveUpstream(t, echo), serveUpstream(t, echo)
	p := runPrefix("rel") // this run's objects are named rel<run>_...
	conf := func(extraEP, servers string) string { return releaseConfig(p, extraEP, servers) }
	both := fmt.Sprintf(`{ url = "http://%s" }, { url = "http://%s" }`, upA.addr(), upB.addr())
	onlyA := fmt.Sprintf(`{ url = "http://%s" }`, upA.addr())
	side := fmt.Sprintf("[entrypoints.%s_side]\naddress = \"127.0.0.1:0\"\n", p)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, addr, admin := startFileGateway(t, path, conf(side, both))
	reload := func(toml string) {
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		require.NoError(t, g.Reload())
	}
	get := func(addr string) {
		resp, err := http.Get("http://" + addr + "/x")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	sideRequests := fmt.Sprintf(`sluice_requests_total{entrypoint="%s_side"}`, p)
	for range 2 {
		get(g.Addr(p + "_side")) // round robin: one request to each server
	}
	waitMetric(t, admin+"/metrics", sideRequests, func(v float64) bool { return v == 2 })
	serverB := `backend="http://` + upB.addr() + `"`
	require.NotEmpty(t, processLines(serverB))

	// The side entrypoint moves to another port: the same series go on counting.
	reload(conf(strings.Replace(side, "127.0.0.1:0", "127.0.0.2:0", 1), both))
	get(g.Addr(p + "_side"))
	waitMetric(t, admin+"/metrics", sideRequests, func(v float64) bool { return v == 3 })

	// The side entrypoint and server B go: so do their series, once the entrypoint drained.
	reload(conf("", onlyA))
	get(addr)
	require.Empty(t, processLines(serverB), "no series of the removed server is left")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, processLines(`entrypoint="`+p+`_side"`), "the removed entrypoint's series go once it drained")
	}, 5*time.Second, 10*time.Millisecond)

	// Named again, it starts from zero.
	reload(conf(side, onlyA))
	waitMetric(t, admin+"/metrics", sideRequests, func(v float64) bool { return v == 0 })
}

// A gateway that drained lets go of every series its configuration and its entrypoints named:
// several gateways run one after the other in a process (tests, an embedding program) do not
// grow the metrics page.
func TestDrainedGatewayLeavesNoSeries(t *testing.T) {
	up := serveUpstream(t, echo)
	p := runPrefix("drained")
	cfg, err := config.LoadBytes("test.toml", []byte(fmt.Sprintf(`
[entrypoints.%[1]s_web]
address = "127.0.0.1:0"
[routers.%[1]s_r]
rule = "PathPrefix(`+"`/`"+`)"
service = "%[1]s_s"
[services.%[1]s_s.load_balancer]
servers = [{ url = "http://%[2]s" }]
[services.%[1]s_s.load_balancer.health_check]
path = "/"
interval = "100ms"
`, p, up.addr())))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	resp, err := http.Get("http://" + g.Addr(p+"_web") + "/x")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ours := func() []string { return processLines(`"`+p+`_`, `backend="http://`+up.addr()+`"`) }
	require.Eventually(t, func() bool {
		return strings.Contains(strings.Join(ours(), "\n"), fmt.Sprintf(`sluice_responses_total{router="%[1]s_r",service="%[1]s_s",code="2xx"} 1`, p))
	}, 5*time.Second, 10*time.Millisecond)
	for _, want := range []string{"sluice_requests_total{entrypoint=", "sluice_responses_total{router=", "sluice_upstream_connect_seconds_count{service=", "sluice_health_checks_total{service="} {
		require.Contains(t, strings.Join(ours(), "\n"), want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, g.Drain(ctx))
	require.Empty(t, ours(), "the drained gateway's series")
}

// A TLS entrypoint's certificate reload counter is one of the entrypoint's series: a reload
// that removes the entrypoint takes it off the metrics page with the others.
func TestTLSReloadCounterGoesWithItsEntrypoint(t *testing.T) {
	up := serveUpstream(t, echo)
	ca := newTestCA(t)
	certDir := t.TempDir()
	cert, key := ca.issue(t, certDir, "srv", "first", "127.0.0.1")
	p := runPrefix("tlsrel")
	conf := func(extraEP string) string {
		return releaseConfig(p, extraEP, fmt.Sprintf(`{ url = "http://%s" }`, up.addr()))
	}
	side := fmt.Sprintf("[entrypoints.%s_tls]\naddress = \"127.0.0.1:0\"\ntls = { cert_file = %q, key_file = %q }\n", p, cert, key)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, _, admin := startFileGateway(t, path, conf(side))
	require.Equal(t, "first", servedCN(t, g.Addr(p+"_tls"), "", ca.pool))

	ca.issue(t, certDir, "srv", "second", "127.0.0.1")
	reloads := fmt.Sprintf(`sluice_tls_certificate_reloads_total{entrypoint="%s_tls",result="success"}`, p)
	waitMetric(t, admin+"/metrics", reloads, func(v float64) bool { return v >= 1 })

	require.NoError(t, os.WriteFile(path, []byte(conf("")), 0o644))
	require.NoError(t, g.Reload())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, processLines(`entrypoint="`+p+`_tls"`), "the removed entrypoint's series, its TLS reload counter among them")
	}, 5*time.Second, 10*time.Millisecond)
}
