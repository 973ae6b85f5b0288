package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// crashingConfig is a gateway whose scaled service "llm" has a command that fails at once:
// each start appends a line to the file starts and the process exits with status 3.
func crashingConfig(starts, scaling string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "exec"
%s
[services.llm.scaling.exec]
command = ["/bin/sh", "-c", "echo $0 >> %s; exit 3", "{port}"]
stop_timeout = "1s"
`, scaling, starts)
}

// startsIn returns the lines of the starts file: one per process started.
func startsIn(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Fields(string(b))
}

// A replica whose command fails at once is started again after a backoff that holds for the
// whole service, not for its slot only, and that doubles with each failure in a row: with four
// replica slots, a request that waits 2.5 s for the one replica it needs sees it started at
// once, then a second after it failed, and not again before two more seconds (not once per
// slot each second); the request gets its clear cold_start_timeout answer at its deadline,
// and the failures are counted.
func TestCrashingReplicaIsNotRestartedOnEverySlot(t *testing.T) {
	starts := filepath.Join(t.TempDir(), "starts")
	_, addr, admin := startConfigGateway(t, crashingConfig(starts, `
max_replicas = 4
container_concurrency = 1
target_utilization = 1.0
buffer_timeout = "2500ms"
scale_down_delay = "100ms"
scale_to_zero_after = "100ms"
`))
	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	require.Equal(t, 504, r.status, r.raw)
	require.Equal(t, "cold_start_timeout", errField(r, "code"))
	got := startsIn(t, starts)
	// The first start at once, the next a second after it fails, the third two seconds
	// after that: two in the request's 2.5 s.
	require.LessOrEqual(t, len(got), 2, "starts of a command that fails at once within 2.5 s: %v", got)
	require.NotEmpty(t, got)
	// Each failure is counted: the processes ended before they were ready.
	waitMetric(t, admin+"/metrics", `sluice_scaling_replica_failures_total{service="llm",reason="not_ready"}`, func(v float64) bool { return v >= 1 })
	waitScaling(t, admin, 10*time.Second, "back to zero", func(s scalingView) bool { return s.Target == 0 && len(s.Replicas) == 0 })
}
