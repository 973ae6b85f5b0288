// Copyright (c) 2026 The sluice Authors. Licensed under the Apache License, Version 2.0.
// A change to gnet for sluice (PATCHES.md): listening sockets the application owns, shared by
// every event loop.

//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package gnet

import (
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
	"github.com/panjf2000/gnet/v2/pkg/queue"
	"github.com/panjf2000/gnet/v2/pkg/socket"
)

// sharedAcceptMax is the most connections one wake-up of a loop accepts: the listener is
// level-triggered, so the rest wake a loop again, and a burst of connections does not hold
// up the loop's other traffic.
const sharedAcceptMax = 16

// sharedAcceptPause is how long a loop leaves a shared listener alone after accept failed for
// want of a resource (descriptors, memory), unless Options.AcceptPause says otherwise: the
// connection stays queued, and a level-triggered listener would otherwise wake the loop at
// once, again and again. A connection the engine closes ends the pause sooner
// (descriptorFreed): it frees the descriptor the accept lacked.
const sharedAcceptPause = 100 * time.Millisecond

// acceptPause is the engine's pause after a failed accept.
func (el *eventloop) acceptPause() time.Duration {
	if d := el.engine.opts.AcceptPause; d > 0 {
		return d
	}
	return sharedAcceptPause
}

// sharedListener is a listening socket the application owns, held by every event loop's
// poller (Engine.ShareListener).
type sharedListener struct {
	fd     int
	addr   net.Addr
	ctx    any // the context of every connection accepted from it
	report func(err error, dropped bool)
	pa     netpoll.PollAttachment
	tok    *acceptToken // the loops' turn to accept from fd (listener_token_*.go)
	pos    int          // this loop's place in tok
	paused bool         // out of this loop's poller after a failed accept (acceptPause)
	gone   bool         // unshared: a pending resume does nothing
}

// ShareListener registers the listening socket fd on every event loop: a loop woken for it
// accepts the waiting connections itself (non-blocking, close-on-exec) and opens them on
// itself, with ctx as their context, without a hand-off to another goroutine or loop. One
// loop wakes per connection: on Linux fd is armed on one loop at a time, which passes it on
// after each wake-up to the loop with the fewest connections (listener_token_linux.go);
// elsewhere each loop holds fd and the kernel wakes them as it does.
//
// When an accept fails for want of a resource (descriptors, memory), fd is left alone for
// Options.AcceptPause, or until a connection of the engine closes. report, when not nil, is
// called on the loop with that error (dropped false), and with the error of a connection
// accepted and then not opened (dropped true).
//
// fd must stay open until UnshareListener has returned. ShareListener returns once every loop
// holds fd, or the first error (the loops that took it keep it until UnshareListener).
func (e Engine) ShareListener(fd int, ctx any, report func(err error, dropped bool)) error {
	if err := e.Validate(); err != nil {
		return err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return err
	}
	addr := socket.SockaddrToTCPOrUnixAddr(sa)
	tok := &acceptToken{fd: fd}
	err = e.eng.onEveryLoop(func(el *eventloop) error {
		if el.shared == nil {
			el.shared = make(map[int]*sharedListener)
		}
		sl := &sharedListener{fd: fd, addr: addr, ctx: ctx, report: report, tok: tok}
		sl.pa = netpoll.PollAttachment{FD: fd, Callback: func(int, netpoll.IOEvent, netpoll.IOFlags) error {
			return el.acceptShared(sl)
		}}
		if err := el.holdShared(sl); err != nil {
			return err
		}
		el.shared[fd] = sl
		return nil
	})
	tok.start()
	return err
}

// UnshareListener removes fd from every event loop; once it has returned no loop accepts from
// fd, which the application may then close. Loops that have stopped hold nothing.
func (e Engine) UnshareListener(fd int) error {
	if e.eng == nil {
		return nil
	}
	return e.eng.onEveryLoop(func(el *eventloop) error {
		sl := el.shared[fd]
		if sl == nil {
			return nil
		}
		delete(el.shared, fd)
		sl.gone = true
		return el.releaseShared(sl)
	})
}

// onEveryLoop runs f on every event loop (a task of the loop's own goroutine) and waits for
// all, or until the engine stops; it returns the first error.
func (eng *engine) onEveryLoop(f func(el *eventloop) error) error {
	var loops []*eventloop
	eng.eventLoops.iterate(func(_ int, el *eventloop) bool {
		loops = append(loops, el)
		return true
	})
	results := make(chan error, len(loops))
	for _, el := range loops {
		el := el
		if err := el.poller.Trigger(queue.HighPriority, func(any) error {
			results <- f(el)
			return nil
		}, nil); err != nil {
			results <- err
		}
	}
	var first error
	for range loops {
		select {
		case err := <-results:
			if first == nil {
				first = err
			}
		case <-eng.concurrency.ctx.Done():
			return errors.Join(first, ErrEngineStopped)
		}
	}
	return first
}

// ErrEngineStopped is returned by ShareListener and UnshareListener when the engine stopped
// before every loop ran the change.
var ErrEngineStopped = errors.New("gnet: the engine stopped")

// acceptShared accepts from a shared listener on this loop and opens the connections here.
func (el *eventloop) acceptShared(sl *sharedListener) error {
	for i := 0; i < sharedAcceptMax; i++ {
		nfd, sa, err := socket.Accept(sl.fd)
		switch err {
		case nil:
		case unix.EAGAIN:
			el.acceptedShared(sl)
			return nil
		case unix.EINTR, unix.ECONNRESET, unix.ECONNABORTED:
			continue
		default:
			el.pauseShared(sl, err)
			return nil
		}
		c := newStreamConn("tcp", nfd, el, sa, sl.addr, socket.SockaddrToTCPOrUnixAddr(sa))
		c.ctx = sl.ctx
		if err := el.register0(c); err != nil && sl.report != nil {
			sl.report(err, true)
		}
	}
	el.acceptedShared(sl)
	return nil
}
