//go:build unix && !linux

package testenv

import "syscall"

// sysProcAttr puts a child in its own process group (so that Stop reaches its children too).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
