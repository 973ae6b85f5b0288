package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// GroupMembers returns the processes of process group pgid that are alive, each as "PID COMM",
// read from /proc (proc(5)). Zombies are left out: they have exited, and wait only for a
// parent, or for init, to reap them. It returns nil when none is alive.
func GroupMembers(pgid int) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 3 || f[0] == "Z" || f[2] != strconv.Itoa(pgid) {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s", pid, s[open+1:end]))
	}
	return out
}

// KillGroupMembers sends SIGKILL to each live process of group pgid by its pid (GroupMembers),
// for a test's cleanup after a failure: not to the group's number, which by then may name
// another group.
func KillGroupMembers(pgid int) {
	for _, m := range GroupMembers(pgid) {
		pid, _, _ := strings.Cut(m, " ")
		if n, err := strconv.Atoi(pid); err == nil {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
}
