package harness

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pacer sleeps precisely: a non-blocking timerfd read through the Go
// netpoller. The goroutine parks like any network wait (it holds no thread
// and no P, unlike a nanosleep system call, which would keep the P of a
// 2-CPU machine from the workers reading responses), and the netpoller wakes
// as soon as the timer fires, whatever its own millisecond timeout.
type pacer struct {
	f  *os.File
	fd int // owned by f; f.Fd() is not used because it makes the fd blocking
}

// newPacer returns a pacer, or nil when timerfd is unavailable (callers then
// fall back to time.Sleep).
func newPacer() *pacer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return &pacer{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}
}

// sleep blocks for d (> 0).
func (p *pacer) sleep(d time.Duration) {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if unix.TimerfdSettime(p.fd, 0, &its, nil) != nil {
		time.Sleep(d)
		return
	}
	var b [8]byte
	_, _ = p.f.Read(b[:]) // the expiration count; errors end the wait early and waitUntil re-checks
}

func (p *pacer) close() { _ = p.f.Close() }
