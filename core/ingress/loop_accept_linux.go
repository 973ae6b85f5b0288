package ingress

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Accepting on the event loops. With upstream_io = "loop" the loops keep every Go processor,
// each waiting in its own epoll_wait, and the Go runtime then reads its netpoller only when a
// processor has nothing to run or from its monitor thread every 10 ms: acceptLoop, parked in
// the netpoller on the entrypoint's listener, learnt of a new connection up to 10 ms late,
// and that wait was the TTFT of every request that opened a connection (8 ms at the median
// of 32 clients without keep-alive, against 0.5 ms through nginx). So a loop that is awake
// anyway (it has traffic to handle) also takes what waits in the listener's queue, at most
// every loopAcceptEvery, with non-blocking calls; acceptLoop still accepts when the loops are
// idle, which is when the runtime does read its netpoller. A thread blocked in poll(2) or
// accept(2) instead would hold a processor, which the runtime's monitor then takes back at
// 20 µs intervals: twice the CPU per request, measured.

// loopAcceptEvery is the least time between a loop's looks at the listener's queue: each look
// is a poll(2) with no timeout (0.4 µs here, against 3.2 µs for an accept4 that finds the
// queue empty), and accept4 runs only when it reports a connection. Keep-alive traffic pays
// at most 2,000 looks a second per loop; a connection waits at most this long, plus the
// loop's current work, while the loop is busy.
const loopAcceptEvery = 500 * time.Microsecond

// acceptLoopLate is how long acceptLoop may have been waiting in Accept, with a connection in
// the queue, before a loop accepts in its place. A connection acceptLoop takes costs fewer
// system calls (a loop's goes through net.FileConn and is duplicated again by gnet), so while
// acceptLoop keeps up, as in a burst of connections it accepts one after the other, the loops
// leave the queue to it; once the netpoller leaves it parked, they do not wait for it.
const acceptLoopLate = 200 * time.Microsecond

// loopAcceptMax is the most connections one attempt accepts: the rest wait for the next one
// (or acceptLoop), so a burst of connections does not hold up the loop's own traffic.
const loopAcceptMax = 16

// loopListener returns the listener's raw connection for acceptOnLoop, or nil when the
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

// acceptOnLoop accepts the connections waiting in the listener's queue, from event loop ls,
// unless the loop looked within loopAcceptEvery; each is registered with gnet
// as acceptLoop registers its own. A listener that closes meanwhile is not touched:
// RawConn.Control fails once it is closed, and the listener's Close waits for a Control in
// progress.
func (e *GnetEngine) acceptOnLoop(ls *loopState) {
	if e.lnRC == nil {
		return
	}
	now := time.Now().UnixNano()
	if now < ls.nextAccept || e.draining.Load() {
		return
	}
	ls.nextAccept = now + int64(loopAcceptEvery)
	n := 0
	_ = e.lnRC.Control(func(fd uintptr) {
		pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, err := unix.Poll(pfd[:], 0); k <= 0 || err != nil {
			return
		}
		if since := e.acceptingSince.Load(); since == 0 || now-since < int64(acceptLoopLate) {
			return // acceptLoop runs, or has just looked: its own accept4 finds the connection
		}
		for n < loopAcceptMax {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			switch err {
			case nil:
				// Registered while Control holds the listener: a drain's close waits for it,
				// and its wait for connections on their way to a loop then counts this one.
				e.adopt(nfd)
				n++
			case unix.EINTR, unix.ECONNABORTED:
			default:
				return // EAGAIN: the queue is empty; anything else acceptLoop meets and reports
			}
		}
	})
	e.loopAccepted.Add(int64(n))
}
