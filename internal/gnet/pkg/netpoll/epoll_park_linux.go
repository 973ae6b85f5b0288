//go:build linux && !poll_opt

package netpoll

import (
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// epollPoll (sluice patch) returns the events ready on epfd without waiting, as a raw system
// call: a call that cannot wait needs none of the Go scheduler's system call bookkeeping.
// Shapes and errors are unix.EpollWait's with a timeout of 0.
func epollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd),
		uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// parkable (sluice patch) registers the poller's epoll descriptor with the Go runtime's
// netpoller, so that an idle event loop parks its goroutine until the descriptor is readable
// (an epoll instance is readable while any of its events is ready) instead of blocking its
// thread in epoll_wait(2). The os.File owns the descriptor from then on and closes it.
func (p *Poller) parkable() error {
	if err := unix.SetNonblock(p.fd, true); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	p.file = os.NewFile(uintptr(p.fd), "epoll")
	rc, err := p.file.SyscallConn()
	if err != nil {
		return err
	}
	p.raw = rc
	return nil
}

// busyYield is how long a loop works without parking before it yields its processor: the
// longest the other loops' events wait for a thread to notice them when no other thread
// watches the Go netpoller (Polling). Measured on 5,000 streams of 100 ms tokens, a yield
// every 200 µs kept their time to first token and inter-token latency at or under those of
// loops blocking their own threads, where no yield, or one every 1 ms, let them grow.
const busyYield = int64(200 * time.Microsecond)

var clockStart = time.Now()

// nanotime is the monotonic time in ns since the package started.
func nanotime() int64 { return int64(time.Since(clockStart)) }

// AddReadDisarmed (sluice patch) registers pa.FD for readability with EPOLLONESHOT and no
// event armed: it reports nothing until ArmReadOnce. The loops share a listening socket this
// way, armed on one loop at a time (internal/gnet/listener_token_linux.go).
func (p *Poller) AddReadDisarmed(pa *PollAttachment) error {
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: unix.EPOLLONESHOT}))
}

// ArmReadOnce (sluice patch) arms a descriptor registered by AddReadDisarmed for one
// readability event; the event disarms it again. It may be called from any goroutine:
// epoll_ctl(2) is safe against a concurrent epoll_wait on the same instance.
func (p *Poller) ArmReadOnce(fd int) error {
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Fd: int32(fd), Events: unix.EPOLLIN | unix.EPOLLONESHOT}))
}

// wake (sluice patch) adds b (8 bytes, an eventfd count) to the poller's eventfd with
// write(2) as a raw system call, reading the count first whenever it is full (EAGAIN), as
// Trigger did through unix.Write. The eventfd is non-blocking, so the call never waits; going
// through the Go scheduler's system call state for it woke the runtime's monitor thread (asleep
// while every processor is idle) whenever a task was queued for a loop, such as an upstream
// connection's close or a worker's dial handed over. Errors are write(2)'s, nil on success.
func (p *Poller) wake() error {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(p.efd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			return nil
		case unix.EAGAIN:
			_, _ = unix.Read(p.efd, p.efdBuf)
		default:
			return e
		}
	}
}
