package gateway_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// metricsGateway is a running gateway with its admin API, for metrics tests.
type metricsGateway struct {
	g     *gateway.Gateway
	addr  string // the entrypoint
	admin string // admin base URL
	path  string // config file
	toml  func(rule string) string
}

// startMetricsGateway runs a gateway whose entrypoint ep (engine) has router (rule
// PathPrefix(`/v1`)) proxying to upstream, with extra appended to the entrypoint's table, and
// the admin API on loopback. Metrics are process-wide: tests give their entrypoints and
// routers names of their own so that no other test's requests count into them.
func startMetricsGateway(t *testing.T, engine, ep, router, upstream, extra string) *metricsGateway {
	t.Helper()
	m := &metricsGateway{path: filepath.Join(t.TempDir(), "sluice.toml")}
	m.toml = func(rule string) string {
		return fmt.Sprintf(`
[entrypoints.%s]
address = "127.0.0.1:0"
engine = %q
%s

[routers.%s]
rule = %q
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[admin]
address = "127.0.0.1:0"
`, ep, engine, extra, router, rule, upstream)
	}
	require.NoError(t, os.WriteFile(m.path, []byte(m.toml("PathPrefix(`/v1`)")), 0o644))
	cfg, err := config.Load(m.path)
	require.NoError(t, err)
	m.g, err = gateway.New(cfg, m.path, nil)
	require.NoError(t, err)
	require.NoError(t, m.g.Start())
	t.Cleanup(func() { _ = m.g.Drain(t.Context()) })
	m.addr, m.admin = m.g.Addr(ep), "http://"+m.g.AdminAddr()
	return m
}

// scrape returns the metrics page.
func (m *metricsGateway) scrape(t *testing.T) string {
	t.Helper()
	st, body := adminGet(t, m.admin+"/metrics")
	require.Equal(t, 200, st)
	return body
}

// value returns the value of series (name and labels as written) in the metrics page, 0 when
// absent.
func (m *metricsGateway) value(t *testing.T, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(m.scrape(t), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// waitValue waits until series has the value want (the counts of a request are taken after
// its response went out).
func (m *metricsGateway) waitValue(t *testing.T, series string, want float64) {
	t.Helper()
	waitMetric(t, m.admin+"/metrics", series, func(v float64) bool { return v == want })
}

// sluice_active_streams counts a streamed response from its head to its end, whether it
// completes or its client leaves.
func TestMetricsActiveStreams(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int)
			up := sseUpstream(t, next)
			t.Cleanup(func() { close(next) }) // before the upstream waits for its scripts
			router := "streams_" + engine
			m := startMetricsGateway(t, engine, "web", router, up.addr(), "")
			series := fmt.Sprintf(`sluice_active_streams{router=%q,service="up"}`, router)
			base := m.value(t, series)
			for _, leave := range []bool{false, true} {
				c := dial(t, m.addr)
				send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
				r := bufio.NewReader(c)
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "HTTP/1.1 200 OK\r\n", line)
				for l := ""; l != "\r\n"; {
					l, err = r.ReadString('\n')
					require.NoError(t, err)
				}
				next <- 0
				require.Equal(t, "data: {\"i\":0}\n\n", readChunk(t, r))
				m.waitValue(t, series, base+1)
				if leave {
					require.NoError(t, c.Close())
				} else {
					next <- -1
					require.Equal(t, "data: [DONE]\n\n", readChunk(t, r))
					require.Equal(t, "", readChunk(t, r), "last chunk")
				}
				m.waitValue(t, series, base)
			}
		})
	}
}
