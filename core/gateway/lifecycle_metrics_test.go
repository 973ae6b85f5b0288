package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seriesOf returns the value of series (name and labels as written) on the metrics page of
// admin, and whether the page has it.
func seriesOf(t *testing.T, admin, series string) (float64, bool) {
	t.Helper()
	st, body := adminGet(t, admin+"/metrics")
	require.Equal(t, 200, st)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f, true
		}
	}
	return 0, false
}

// requireSeries asserts the value of series on admin's metrics page.
func requireSeries(t *testing.T, admin, series string, want float64) {
	t.Helper()
	v, ok := seriesOf(t, admin, series)
	require.True(t, ok, "no series %s", series)
	require.Equal(t, want, v, series)
}

// requireNoSeries asserts that admin's metrics page has no series starting with prefix.
func requireNoSeries(t *testing.T, admin, prefix string) {
	t.Helper()
	_, body := adminGet(t, admin+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		require.False(t, strings.HasPrefix(line, prefix), "series left: %s", line)
	}
}

// The scaling gauges are those of the scaler in force: a reload that replaces the scaler
// shows the new one's replica starting, not the zeros of the old one stopping its own, and a
// reload after which the service no longer scales takes the service's gauges away.
func TestScalingGaugesFollowTheScalerInForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	const scaling = "min_replicas = 1\nmax_replicas = 1\n"
	g, _, admin := startFileGateway(t, path, scaledConfig(t, "0s", scaling))
	waitScaling(t, admin, 10*time.Second, "the first replica ready", func(s scalingView) bool { return s.Ready == 1 })
	requireSeries(t, admin, `sluice_scaling_replicas{service="llm",state="ready"}`, 1)

	// Another startup delay is another command: a new scaler, whose replica starts for 30 s.
	require.NoError(t, os.WriteFile(path, []byte(scaledConfig(t, "30s", scaling)), 0o644))
	require.NoError(t, g.Reload())
	waitScaling(t, admin, 10*time.Second, "the new replica starting", func(s scalingView) bool { return s.Starting == 1 })
	requireSeries(t, admin, `sluice_scaling_replicas{service="llm",state="starting"}`, 1)
	requireSeries(t, admin, `sluice_scaling_replicas{service="llm",state="ready"}`, 0)
	requireSeries(t, admin, `sluice_scaling_desired_replicas{service="llm"}`, 1)

	// The service without scaling: a plain load balancer.
	scaled := scaledConfig(t, "0s", scaling)
	plain := scaled[:strings.Index(scaled, "[services.llm.scaling]")] + `servers = [{ url = "http://` + deadUpstream(t) + `" }]` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(plain), 0o644))
	require.NoError(t, g.Reload())
	for _, family := range []string{"sluice_scaling_desired_replicas", "sluice_scaling_replicas", "sluice_scaling_in_flight", "sluice_scaling_queue_depth"} {
		requireNoSeries(t, admin, family+`{service="llm"`)
	}
}

// The rollout and revision gauges belong to the configuration in force: a reload that drops
// the rollout takes sluice_rollout_state away, one that replaces the revisions with a load
// balancer takes their traffic shares away.
func TestRolloutAndRevisionGaugesFollowTheConfiguration(t *testing.T) {
	v1, v2 := startRevisionSim(t, 0), startRevisionSim(t, 0)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	service := func(body string) string {
		return `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(` + "`/`" + `)"
service = "gauged"
[services.gauged]
` + body
	}
	revisions := fmt.Sprintf(`revisions = [
  { name = "v1", traffic_percent = 80, servers = [{ url = "http://%s" }] },
  { name = "v2", traffic_percent = 20, servers = [{ url = "http://%s" }] },
]
`, v1.Addrs()[0], v2.Addrs()[0])
	const rollout = `[services.gauged.rollout]
from = "v1"
to = "v2"
step_percent = 10
step_interval_secs = 3600
min_samples = 1
`
	g, _, admin := startFileGateway(t, path, service(revisions+rollout))
	requireSeries(t, admin, `sluice_rollout_state{service="gauged"}`, 0)
	requireSeries(t, admin, `sluice_revision_traffic_percent{service="gauged",revision="v2"}`, 20)

	require.NoError(t, os.WriteFile(path, []byte(service(revisions)), 0o644))
	require.NoError(t, g.Reload())
	requireNoSeries(t, admin, `sluice_rollout_state{service="gauged"}`)
	requireSeries(t, admin, `sluice_revision_traffic_percent{service="gauged",revision="v1"}`, 80)

	require.NoError(t, os.WriteFile(path, []byte(service(fmt.Sprintf("[services.gauged.load_balancer]\nservers = [{ url = \"http://%s\" }]\n", v1.Addrs()[0]))), 0o644))
	require.NoError(t, g.Reload())
	requireNoSeries(t, admin, `sluice_revision_traffic_percent{service="gauged"`)
	requireNoSeries(t, admin, `sluice_rollout_state{service="gauged"}`)
}
