package gateway_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// crashingConfig is a gateway whose scaled service "llm" has a command that fails at once:
// each start appends its time (Unix seconds) to the file starts and the process exits with
// status 3.
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
command = ["/bin/sh", "-c", "date +%%s.%%N >> %s; exit 3", "{port}"]
stop_timeout = "1s"
`, scaling, starts)
}

// startsIn returns the times of the starts file: one per process started, in seconds.
func startsIn(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []float64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseFloat(f, 64)
		require.NoError(t, err, f)
		out = append(out, v)
	}
	return out
}

// A replica whose command fails at once is started again after a backoff that holds for the
// whole service, not for its slot only, and that doubles with each failure in a row: with four
// replica slots, a request that waits 2.5 s for the one replica it needs sees it started at
// once, then a second after it failed, then two seconds after that (not once per slot each
// second); the request gets its clear cold_start_timeout answer at its deadline,
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
	require.GreaterOrEqual(t, len(got), 2, "started at once, and again a second after it failed: %v", got)
	// The second start a second after the first failed, the third two seconds after the
	// second failed: never one per slot at once, nor one a second.
	for i := 1; i < len(got); i++ {
		want := 0.9 * float64(int(1)<<(i-1))
		require.GreaterOrEqual(t, got[i]-got[i-1], want, "start %d came %.3f s after the one before (starts %v)", i, got[i]-got[i-1], got)
	}
	// Each failure is counted: the processes ended before they were ready.
	waitMetric(t, admin+"/metrics", `sluice_scaling_replica_failures_total{service="llm",reason="not_ready"}`, func(v float64) bool { return v >= 1 })
	waitScaling(t, admin, 10*time.Second, "back to zero", func(s scalingView) bool { return s.Target == 0 && len(s.Replicas) == 0 })
}

// A replica whose program, named by the environment, cannot be started is logged with the
// program as the configuration writes it ("replica did not start", and the warning that
// the program is not one): the exec error quotes the path run, a value from the environment
// that the log never shows.
func TestScalingStartFailureLogNeverShowsEnvValues(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "private-model-server")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o644)) // not executable
	t.Setenv("SLUICE_TEST_REPLICA_PROGRAM", prog)
	logs := new(syncBuffer)
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	startConfigGateway(t, `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "exec"
min_replicas = 1
[services.llm.scaling.exec]
command = ["${SLUICE_TEST_REPLICA_PROGRAM}", "--port", "{port}"]
`)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "scaling: replica did not start") }, 10*time.Second, 5*time.Millisecond)
	for l := range strings.Lines(logs.String()) {
		require.NotContains(t, l, prog, "the log shows the value of SLUICE_TEST_REPLICA_PROGRAM")
		if strings.Contains(l, "scaling: replica did not start") {
			require.Contains(t, l, "exec ${SLUICE_TEST_REPLICA_PROGRAM}", "the error names the program as written")
		}
	}
}
