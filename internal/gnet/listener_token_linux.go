// Copyright (c) 2026 The sluice Authors. Licensed under the Apache License, Version 2.0.
// A change to gnet for sluice (PATCHES.md): a shared listener armed on one event loop at a
// time.

//go:build linux && !poll_opt

package gnet

import (
	"sync"
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

// pauseShared leaves the listener disarmed for sharedAcceptPause after an accept failed for
// want of a resource (the connection stays queued; an armed loop would wake at once, again and
// again), then passes the turn on. Every loop pauses with it: they share the resource.
func (el *eventloop) pauseShared(sl *sharedListener, cause error) {
	if sl.report != nil {
		sl.report(cause, false)
	}
	time.AfterFunc(sharedAcceptPause, func() { sl.tok.pass(sl.pos) })
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
