package peers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// burnHelperEnv makes the test binary, run as a target process, be TestHelperBurnOnSignal.
const burnHelperEnv = "SLUICE_BENCH_BURN_HELPER"

// burnCPU is the CPU time the helper burns when signalled.
const burnCPU = 150 * time.Millisecond

// startHelperProcess runs this test binary again as a target process named name: only test
// (a TestHelper... function that runs when env is "1"), and returns it once it logged "ready".
// The process is stopped when the test ends.
func startHelperProcess(t *testing.T, name, env, test string) *Process {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	t.Setenv(env, "1")
	proc, err := StartProcess(name, exe, []string{"-test.run=^" + test + "$"}, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proc.Stop(time.Second) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, proc.LogTail(200), "ready")
	}, 30*time.Second, 20*time.Millisecond, "the helper never said it was ready")
	return proc
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestHelperBurnOnSignal is not a test: run as a child process (burnHelperEnv set), it says
// "ready", and on SIGUSR1 burns burnCPU of CPU time, says "burnt" and idles, as a proxy does
// whose first requests cost more than the later ones (connects, buffers that grow).
func TestHelperBurnOnSignal(t *testing.T) {
	if os.Getenv(burnHelperEnv) != "1" {
		t.Skip("run as a child process by TestMeasureCPUIsTheWindows")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	fmt.Println("ready")
	<-sig
	for start := cpuTime(); cpuTime()-start < burnCPU; {
	}
	fmt.Println("burnt")
	select {}
}

// The CPU time and requests a run's CPU per request is made of are those of the measured
// window: what a proxy spends in the warmup is not.
func TestMeasureCPUIsTheWindows(t *testing.T) {
	proc := startHelperProcess(t, "burner", burnHelperEnv, "TestHelperBurnOnSignal")

	// The first request, in the warmup, makes the target burn its CPU and waits for the burn.
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			_ = syscall.Kill(proc.PID(), syscall.SIGUSR1)
			assert.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Contains(c, proc.LogTail(200), "burnt")
			}, 10*time.Second, 5*time.Millisecond, "the helper never burnt its CPU")
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(srv.Close)
	o := CompareOptions{Duration: 300 * time.Millisecond, Warmup: 2 * time.Second, Concurrency: 2}
	run, err := measure(context.Background(), &o, target{name: "burner", url: srv.URL, proc: proc}, "json", "", 1)
	require.NoError(t, err)
	require.Contains(t, proc.LogTail(200), "burnt")
	require.Positive(t, run.ProxyRequests)
	require.Less(t, run.ProxyCPUSeconds, (burnCPU / 2).Seconds(), "the warmup's CPU counts in the run's")
	require.Less(t, run.ProxyRequests, run.Result.TotalSent, "the warmup's requests are not the window's")
}
