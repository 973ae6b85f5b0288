package peers

import "syscall"

// sysProcAttr puts a child in its own process group (so that Stop reaches its children too) and
// has the kernel kill it if the bench process dies first (prctl PR_SET_PDEATHSIG). That signal
// reaches the child only, not the processes it forks (nginx's workers): a Reaper ends those.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
