// Copyright (c) 2019 Andy Pan
// Copyright (c) 2017 Joshua J Baker
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//go:build linux && !poll_opt

package netpoll

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/logging"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

// Poller represents a poller which is in charge of monitoring file-descriptors.
type Poller struct {
	batch                       uint64          // events fetched so far, in batches (sluice patch: Batch)
	fd                          int             // epoll fd
	file                        *os.File        // fd, registered with the Go netpoller (sluice patch)
	raw                         syscall.RawConn // file's, to park the loop on it
	parked                      atomic.Bool     // its loop waits on the Go netpoller (sluice patch)
	leftReady                   bool            // an event of this batch may still be ready (sluice patch: LeftReady)
	efd                         int             // eventfd
	efdBuf                      []byte          // efd buffer to read an 8-byte integer
	wakeupCall                  int32
	asyncTaskQueue              queue.AsyncTaskQueue // queue with low priority
	urgentAsyncTaskQueue        queue.AsyncTaskQueue // queue with high priority
	highPriorityEventsThreshold int32                // threshold of high-priority events
}

// OpenPoller instantiates a poller.
func OpenPoller() (poller *Poller, err error) {
	poller = new(Poller)
	if poller.fd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		poller = nil
		err = os.NewSyscallError("epoll_create1", err)
		return
	}
	if poller.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		_ = poller.Close()
		poller = nil
		err = os.NewSyscallError("eventfd", err)
		return
	}
	if err = poller.parkable(); err != nil {
		_ = poller.Close()
		poller = nil
		return
	}
	poller.efdBuf = make([]byte, 8)
	if err = poller.AddRead(&PollAttachment{FD: poller.efd}, true); err != nil {
		_ = poller.Close()
		poller = nil
		return
	}
	poller.asyncTaskQueue = queue.NewLockFreeQueue()
	poller.urgentAsyncTaskQueue = queue.NewLockFreeQueue()
	poller.highPriorityEventsThreshold = MaxPollEventsCap
	return
}

// Close closes the poller.
func (p *Poller) Close() error {
	_ = unix.Close(p.efd)
	if p.file != nil {
		return p.file.Close()
	}
	return os.NewSyscallError("close", unix.Close(p.fd))
}

// Make the endianness of bytes compatible with more linux OSs under different processor-architectures,
// according to http://man7.org/linux/man-pages/man2/eventfd.2.html.
var (
	u uint64 = 1
	b        = (*(*[8]byte)(unsafe.Pointer(&u)))[:]
)

// Trigger enqueues task and wakes up the poller to process pending tasks.
// By default, any incoming task will enqueued into urgentAsyncTaskQueue
// before the threshold of high-priority events is reached. When it happens,
// any asks other than high-priority tasks will be shunted to asyncTaskQueue.
//
// Note that asyncTaskQueue is a queue of low-priority whose size may grow large and tasks in it may backlog.
func (p *Poller) Trigger(priority queue.EventPriority, fn queue.Func, param any) (err error) {
	task := queue.GetTask()
	task.Exec, task.Param = fn, param
	if priority > queue.HighPriority && p.urgentAsyncTaskQueue.Length() >= p.highPriorityEventsThreshold {
		p.asyncTaskQueue.Enqueue(task)
	} else {
		// There might be some low-priority tasks overflowing into urgentAsyncTaskQueue in a flash,
		// but that's tolerable because it ought to be a rare case.
		p.urgentAsyncTaskQueue.Enqueue(task)
	}
	if atomic.CompareAndSwapInt32(&p.wakeupCall, 0, 1) {
		err = p.wake()
	}
	return os.NewSyscallError("write", err)
}

// Polling blocks the current goroutine, monitoring the registered file descriptors and waiting for network I/O.
// When I/O occurs on any of the file descriptors, the provided callback function is invoked.
//
// sluice patch: every batch is handled within the callback of one syscall.RawConn.Read on the
// poller's epoll descriptor, which the Go netpoller watches (internal/gnet/PATCHES.md), and
// Polling returns when that Read does. Each batch is fetched without waiting, as a raw system
// call. After a batch of one event whose handler consumed it (it called no LeftReady) the loop
// parks at once: a readiness the kernel reports after the fetch
// reaches the Go netpoller (an epoll instance watched by another is reported to it whenever
// an event is added to its ready list), so the Read's wait returns at once or later, and the
// loop fetches again. A Read called anew would clear the readiness reported meanwhile
// (internal/poll's prepareRead) and could not park before one more fetch, which finds nothing
// after most batches: a system call for each wake-up. A batch of several events, or one that
// left an event ready, is followed by another fetch at once, as every batch was before.
func (p *Poller) Polling(callback PollEventHandler) error {
	el := newEventList(InitPollEventsCap)
	p.enlist()
	defer p.delist()
	var (
		stop                error // what ends Polling
		busySince, lookedAt int64 // when the loop last woke or yielded, and last looked at the others; nanotime
	)
	turn := func(uintptr) bool {
		// The loop waited on the Go netpoller, which took it through the scheduler (as good as
		// a yield), or found its descriptor reported meanwhile, so another thread reads the
		// netpoller: either way nothing waited for this loop's processor.
		busySince = nanotime()
		lookedAt = busySince
		for {
			n, err := epollPoll(p.fd, el.events)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				stop = os.NewSyscallError("epoll_wait", err)
				logging.Errorf("error occurs in epoll: %v", stop)
				return true
			case n == 0:
				p.parked.Store(true)
				return false
			}
			if p.parked.Load() {
				p.parked.Store(false)
			}
			if stop = p.handle(el.events[:n], callback); stop != nil {
				return true
			}
			// A batch of several events says they come while the loop works: fetching again
			// finds the next ones at once, where a park would put the loop behind whatever
			// goroutines the scheduler runs first (beside hostile clients, the streams' time to
			// first token showed it). A batch of one says the loop waits between events, and
			// the fetch would mostly find nothing.
			more := n > 1 || p.leftReady
			p.leftReady = false
			if n == el.size {
				el.expand()
			} else if n < el.size>>1 {
				el.shrink()
			}
			if !more {
				p.parked.Store(true)
				return false
			}
			// The thread that woke this loop from the netpoller watches it no more while the
			// loop works, and the scheduler looks there again only when a thread runs out of
			// work (or after 10 ms, from its monitor). A loop that goes on fetching therefore
			// looks every busyYield whether another loop or goroutine waits for a thread, and
			// yields if one may (and every busyYieldAlways): that wakes an idle processor's
			// thread to watch the netpoller and to run what the batches made ready.
			if now := nanotime(); now-lookedAt > busyYield {
				lookedAt = now
				if now-busySince > busyYieldAlways || p.othersWait() {
					busySince = now
					runtime.Gosched()
				}
			}
		}
	}
	if err := p.raw.Read(turn); err != nil {
		logging.Errorf("error occurs in epoll: %v", err)
		return err
	}
	return stop
}

// LeftReady (sluice patch) tells the poller that an event of the batch being handled may
// still be ready, level-triggered, with no wake-up to come for it (a read that filled the
// loop's buffer, a write that left data queued on a writable socket, one accept of several
// waiting): the loop then fetches again before it parks. Only the loop's own goroutine calls
// it, from a callback of Polling.
func (p *Poller) LeftReady() { p.leftReady = true }

// handle runs the callback for each event of a batch, and the queued tasks when the batch
// holds the poller's eventfd; it returns what ends Polling (the engine stops, an accept
// failed), else nil.
func (p *Poller) handle(events []epollevent, callback PollEventHandler) error {
	p.batch++
	var doChores bool
	for i := range events {
		ev := &events[i]
		if fd := int(ev.Fd); fd == p.efd { // poller is awakened to run tasks in queues.
			doChores = true
		} else {
			err := callback(fd, ev.Events, 0)
			if errors.Is(err, errorx.ErrAcceptSocket) || errors.Is(err, errorx.ErrEngineShutdown) {
				return err
			}
		}
	}
	if !doChores {
		return nil
	}
	task := p.urgentAsyncTaskQueue.Dequeue()
	for ; task != nil; task = p.urgentAsyncTaskQueue.Dequeue() {
		err := task.Exec(task.Param)
		if errors.Is(err, errorx.ErrEngineShutdown) {
			return err
		}
		queue.PutTask(task)
	}
	for i := 0; i < MaxAsyncTasksAtOneTime; i++ {
		if task = p.asyncTaskQueue.Dequeue(); task == nil {
			break
		}
		err := task.Exec(task.Param)
		if errors.Is(err, errorx.ErrEngineShutdown) {
			return err
		}
		queue.PutTask(task)
	}
	atomic.StoreInt32(&p.wakeupCall, 0)
	if (!p.asyncTaskQueue.IsEmpty() || !p.urgentAsyncTaskQueue.IsEmpty()) && atomic.CompareAndSwapInt32(&p.wakeupCall, 0, 1) {
		if err := p.wake(); err != nil {
			logging.Errorf("failed to notify next round of event-loop for leftover tasks, %v", os.NewSyscallError("write", err))
		}
	}
	return nil
}

// AddReadWrite registers the given file descriptor with readable and writable events to the poller.
func (p *Poller) AddReadWrite(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadWriteEvents
	if edgeTriggered {
		ev |= unix.EPOLLET
	}
	ev |= unix.EPOLLRDHUP // sluice patch: Polling parks after a short read (LeftReady)
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// AddRead registers the given file descriptor with readable event to the poller.
func (p *Poller) AddRead(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadEvents
	if edgeTriggered {
		ev |= unix.EPOLLET
	}
	ev |= unix.EPOLLRDHUP // sluice patch: Polling parks after a short read (LeftReady)
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// AddReadExclusive (sluice patch) registers a listening socket level-triggered for reading
// with EPOLLEXCLUSIVE: of the pollers that hold it so, one wakes per connection (an idle one
// when there is one).
func (p *Poller) AddReadExclusive(pa *PollAttachment) error {
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE}))
}

// AddWrite registers the given file descriptor with writable event to the poller.
func (p *Poller) AddWrite(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = WriteEvents
	if edgeTriggered {
		ev |= unix.EPOLLET | unix.EPOLLRDHUP
	}
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// ModRead modifies the given file descriptor with readable event in the poller.
func (p *Poller) ModRead(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadEvents
	if edgeTriggered {
		ev |= unix.EPOLLET
	}
	ev |= unix.EPOLLRDHUP // sluice patch: Polling parks after a short read (LeftReady)
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// ModReadWrite modifies the given file descriptor with readable and writable events in the poller.
func (p *Poller) ModReadWrite(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadWriteEvents
	if edgeTriggered {
		ev |= unix.EPOLLET
	}
	ev |= unix.EPOLLRDHUP // sluice patch: Polling parks after a short read (LeftReady)
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// Delete removes the given file descriptor from the poller.
func (p *Poller) Delete(fd int) error {
	return os.NewSyscallError("epoll_ctl del", unix.EpollCtl(p.fd, unix.EPOLL_CTL_DEL, fd, nil))
}
