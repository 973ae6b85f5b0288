package llmsim

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// errQueueFull is returned by acquire when MaxRunning sequences run and MaxWaiting wait.
var errQueueFull = errors.New("llmsim: waiting queue full")

// scheduler admits sequences: up to maxRunning run at once, up to maxWaiting wait in FIFO
// order, and beyond that a request is rejected (vLLM-style continuous batching with a bound
// on the waiting queue).
type scheduler struct {
	mu         sync.Mutex
	maxRunning int
	maxWaiting int
	queue      list.List // of *waiter
	running    atomic.Int64
	waiting    atomic.Int64
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

func newScheduler(maxRunning, maxWaiting int) *scheduler {
	return &scheduler{maxRunning: maxRunning, maxWaiting: maxWaiting}
}

// acquire takes a running slot, waiting in FIFO order (queued reports a wait); it returns
// errQueueFull when the queue is full, or ctx.Err() when ctx ends first (the slot is not
// held then).
func (s *scheduler) acquire(ctx context.Context) (queued bool, err error) {
	s.mu.Lock()
	if s.running.Load() < int64(s.maxRunning) && s.queue.Len() == 0 {
		s.running.Add(1)
		s.mu.Unlock()
		return false, nil
	}
	if s.queue.Len() >= s.maxWaiting {
		s.mu.Unlock()
		return false, errQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	e := s.queue.PushBack(w)
	s.waiting.Store(int64(s.queue.Len()))
	s.mu.Unlock()
	select {
	case <-w.ready:
		return true, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted {
		s.mu.Unlock()
		s.release()
		return true, ctx.Err()
	}
	s.queue.Remove(e)
	s.waiting.Store(int64(s.queue.Len()))
	s.mu.Unlock()
	return true, ctx.Err()
}

// release gives the slot to the first waiter, or frees it.
func (s *scheduler) release() {
	s.mu.Lock()
	if e := s.queue.Front(); e != nil && s.running.Load() <= int64(s.maxRunning) {
		w := s.queue.Remove(e).(*waiter)
		s.waiting.Store(int64(s.queue.Len()))
		w.granted = true
		close(w.ready)
	} else {
		s.running.Add(-1)
	}
	s.mu.Unlock()
}
