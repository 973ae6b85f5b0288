package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// leftoverWait bounds the wait for the processes of a group that got SIGKILL to be gone.
const leftoverWait = 10 * time.Second

// waitGroupGone waits until process group pgid has no live process, failing t after
// leftoverWait.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if !assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, testenv.GroupMembers(pgid), "group %d", pgid)
	}, leftoverWait, 20*time.Millisecond) {
		testenv.KillGroupMembers(pgid)
		t.FailNow()
	}
}

// A process that exits takes what it forked with it, as nginx's master, dying, must take its
// workers: they would serve on the bench's port through the runs that follow.
func TestProcessExitEndsItsGroup(t *testing.T) {
	p, err := StartProcess("orphaner", "/bin/sh", []string{"-c", "sleep 1000 & exit 0"}, t.TempDir())
	require.NoError(t, err)
	select {
	case <-p.Exited():
	case <-time.After(leftoverWait):
		t.Fatal("sh did not exit")
	}
	waitGroupGone(t, p.PID())
}

// Closing the reaper ends the groups of the processes not stopped yet and removes its
// directory, as the bench's death would.
func TestReaperCloseEndsWhatIsLeft(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "work")
	require.NoError(t, os.Mkdir(dir, 0o755))
	r, err := StartReaper(dir)
	require.NoError(t, err)
	left, err := r.StartProcess("left", "/bin/sh", []string{"-c", "sleep 1000 & wait"}, dir)
	require.NoError(t, err)

	require.NoError(t, r.Close())
	waitGroupGone(t, left.PID())
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the reaper removes its directory")
	require.NoError(t, r.Close(), "a second Close")
	_, err = r.StartProcess("late", "/bin/sh", []string{"-c", "exit 0"}, t.TempDir())
	require.Error(t, err, "a closed reaper starts nothing")
}

// The reaper's command line names neither the bench nor its work directory
// (/tmp/sluice-bench-*), so a user's `pkill -f sluice-bench` ends the bench and leaves the
// reaper, which then ends the groups the bench left and removes the directory, as the bench's
// death closes its input.
func TestReaperEscapesPkillOfTheBench(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sluice-bench-work")
	require.NoError(t, os.Mkdir(dir, 0o755))
	r, err := StartReaper(dir)
	require.NoError(t, err)
	defer r.Close()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", r.cmd.Process.Pid))
	require.NoError(t, err)
	require.NotContains(t, string(cmdline), "sluice-bench", "the reaper's command line")
	left, err := r.StartProcess("left", "/bin/sh", []string{"-c", "sleep 1000 & wait"}, dir)
	require.NoError(t, err)

	_ = r.w.Close() // what the kernel does when the bench dies
	waitGroupGone(t, left.PID())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := os.Stat(dir)
		assert.ErrorIs(c, err, os.ErrNotExist, "%s after the reaper's input closed", dir)
	}, leftoverWait, 20*time.Millisecond)

	_, err = StartReaper(filepath.Join(t.TempDir(), "a\nb"))
	require.Error(t, err, "a directory name the reaper cannot read as one line")
}
