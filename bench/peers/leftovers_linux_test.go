package peers

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// leftoverWait bounds the wait for the processes of a group that got SIGKILL to be gone.
const leftoverWait = 10 * time.Second

// waitGroupGone waits until process group pgid has no live process, failing t after
// leftoverWait.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(leftoverWait)
	for {
		left := testenv.GroupMembers(pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			testenv.KillGroupMembers(pgid)
			t.Fatalf("group %d still has %v after %v", pgid, left, leftoverWait)
		}
		time.Sleep(20 * time.Millisecond)
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
