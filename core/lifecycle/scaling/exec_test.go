package scaling

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
