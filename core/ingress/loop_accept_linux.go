package ingress

import "syscall"

// Accepting on the event loops. An accept goroutine parked in the Go netpoller learns of a
// new connection only when the runtime reads its netpoller: when a processor has nothing to
// run, or from its monitor thread every 10 ms. With the event loops holding the processors
// (each waiting in its own epoll_wait) that wait was the TTFT of every request that opened a
// connection, and the connection then went through gnet's registration (two more duplicates
// of its socket). So the loops hold the listener themselves (gnet's ShareListener, a patch:
// internal/gnet/PATCHES.md), armed on one loop at a time, and that loop accepts with accept4,
// opens the connection at once (shareListener) and passes the turn to the loop with the
// fewest connections.

// loopListener returns the listener's raw connection for shareListener, or nil when the
// listener has no file descriptor (acceptLoop alone then accepts).
func (e *GnetEngine) loopListener() syscall.RawConn {
	sc, ok := e.ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
