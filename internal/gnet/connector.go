// Copyright (c) 2026 The sluice authors. Licensed under the Apache License 2.0, as gnet.
//
// sluice patch (PATCHES.md): the interface of connect_linux.go, declared on every platform so
// that callers can test for it; only the Linux event loops implement it.

package gnet

import "net"

// Connector is implemented by the Linux event loops: Connecting registers a socket whose
// connect is in progress.
type Connector interface {
	// Connecting registers fd, a non-blocking stream socket on which connect(2) was called
	// (it returned 0 or EINPROGRESS), with this event loop, with ctx as its context; remote
	// is its peer's address. It must be called on the loop's own goroutine (from an event
	// handler or a task of this loop) and takes fd over in every case: on an error fd is
	// closed and no handler runs for it.
	//
	// When the connect ends, the loop reports it to the engine's handler: OnOpen once the
	// connection is established, or OnClose with the connect's error (a
	// *os.SyscallError "connect" wrapping the errno, such as ECONNREFUSED) when it failed.
	// Until then the Conn's Close ends the attempt with OnClose(c, nil).
	Connecting(fd int, remote net.Addr, ctx any) (Conn, error)
}
