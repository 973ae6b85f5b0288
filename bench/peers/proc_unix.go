//go:build unix && !linux

package peers

import "syscall"

// sysProcAttr puts a child in its own process group (so that Stop reaches its children too).
// There is no parent-death signal here: the children of a bench killed with SIGKILL are ended
// only by a Reaper.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
