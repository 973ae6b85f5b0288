// Copyright (c) 2026 The sluice authors. Licensed under the Apache License 2.0, as gnet.
//
// sluice patch (PATCHES.md): which batch of events the loop is dispatching.

//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package netpoll

// Batch returns the number of event batches Polling has fetched, the current one included:
// it changes when the next batch is fetched, after the tasks the current one queued. Every
// event of a batch was reported before any of its handlers ran, so an event whose descriptor
// the loop closed during the same batch belongs to the closed connection, whatever the
// descriptor holds now. Only the poller's own goroutine may call it.
func (p *Poller) Batch() uint64 { return p.batch }
