// Copyright (c) 2026 The sluice authors. Licensed under the Apache License 2.0, as gnet.
//
// sluice patch (PATCHES.md): accept4(2) as a raw system call on Linux.

package socket

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

func sysSocket(family, sotype, proto int) (int, error) {
	return unix.Socket(family, sotype|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
}

// sysAccept accepts a connection on the non-blocking listening socket fd with accept4(2) as
// a raw system call: the call never waits, and an event loop that went through the Go
// scheduler's system call state for it woke the runtime's monitor thread (asleep while every
// processor is idle) on each new connection, which then polled every 20 µs for a
// millisecond or more. The new socket is non-blocking and close-on-exec. Shapes and errors
// are unix.Accept4's: unix.EAGAIN when no connection waits.
func sysAccept(fd int) (nfd int, sa unix.Sockaddr, err error) {
	var rsa unix.RawSockaddrAny
	l := uint32(unsafe.Sizeof(rsa))
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(&rsa)),
		uintptr(unsafe.Pointer(&l)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, nil, e
	}
	nfd = int(r)
	if sa = inetSockaddr(&rsa); sa == nil {
		// Not TCP over IP (a Unix socket): x/sys converts it, from the peer's address.
		if sa, err = unix.Getpeername(nfd); err != nil {
			_ = unix.Close(nfd)
			return -1, nil, err
		}
	}
	return nfd, sa, nil
}

// inetSockaddr converts an IPv4 or IPv6 address the kernel filled in, or returns nil for any
// other family.
func inetSockaddr(rsa *unix.RawSockaddrAny) unix.Sockaddr {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return &unix.SockaddrInet4{Port: int(binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])), Addr: p.Addr}
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		return &unix.SockaddrInet6{Port: int(binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])), ZoneId: p.Scope_id, Addr: p.Addr}
	}
	return nil
}
