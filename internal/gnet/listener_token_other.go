// Copyright (c) 2026 The sluice Authors. Licensed under the Apache License, Version 2.0.
// A change to gnet for sluice (PATCHES.md): where loops block in their own poller, each holds
// a shared listener and the kernel picks the loop that wakes.

//go:build darwin || dragonfly || freebsd || netbsd || openbsd || (linux && poll_opt)

package gnet

import (
	"time"

	"github.com/panjf2000/gnet/v2/pkg/queue"
)

// acceptToken has nothing to pass here: every loop holds the listener (EPOLLEXCLUSIVE with
// poll_opt on Linux, where a loop blocks in epoll_wait itself and the kernel wakes one of
// those waiting).
type acceptToken struct{ fd int }

func (t *acceptToken) start() {}

func (el *eventloop) holdShared(sl *sharedListener) error { return el.poller.AddReadExclusive(&sl.pa) }

func (el *eventloop) acceptedShared(*sharedListener) {}

func (el *eventloop) releaseShared(sl *sharedListener) error {
	if sl.paused {
		return nil
	}
	return el.poller.Delete(sl.fd)
}

// pauseShared takes a shared listener out of this loop's poller after an accept failed for
// want of a resource, for the engine's accept pause or until a connection of this loop closes.
func (el *eventloop) pauseShared(sl *sharedListener, cause error) {
	if sl.report != nil {
		sl.report(cause, false)
	}
	if err := el.poller.Delete(sl.fd); err != nil {
		return
	}
	sl.paused = true
	time.AfterFunc(el.acceptPause(), func() {
		_ = el.poller.Trigger(queue.HighPriority, func(any) error {
			el.unpause(sl)
			return nil
		}, nil)
	})
}

// unpause puts a paused shared listener back in this loop's poller, once.
func (el *eventloop) unpause(sl *sharedListener) {
	if sl.gone || !sl.paused {
		return
	}
	sl.paused = false
	if err := el.poller.AddReadExclusive(&sl.pa); err != nil {
		el.getLogger().Errorf("event-loop(%d) cannot accept from fd=%d again: %v", el.idx, sl.fd, err)
	}
}

// descriptorFreed ends the pause of the shared listeners this loop holds: a connection closed,
// so an accept that failed for want of a descriptor may succeed now.
func (el *eventloop) descriptorFreed() {
	for _, sl := range el.shared {
		el.unpause(sl)
	}
}
