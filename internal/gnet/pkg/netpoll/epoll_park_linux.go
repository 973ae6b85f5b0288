//go:build linux && !poll_opt

package netpoll

import (
	"os"
	"sync"
	"sync/atomic"
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

// busyYield is how long a loop works without parking before it looks whether another loop
// or goroutine waits for a thread (othersWait); when one does, the loop yields its processor,
// which wakes an idle processor's thread to watch the Go netpoller and to run what the
// batches made ready. Measured on 5,000 streams of 100 ms tokens, a yield every 200 µs kept
// their time to first token and inter-token latency at or under those of loops blocking their
// own threads, where no yield, or one every 1 ms, let them grow.
const busyYield = int64(200 * time.Microsecond)

// busyYieldAlways is how long a loop works without parking before it yields whatever
// othersWait says: the Go netpoller also watches descriptors of the application's own (worker
// goroutines' connections), and its timers fire late, while no thread looks there. Each yield
// moves the loop to another thread and wakes one, so a yield every busyYield whether or not
// anything waited cost 5% of the CPU on 5,000 small requests a second.
const busyYieldAlways = int64(time.Millisecond)

// loops (sluice patch) lists the pollers in Polling, for othersWait. It is written when a loop
// starts or stops and read, without a lock, by busy loops.
var loops struct {
	sync.Mutex
	list atomic.Pointer[[]*Poller]
}

// enlist adds p to loops; delist removes it. Both copy the list, so readers never lock.
func (p *Poller) enlist() {
	loops.Lock()
	defer loops.Unlock()
	var list []*Poller
	if old := loops.list.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, p)
	loops.list.Store(&list)
}

func (p *Poller) delist() {
	loops.Lock()
	defer loops.Unlock()
	old := loops.list.Load()
	if old == nil {
		return
	}
	list := make([]*Poller, 0, len(*old))
	for _, q := range *old {
		if q != p {
			list = append(list, q)
		}
	}
	loops.list.Store(&list)
}

// maxPolledLoops bounds the descriptors othersWait passes to one ppoll(2): a stack array.
const maxPolledLoops = 64

// othersWait (sluice patch) reports whether a busy loop should yield its processor now: when
// another loop is parked on the Go netpoller while its epoll descriptor is readable (an event
// waits, and no thread may be watching the netpoller), or when no other loop is parked at all
// (every processor may be held by a busy loop, so goroutines the batches made ready, such as
// workers and dials, wait for a yield; this includes a process with a single loop). It polls
// the parked loops' descriptors with one ppoll(2) of timeout 0, a raw system call. A loop that
// parks or wakes between the flag's read and the call costs at most one needless yield, or
// one missed until the next look; a descriptor closed meanwhile reports POLLNVAL, not POLLIN.
func (p *Poller) othersWait() bool {
	list := loops.list.Load()
	if list == nil {
		return true
	}
	var fds [maxPolledLoops]unix.PollFd
	k := 0
	for _, q := range *list {
		if q != p && q.parked.Load() && k < len(fds) {
			fds[k] = unix.PollFd{Fd: int32(q.fd), Events: unix.POLLIN}
			k++
		}
	}
	if k == 0 {
		return true
	}
	var zero unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(k),
		uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	if e != 0 || n == 0 {
		return false
	}
	for i := range fds[:k] {
		if fds[i].Revents&unix.POLLIN != 0 {
			return true
		}
	}
	return false
}

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
