// Copyright (c) 2026 The sluice Authors. Licensed under the Apache License, Version 2.0.
// A change to gnet for sluice (PATCHES.md): a shared listener armed on one event loop at a
// time.

//go:build linux && !poll_opt

package gnet

import (
	"sync"
	"sync/atomic"
	"time"
)

// acceptToken is the turn to accept from a shared listener. Every loop holds the listener in
// its poller with EPOLLONESHOT, disarmed; one is armed at a time. The armed loop's wake-up
// disarms it, the loop accepts, and it arms the loop with the fewest connections (the next
// one on a tie, so that idle loops take turns).
//
// Why not EPOLLEXCLUSIVE: an idle loop parks on the Go netpoller, which watches the loop's
// epoll instance (pkg/netpoll/epoll_park_linux.go). The kernel stops at an exclusive waiter
// only when a thread waits in that instance's own epoll_wait, so each connection woke every
// parked loop, and all but one found nothing to accept: a goroutine wake-up, a thread, an
// epoll_wait and an accept4 per connection per loop.
type acceptToken struct {
	fd    int
	mu    sync.Mutex   // serialises arming with unsharing
	loops []*eventloop // the loops holding fd, by sharedListener.pos
	gone  bool         // unshared: no loop is armed again

	// paused: no loop is armed after a failed accept, until resume fires or a connection
	// closes (descriptorFreed), whichever comes first. Atomic: every close reads it.
	paused atomic.Bool
	resume *time.Timer
}

func (el *eventloop) holdShared(sl *sharedListener) error {
	if err := el.poller.AddReadDisarmed(&sl.pa); err != nil {
		return err
	}
	t := sl.tok
	t.mu.Lock()
	sl.pos = len(t.loops)
	t.loops = append(t.loops, el)
	t.mu.Unlock()
	return nil
}

// start arms the first loop.
func (t *acceptToken) start() { t.pass(-1) }

// pass arms the loop with the fewest connections, looking from the loop after position from.
// Should epoll_ctl fail (a loop no longer holds the listener only after gone is set, under mu,
// so only for want of kernel memory), the next loop is tried, and when none can be armed the
// turn is passed again after sharedAcceptPause: no loop would accept otherwise.
func (t *acceptToken) pass(from int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.loops)
	if t.gone || n == 0 {
		return
	}
	best, fewest := -1, int32(0)
	for k := 1; k <= n; k++ {
		i := (from + k + n) % n
		if c := t.loops[i].countConn(); best < 0 || c < fewest {
			best, fewest = i, c
		}
	}
	for k := 0; k < n; k++ {
		el := t.loops[(best+k)%n]
		err := el.poller.ArmReadOnce(t.fd)
		if err == nil {
			return
		}
		el.getLogger().Errorf("event-loop(%d) cannot accept from fd=%d: %v", el.idx, t.fd, err)
	}
	time.AfterFunc(sharedAcceptPause, func() { t.pass(from) })
}

// acceptedShared passes the turn on after a wake-up's accepts.
func (el *eventloop) acceptedShared(sl *sharedListener) { sl.tok.pass(sl.pos) }

// pauseShared leaves the listener disarmed after an accept failed for want of a resource (the
// connection stays queued; an armed loop would wake at once, again and again): for the
// engine's accept pause, or until a connection closes. Every loop pauses with it: they share
// the resource.
func (el *eventloop) pauseShared(sl *sharedListener, cause error) {
	if sl.report != nil {
		sl.report(cause, false)
	}
	t, from := sl.tok, sl.pos
	t.mu.Lock()
	t.paused.Store(true)
	t.resume = time.AfterFunc(el.acceptPause(), func() { t.unpause(from) })
	t.mu.Unlock()
}

// unpause ends a pause once, whichever of the timer and a closed connection comes first.
func (t *acceptToken) unpause(from int) {
	t.mu.Lock()
	if !t.paused.Load() {
		t.mu.Unlock()
		return
	}
	t.paused.Store(false)
	t.resume.Stop()
	t.mu.Unlock()
	t.pass(from)
}

// descriptorFreed ends the pause of the shared listeners this loop holds: a connection closed,
// so an accept that failed for want of a descriptor may succeed now. Without it a queue of
// connections that are served and closed at once drains at one connection per pause.
func (el *eventloop) descriptorFreed() {
	for _, sl := range el.shared {
		if sl.tok.paused.Load() {
			sl.tok.unpause(sl.pos)
		}
	}
}

// releaseShared takes the listener out of this loop's poller, and first stops every loop from
// arming it again: a descriptor number reused after the application closes the listener
// must not be armed in a poller that holds it for another connection.
func (el *eventloop) releaseShared(sl *sharedListener) error {
	t := sl.tok
	t.mu.Lock()
	t.gone = true
	t.mu.Unlock()
	return el.poller.Delete(sl.fd)
}
