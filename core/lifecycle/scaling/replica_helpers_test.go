package scaling

import (
	"io"
	"log/slog"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// llmsimCommand is the command of a replica that is the repository's llmsim (built once per
// test process) listening on the replica's port.
func llmsimCommand(t *testing.T) []string {
	return []string{testenv.BuildBinary(t, "./cmd/llmsim"), "--listen", "127.0.0.1:{port}", "--ttft", "1ms", "--itl", "1ms", "--tokens", "2"}
}

// replicaOptions are the options of a scaler of min..max replicas of command, probed every
// 20 ms, that scales down only after a minute; log nil is slog's default.
func replicaOptions(service string, minReplicas, maxReplicas int, command []string, log *slog.Logger) Options {
	return Options{
		Service: service, Min: minReplicas, Max: maxReplicas, Concurrency: 1, Utilization: 1, Buffer: true,
		BufferSize: 1, BufferTimeout: time.Second, ScaleDownDelay: time.Minute, ScaleToZeroAfter: time.Minute,
		ReadyPath: "/health", ReadyInterval: 20 * time.Millisecond, StartupTimeout: time.Minute, StopTimeout: 2 * time.Second,
		Executor: &Exec{Command: command}, Log: log,
	}
}

// bindSlots binds s to backends of its replica slots, one each.
func bindSlots(s *Scaler) {
	var backends []*pipeline.Backend
	for _, u := range s.URLs() {
		backends = append(backends, &pipeline.Backend{URL: u, LB: &balancer.Backend{}})
	}
	s.Bind(backends)
}

// readySlots returns the channel s sends the slot of each replica that passed its readiness
// probe on.
func readySlots(s *Scaler) <-chan int {
	ready := make(chan int, 16)
	s.SetReadyHook(func(slot int) { ready <- slot })
	return ready
}

// waitReady waits for a replica to pass its readiness probe, returning its slot and when.
func waitReady(t *testing.T, ready <-chan int) (int, time.Time) {
	t.Helper()
	select {
	case slot := <-ready:
		return slot, time.Now()
	case <-time.After(30 * time.Second):
		t.Fatal("no replica became ready")
		return 0, time.Time{}
	}
}

// crash kills the process of the replica of a one-slot scaler, returning when.
func crash(t *testing.T, s *Scaler) time.Time {
	t.Helper()
	st := s.Status()
	require.Len(t, st.Replicas, 1)
	require.NotZero(t, st.Replicas[0].PID)
	at := time.Now()
	require.NoError(t, syscall.Kill(st.Replicas[0].PID, syscall.SIGKILL))
	return at
}

// crashSlot kills the process of slot's replica, returning when.
func crashSlot(t *testing.T, s *Scaler, slot int) time.Time {
	t.Helper()
	s.mu.Lock()
	p := s.reps[slot].proc
	s.mu.Unlock()
	require.NotNil(t, p, "slot %d has no process", slot)
	at := time.Now()
	require.NoError(t, syscall.Kill(p.PID(), syscall.SIGKILL))
	return at
}

// getBody returns the body of GET url.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
