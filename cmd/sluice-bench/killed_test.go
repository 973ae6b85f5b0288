//go:build linux

package main_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/peers"
	"github.com/sluice-gw/sluice/bench/testenv"
)

// killedWait bounds the wait for what a killed compare left to be gone.
const killedWait = 10 * time.Second

// A compare killed outright, with SIGKILL or by a user's `pkill -9 -f sluice-bench`, runs none
// of its own cleanup, yet leaves nothing behind: no process of nginx's group (its workers
// outlive their master, which alone gets the parent-death signal) and no work directory. Nor
// does a compare whose standard error loses its reader, however it ends.
func TestKilledCompareLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nginx")
	}
	if _, err := peers.FindBinary("nginx"); err != nil {
		t.Skipf("nginx not installed (%s)", peers.InstallHint)
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	for _, c := range []struct {
		name     string
		duration string // long enough that the compare is still running when it is killed
		kill     func(t *testing.T, cmd *exec.Cmd, stderr *os.File)
		signal   string // how the compare ends; "": any way
	}{
		{"SIGKILL", "60s", func(_ *testing.T, cmd *exec.Cmd, _ *os.File) { _ = cmd.Process.Kill() }, "SIGKILL"},
		// nginx's master, whose arguments name the work directory (/tmp/sluice-bench-*), dies
		// with the compare; its workers, "nginx: worker process", do not.
		{"pkill", "60s", func(t *testing.T, cmd *exec.Cmd, _ *os.File) {
			pkill(t, "sluice-bench", filepath.Dir(cmd.Dir)+string(filepath.Separator), cmd.Process.Pid)
		}, "SIGKILL"},
		// The compare's next progress line, after its first run, meets a pipe with no reader.
		{"stderr closed", "1s", func(_ *testing.T, _ *exec.Cmd, stderr *os.File) { _ = stderr.Close() }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			r, w, err := os.Pipe()
			require.NoError(t, err)
			// --bin names an empty directory: the compare runs its in-process upstream.
			cmd := exec.Command(bin, "compare", "--peers", "nginx", "--engines", "none", "--workload", "json",
				"--bin", t.TempDir(), "--concurrency", "2", "--rounds", "1", "--warmup", "10ms", "--duration", c.duration)
			cmd.Dir = tmp
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp) // the compare's work directory goes here
			cmd.Stderr = w
			require.NoError(t, cmd.Start())
			_ = w.Close()
			defer r.Close()
			exited := make(chan struct{})
			t.Cleanup(func() { // a compare left running by a failure before the kill
				select {
				case <-exited:
				default:
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})

			nginx := startedPID(t, r, "nginx")
			t.Cleanup(func() { testenv.KillGroupMembers(nginx) }) // what a failed run leaves
			require.NotEmpty(t, testenv.GroupMembers(nginx), "nginx's group is running")

			c.kill(t, cmd, r)
			err = cmd.Wait()
			close(exited)
			if c.signal != "" {
				var ee *exec.ExitError
				require.True(t, errors.As(err, &ee), "the compare was killed: %v", err)
				ws := ee.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled(), "the compare was killed: %v", err)
				require.Equal(t, c.signal, signalName(ws.Signal()))
			}

			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Empty(c, testenv.GroupMembers(nginx), "nginx's group (pgid %d) after the compare ended", nginx)
				dirs, _ := filepath.Glob(filepath.Join(tmp, "sluice-bench-*"))
				assert.Empty(c, dirs, "work directories after the compare ended")
			}, killedWait, 20*time.Millisecond)
		})
	}
}

var startedLine = regexp.MustCompile(`^started (\S+) on \S+ \(pid (\d+)\)$`)

// startedPID reads the compare's stderr until it says it started target, and returns the pid
// it gives, the process group of target's processes.
func startedPID(t *testing.T, stderr *os.File, target string) int {
	t.Helper()
	found := make(chan int, 1)
	var seen []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if m := startedLine.FindStringSubmatch(sc.Text()); m != nil && m[1] == target {
				pid, _ := strconv.Atoi(m[2])
				found <- pid
				return
			}
		}
		close(found)
	}()
	select {
	case pid, ok := <-found:
		require.True(t, ok, "the compare's stderr ended before it started %s:\n%s", target, strings.Join(seen, "\n"))
		return pid
	case <-time.After(time.Minute):
		t.Fatalf("the compare did not start %s within a minute", target)
		return 0
	}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return s.String()
}

// pkill does what `pkill -9 -f pattern` does, sending SIGKILL to every process whose command
// line holds pattern, to the processes of this test alone: the compare (pid) and those whose
// command line holds scope, the test's temporary directory. They are all stopped before any
// is killed, so that none sees another die and acts on it, as with pkill none has the time to.
func pkill(t *testing.T, pattern, scope string, pid int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var matched []int
	var lines []string
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(line, pattern) && (n == pid || strings.Contains(line, scope)) {
			matched = append(matched, n)
			lines = append(lines, line)
		}
	}
	require.Contains(t, matched, pid, "the compare's command line holds %q", pattern)
	for _, n := range matched {
		_ = syscall.Kill(n, syscall.SIGSTOP)
	}
	for _, n := range matched {
		_ = syscall.Kill(n, syscall.SIGKILL)
	}
	t.Logf("pkill -9 -f %s: %d processes:\n%s", pattern, len(matched), strings.Join(lines, "\n"))
}
