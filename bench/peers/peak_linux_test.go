package peers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// peakHelperEnv makes the test binary, run as a target process, be TestHelperPeakThenIdle.
const peakHelperEnv = "SLUICE_BENCH_PEAK_HELPER"

// peakHelperBytes is what the helper touches and hands back before it says it is ready.
const peakHelperBytes = 256 << 20

// TestHelperPeakThenIdle is not a test: run as a child process (peakHelperEnv set), it makes
// its resident memory peak at peakHelperBytes, returns that memory to the system, says
// "ready" and waits to be killed, as a proxy does that peaked in an earlier run.
func TestHelperPeakThenIdle(t *testing.T) {
	if os.Getenv(peakHelperEnv) != "1" {
		t.Skip("run as a child process by TestMeasurePeakRSSIsTheRunsOwn")
	}
	// A mapping of its own, outside Go's heap (and the race detector's shadow of it), so that
	// unmapping it hands the memory back at once.
	b, err := syscall.Mmap(-1, 0, peakHelperBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if err := syscall.Munmap(b); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	select {}
}

// A run's peak RSS is the proxy's peak during that run: a peak of an earlier run (an attacked
// run before the clean run that closes a round) is not the clean run's.
func TestMeasurePeakRSSIsTheRunsOwn(t *testing.T) {
	proc := startHelperProcess(t, "peaked", peakHelperEnv, "TestHelperPeakThenIdle")
	u, err := TreeUsage(proc.PID())
	require.NoError(t, err)
	require.GreaterOrEqual(t, u.HWMBytes, int64(peakHelperBytes), "the helper's lifetime peak")
	require.Less(t, u.RSSBytes, int64(peakHelperBytes/2), "the helper handed its memory back")

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(srv.Close)
	o := CompareOptions{Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, Concurrency: 2}
	run, err := measure(context.Background(), &o, target{name: "peaked", url: srv.URL, proc: proc}, "json", "", 1)
	require.NoError(t, err)
	require.Positive(t, run.ProxyPeakRSSBytes)
	require.Less(t, run.ProxyPeakRSSBytes, int64(peakHelperBytes/2),
		"the run's peak RSS holds a peak from before the run")
}
