package scaling

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// A replica whose command is a shell script that runs the server as a child (not exec'd) is
// stopped whole: the shell and its child, which a SIGTERM to the shell alone leaves running.
func TestStopEndsTheReplicasChildren(t *testing.T) {
	e := &Exec{Command: []string{"/bin/sh", "-c", "sleep 30; echo done", "{port}"}}
	p, err := e.Start(0)
	require.NoError(t, err)
	var child int
	require.Eventually(t, func() bool {
		if c := childrenOf(p.PID()); len(c) > 0 {
			child = c[0]
			return true
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "the shell starts its child")
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	p.Stop(5 * time.Second)
	require.Eventually(t, func() bool { return !alive(child) }, time.Second, 5*time.Millisecond,
		"the child of the replica's shell runs on after Stop")
}

// alive reports whether pid is a process that has not ended (a zombie has ended).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// A replica that exits before it is ready is logged with how it ended: its output is not
// kept, so the exit status is what points a user at the cause.
func TestReplicaExitBeforeReadyLogsItsExitStatus(t *testing.T) {
	var logged syncBuffer
	s, err := New(Options{
		Service: "failing", Min: 1, Max: 1, Concurrency: 1, Utilization: 1, Buffer: true,
		BufferSize: 1, BufferTimeout: time.Second, ScaleDownDelay: time.Minute, ScaleToZeroAfter: time.Minute,
		ReadyPath: "/health", ReadyInterval: 50 * time.Millisecond, StartupTimeout: time.Minute, StopTimeout: time.Second,
		Executor: &Exec{Command: []string{"/bin/sh", "-c", "exit 3", "{port}"}},
		Log:      slog.New(slog.NewTextHandler(&logged, nil)),
	})
	require.NoError(t, err)
	s.Bind([]*pipeline.Backend{{URL: s.URLs()[0], LB: &balancer.Backend{}}})
	s.Start()
	defer s.Close()
	require.Eventually(t, func() bool {
		return strings.Contains(logged.String(), `msg="scaling: replica exited before it became ready; run its command by hand to see why" service=failing`)
	}, 10*time.Second, 10*time.Millisecond, "log:\n%s", &logged)
	require.Contains(t, logged.String(), `exit="exit status 3"`)
}

// A ready replica that exits is logged with how it ended, as one that exits before it is
// ready is: here it is killed.
func TestReplicaExitLogsItsExitStatus(t *testing.T) {
	var logged syncBuffer
	s, err := New(replicaOptions("killed", 1, 1, llmsimCommand(t), slog.New(slog.NewTextHandler(&logged, nil))))
	require.NoError(t, err)
	defer s.Close()
	ready := readySlots(s)
	bindSlots(s)
	s.Start()
	waitReady(t, ready)
	crash(t, s)
	require.Eventually(t, func() bool {
		return strings.Contains(logged.String(), `msg="scaling: replica exited" service=killed`)
	}, 10*time.Second, 5*time.Millisecond, "log:\n%s", &logged)
	require.Regexp(t, `msg="scaling: replica exited" service=killed port=\d+ ready_for=\S+ exit="signal: killed"`, logged.String())
}

// syncBuffer is a bytes.Buffer a logger writes from the scaler's goroutines while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A ready replica whose process ends leaves none of its group running: its shell's child (the
// model server of a wrapper script whose shell ended, here llmsim) would go on holding the
// port the slot starts its next replica on, and outlive the gateway.
func TestReplicaExitEndsItsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile, fifo := filepath.Join(dir, "child"), filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	server := llmsimCommand(t)
	// The shell starts the server in the background, then ends once the test writes the fifo.
	script := `"$0" --listen "127.0.0.1:$3" & echo $! > "$1"; read x < "$2"`
	s, err := New(replicaOptions("wrapped", 1, 1, []string{"/bin/sh", "-c", script, server[0], pidFile, fifo, "{port}"}, nil))
	require.NoError(t, err)
	defer s.Close()
	ready := readySlots(s)
	bindSlots(s)
	s.Start()
	waitReady(t, ready)
	var child int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b, err := os.ReadFile(pidFile)
		if assert.NoError(c, err) {
			child, err = strconv.Atoi(strings.TrimSpace(string(b)))
			assert.NoError(c, err)
		}
	}, 5*time.Second, 5*time.Millisecond, "the shell starts its child")
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	require.NoError(t, err)
	require.NoError(t, w.Close()) // the shell's read ends: it exits, its child does not
	require.Eventually(t, func() bool { return !alive(child) }, 5*time.Second, 5*time.Millisecond,
		"the child of a replica that exited runs on")
}
