// Copyright (c) 2026 The sluice authors. Licensed under the Apache License 2.0, as gnet.
//
// sluice patch (PATCHES.md): events fetched for a connection that a handler of the same batch
// closed are dropped, whatever connection the descriptor holds by the time they are
// dispatched.

//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package gnet

// closedIn records, per descriptor, the poller batch in which the loop last closed it
// (netpoll.Poller.Batch; 0: never). A handler may close another connection than its own: a
// write to a client that reset fails and closes it while the client's own event waits later
// in the batch. The descriptor may even be reused within the batch, by an accept or a
// connect, and the old connection's event must not reach the new one: an error event would
// end a connect still in progress as though it had succeeded. Grown by growFor, as connMatrix is, 8 bytes
// per descriptor.
type closedIn []uint64

// markClosed notes that fd was closed during the batch being dispatched.
func (el *eventloop) markClosed(fd int) {
	if fd < 0 {
		return
	}
	el.closed = growFor(el.closed, fd)
	el.closed[fd] = el.poller.Batch()
}

// staleEvent reports whether an event of the batch being dispatched was fetched for a
// connection on fd that a handler of the same batch has closed since.
func (el *eventloop) staleEvent(fd int) bool {
	return uint(fd) < uint(len(el.closed)) && el.closed[fd] == el.poller.Batch()
}

// growFor returns s, or a copy at least twice as long (64 at least), that holds index i: the
// per-descriptor slices of a loop grow to the largest descriptor it has held.
func growFor[T any](s []T, i int) []T {
	if i < len(s) {
		return s
	}
	n := 2 * len(s)
	if n < 64 {
		n = 64
	}
	if n < i+1 {
		n = i + 1
	}
	grown := make([]T, n)
	copy(grown, s)
	return grown
}
