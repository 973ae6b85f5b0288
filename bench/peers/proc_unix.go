//go:build unix && !linux

package peers

import "syscall"

// sysProcAttr puts a child in its own process group (so that Stop reaches its children too).
// There is no parent-death signal here: a bench killed with SIGKILL leaves its children running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
