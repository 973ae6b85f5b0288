package gateway_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// processSeries returns the value of series (name and labels as written) in this process's
// metrics, 0 when absent: for tests without an admin listener. t may be an assert.CollectT,
// for a check that is retried.
func processSeries(t require.TestingT, series string) float64 {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// requireNoLabel asserts that admin's metrics page has no series with the label pair.
func requireNoLabel(t *testing.T, admin, pair string) {
	t.Helper()
	_, body := adminGet(t, admin+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "#") {
			require.NotContains(t, line, pair)
		}
	}
}

// refusedBaseConfig is a gateway with entrypoint web, the admin API and a router to up.
func refusedBaseConfig(upstream string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
`, upstream)
}

// An entrypoint added at a port that is taken is refused, and none of its series appears;
// once a reload adds it at a free port and it listens, they do.
func TestRefusedEntrypointLeavesNoSeries(t *testing.T) {
	up := serveUpstream(t, echo)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sluice.toml")
			base := refusedBaseConfig(up.addr())
			g, _, admin := startFileGateway(t, path, base)
			name := "busy_" + engine
			added := func(addr string) string {
				return base + fmt.Sprintf("[entrypoints.%s]\naddress = %q\nengine = %q\n", name, addr, engine)
			}
			require.NoError(t, os.WriteFile(path, []byte(added(taken.Addr().String())), 0o644))
			require.Error(t, g.Reload())
			requireNoLabel(t, admin, `entrypoint="`+name+`"`)

			require.NoError(t, os.WriteFile(path, []byte(added("127.0.0.1:0")), 0o644))
			require.NoError(t, g.Reload())
			requireSeries(t, admin, `sluice_open_connections{entrypoint="`+name+`"}`, 0)
			requireSeries(t, admin, `sluice_requests_total{entrypoint="`+name+`"}`, 0)
		})
	}
}

// A reload refused when its configuration is compiled (an access log that cannot be opened)
// leaves none of the series of the router, service and backend it added; the same router and
// service in a configuration put in force have theirs.
func TestRefusedCompileLeavesNoSeries(t *testing.T) {
	up := serveUpstream(t, echo)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := refusedBaseConfig(up.addr())
	g, _, admin := startFileGateway(t, path, base)
	ghost := fmt.Sprintf(`
[routers.ghost]
rule = "PathPrefix(`+"`/ghost`"+`)"
service = "ghost"
[services.ghost.load_balancer]
servers = [{ url = "http://%s" }]
health_check = { path = "/", interval = "1h" }
`, up.addr())
	unopenable := filepath.Join(t.TempDir(), "no-such-dir", "access.log")
	require.NoError(t, os.WriteFile(path, []byte(base+ghost+fmt.Sprintf("[log]\naccess_log = %q\n", unopenable)), 0o644))
	require.Error(t, g.Reload())
	requireNoLabel(t, admin, `router="ghost"`)
	requireNoLabel(t, admin, `service="ghost"`)

	require.NoError(t, os.WriteFile(path, []byte(base+ghost), 0o644))
	require.NoError(t, g.Reload())
	requireSeries(t, admin, `sluice_responses_total{router="ghost",service="ghost",code="2xx"}`, 0)
	requireSeries(t, admin, `sluice_backend_ejections_refused_total{service="ghost",backend="http://`+up.addr()+`"}`, 0)
}
