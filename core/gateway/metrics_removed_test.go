package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// runs numbers the runs of the tests below in this process (go test -count=N). Metric series
// are the process's, and a gateway that stopped still holds those its last configuration
// named: each run names its objects anew, so that no earlier run's series or counts are
// seen.
var runs atomic.Int64

// runPrefix returns prefix followed by the number of this run.
func runPrefix(prefix string) string { return fmt.Sprintf("%s%d", prefix, runs.Add(1)) }

// A reload that renames a router and its service takes the series of the old names off the
// metrics page; a reload back to the old names starts their counters from zero; a refused
// reload changes no series.
func TestMetricsOfRemovedObjectsGo(t *testing.T) {
	up := serveUpstream(t, echo)
	gone := runPrefix("gone") // this run's objects are named gone<run>_...
	conf := func(router, service string) string {
		return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.%s]
rule = "PathPrefix(`+"`/`"+`)"
service = %q
[services.%s.load_balancer]
servers = [{ url = "http://%s" }]
`, gone+router, gone+service, gone+service, up.addr())
	}
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, addr, admin := startFileGateway(t, path, conf("_a", "_up_a"))
	reload := func(toml string) error {
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		return g.Reload()
	}
	get := func() {
		resp, err := http.Get("http://" + addr + "/x")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	// ours returns the series on the metrics page that name this test's objects.
	ours := func() []string {
		_, body := adminGet(t, admin+"/metrics")
		var out []string
		for _, line := range strings.Split(body, "\n") {
			if !strings.HasPrefix(line, "#") && strings.Contains(line, `="`+gone+`_`) {
				out = append(out, line)
			}
		}
		return out
	}
	okA := fmt.Sprintf(`sluice_responses_total{router="%[1]s_a",service="%[1]s_up_a",code="2xx"}`, gone)
	okB := fmt.Sprintf(`sluice_responses_total{router="%[1]s_b",service="%[1]s_up_b",code="2xx"}`, gone)
	connectA := fmt.Sprintf(`sluice_upstream_connect_seconds_count{service="%s_up_a",backend="http://%s"}`, gone, up.addr())

	get()
	waitMetric(t, admin+"/metrics", okA, func(v float64) bool { return v == 1 })
	require.Contains(t, ours(), connectA+" 1")

	require.NoError(t, reload(conf("_b", "_up_b")))
	get()
	waitMetric(t, admin+"/metrics", okB, func(v float64) bool { return v == 1 })
	for _, line := range ours() {
		require.NotContains(t, line, `"`+gone+`_a"`)
		require.NotContains(t, line, `"`+gone+`_up_a"`)
	}

	require.NoError(t, reload(conf("_a", "_up_a")))
	page := ours()
	require.Contains(t, page, okA+" 0", "a router named again starts from zero")
	require.Contains(t, page, connectA+" 0")
	for _, line := range page {
		require.NotContains(t, line, `"`+gone+`_b"`)
	}
	get()
	waitMetric(t, admin+"/metrics", okA, func(v float64) bool { return v == 1 })

	before := ours()
	require.Error(t, reload(conf("_c", "_up_c")+"[routers."+gone+"_d]\nrule = 5\n"))
	require.True(t, slices.Equal(before, ours()), "a refused reload changes no series")
}

// A reload that renames a model alias, its target, a rate-limit middleware and an observed
// service takes their series (admission, prefix affinity, rate limiting, worker exclusions)
// off the metrics page; a reload back to the old names brings them back from zero.
func TestMetricsOfRemovedModelsAndMiddlewaresGo(t *testing.T) {
	up := serveUpstream(t, echo)
	gmr := runPrefix("gmr") // this run's objects are named gmr<run>_..._<suffix>
	conf := func(suffix string) string {
		return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
middlewares = ["%[3]s_rl_%[1]s"]
[middlewares.%[3]s_rl_%[1]s]
type = "rate-limit"
rate = 1000
burst = 1000
[services.%[3]s_fleet_%[1]s.load_balancer]
servers = [{ url = "http://%[2]s" }]
[services.%[3]s_fleet_%[1]s.workers]
observe = true
[models.%[3]s_model_%[1]s.targets.%[3]s_t_%[1]s]
service = "%[3]s_fleet_%[1]s"
[models.%[3]s_model_%[1]s.scheduling]
max_concurrent_requests = 4
prefix_affinity = true
`, suffix, up.addr(), gmr)
	}
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, _, admin := startFileGateway(t, path, conf("a"))
	reload := func(toml string) {
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		require.NoError(t, g.Reload())
	}
	// naming returns the series lines on the metrics page that contain the quoted value of
	// one of this test's objects.
	naming := func(suffix string) []string {
		_, body := adminGet(t, admin+"/metrics")
		var out []string
		for _, line := range strings.Split(body, "\n") {
			if !strings.HasPrefix(line, "#") && strings.Contains(line, `_`+suffix+`"`) && strings.Contains(line, `="`+gmr+`_`) {
				out = append(out, line)
			}
		}
		return out
	}
	families := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			name, _, _ := strings.Cut(l, "{")
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{
		"sluice_model_queue_wait_seconds_bucket", "sluice_model_queue_wait_seconds_count", "sluice_model_queue_wait_seconds_sum",
		"sluice_model_rejected_total", "sluice_prefix_affinity_invalidations_total", "sluice_prefix_affinity_matched_bytes_total",
		"sluice_prefix_affinity_scanned_bytes_total", "sluice_prefix_affinity_selections_total",
		"sluice_rate_limited_total", "sluice_worker_exclusions_total",
	}
	have := families(naming("a"))
	for _, f := range want {
		require.Contains(t, have, f, "the series of the objects in force are listed")
	}

	reload(conf("b"))
	require.Empty(t, naming("a"), "no series of the renamed objects is left")
	require.NotEmpty(t, naming("b"))

	reload(conf("a"))
	require.Empty(t, naming("b"))
	require.Contains(t, naming("a"), `sluice_rate_limited_total{middleware="`+gmr+`_rl_a"} 0`, "named again, they start from zero")
}
