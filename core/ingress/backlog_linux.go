package ingress

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxBacklogTaken bounds the connections acceptBacklog accepts: Linux's largest listen backlog
// (net.core.somaxconn's default since 5.4).
const maxBacklogTaken = 4096

// acceptBacklog accepts, without waiting, the connections waiting in ln's backlog (at most
// maxBacklogTaken) and returns their descriptors, for a listener about to close, whose close
// would reset them: the caller closes ln at once and wraps them after (wrapBacklog), so that a
// connection completing meanwhile is not left in the queue for long. It returns none for a
// listener without a descriptor; an accept error ends the taking (EAGAIN: the queue is empty).
func acceptBacklog(ln net.Listener) []int {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var fds []int
	_ = rc.Control(func(lfd uintptr) {
		for len(fds) < maxBacklogTaken {
			fd, _, err := unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if err != nil {
				return
			}
			fds = append(fds, fd)
		}
	})
	return fds
}

// wrapBacklog turns the descriptors acceptBacklog took into connections; one that cannot be
// wrapped is closed.
func wrapBacklog(fds []int) []net.Conn {
	conns := make([]net.Conn, 0, len(fds))
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "backlog")
		c, err := net.FileConn(f) // a duplicate: f closes its own
		_ = f.Close()
		if err == nil {
			conns = append(conns, c)
		}
	}
	return conns
}
