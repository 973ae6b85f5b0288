package scaling

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// children returns the process ids of this process's live children (zombies aside), read
// from /proc.
func children() []int { return childrenOf(os.Getpid()) }

// childrenOf returns the process ids of parent's live children (zombies aside).
func childrenOf(parent int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := parent
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, pid)
		}
	}
	return out
}

// A scaler closed while a replica is being started leaves no process behind once Close has
// returned: not the one whose start was under way, nor one started afterwards by the start
// already decided. The replicas ignore SIGTERM (inherited from the test while it ignores it),
// so that one left running outlives the check by its stop_timeout.
func TestCloseLeavesNoReplicaStartingAfterIt(t *testing.T) {
	require.Empty(t, children(), "no child process before the test")
	signal.Ignore(syscall.SIGTERM)
	t.Cleanup(func() {
		// Reset alone leaves SIGTERM ignored, and inherited by the processes later tests
		// start: a Notify puts the runtime's handler back (children get the default action),
		// and its Stop leaves the process as it was before the test.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		signal.Stop(c)
	})
	for range 3 {
		s, err := New(Options{
			Service: "closing", Min: 1, Max: 1, Concurrency: 1, Utilization: 1, Buffer: true,
			BufferSize: 1, BufferTimeout: time.Second, ScaleDownDelay: time.Minute, ScaleToZeroAfter: time.Minute,
			ReadyPath: "/health", ReadyInterval: 50 * time.Millisecond, StartupTimeout: time.Minute, StopTimeout: time.Second,
			Executor: &Exec{Command: []string{"/bin/sh", "-c", "exec sleep 5", "{port}"}},
		})
		require.NoError(t, err)
		s.Bind([]*pipeline.Backend{{URL: s.URLs()[0], LB: &balancer.Backend{}}})
		s.Start() // min_replicas: its replica starts now
		s.Close()
		require.Never(t, func() bool { return len(children()) > 0 }, 500*time.Millisecond, 5*time.Millisecond,
			"a replica process runs after Close returned")
	}
}
