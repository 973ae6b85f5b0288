/*
 * Copyright (c) 2021 The Gnet Authors. All rights reserved.
 *
 * Licensed under the Apache License, Version 2.0 (the "License");
 * you may not use this file except in compliance with the License.
 * You may obtain a copy of the License at
 *
 *      http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 *
 */

package io

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Writev calls writev() on Linux.
func Writev(fd int, iov [][]byte) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	return unix.Writev(fd, iov)
}

// Readv calls readv() on Linux.
func Readv(fd int, iov [][]byte) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	return unix.Readv(fd, iov)
}

// Read reads a socket with recvfrom(2) as a raw system call, without entering the Go
// scheduler's system call state. An event loop's descriptors are non-blocking, so the call
// never waits; the scheduler's bookkeeping for a call that might (entersyscall/exitsyscall,
// and sysmon taking the loop's P away when it sees one last over 20 µs, which the loop must
// then win back) cost the gateway 6–12% of its CPU on many slow streams. recvfrom rather
// than read(2): on a socket the kernel's read path adds the file layer's work (position
// lock lookup, access checks, fsnotify) to the same socket receive. A descriptor that is
// not a socket is read with read(2). Shapes and errors are unix.Read's: n is -1 with a
// syscall.Errno on failure (unix.EAGAIN when nothing is ready).
func Read(fd int, p []byte) (int, error) {
	n, err := rawIO(unix.SYS_RECVFROM, fd, p, 0)
	if err == unix.ENOTSOCK || err == unix.ENOSYS {
		return rawIO(unix.SYS_READ, fd, p, 0)
	}
	return n, err
}

// Write writes a socket with sendto(2) as a raw system call, for the reasons Read gives,
// with MSG_NOSIGNAL: a peer that left is reported as EPIPE without a SIGPIPE to deliver. A
// descriptor that is not a socket is written with write(2). Shapes and errors are
// unix.Write's.
func Write(fd int, p []byte) (int, error) {
	n, err := rawIO(unix.SYS_SENDTO, fd, p, unix.MSG_NOSIGNAL)
	if err == unix.ENOTSOCK || err == unix.ENOSYS {
		return rawIO(unix.SYS_WRITE, fd, p, 0)
	}
	return n, err
}

// Peek reads up to len(p) bytes of a socket without taking them from its receive queue
// (recvfrom(2) with MSG_PEEK|MSG_DONTWAIT) as a raw system call, for the reasons Read gives:
// a loop checks an idle connection this way before it reuses it. Shapes and errors are
// Read's: n is 0 with a nil error when the peer closed, -1 with unix.EAGAIN when nothing
// is pending.
func Peek(fd int, p []byte) (int, error) {
	return rawIO(unix.SYS_RECVFROM, fd, p, unix.MSG_PEEK|unix.MSG_DONTWAIT)
}

// rawIO makes the system call trap (read, write, recvfrom or sendto) on fd, p and flags as a
// raw system call; read and write ignore flags, recvfrom and sendto get no address.
func rawIO(trap uintptr, fd int, p []byte, flags int) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	r, _, e := unix.RawSyscall6(trap, uintptr(fd), uintptr(ptr), uintptr(len(p)), uintptr(flags), 0, 0)
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// maxRawIovecs bounds the vectors one RawWritev passes; a longer list is written in part,
// as a short write.
const maxRawIovecs = 64

// RawWritev calls writev(2) as a raw system call, for the reason Read gives, with at most
// maxRawIovecs non-empty buffers of iov (the rest is left for the caller, as after any
// short write); it needs no allocation. Shapes and errors are Writev's.
func RawWritev(fd int, iov [][]byte) (int, error) {
	var vecs [maxRawIovecs]unix.Iovec
	n := 0
	for _, b := range iov {
		if len(b) == 0 {
			continue
		}
		if n == maxRawIovecs {
			break
		}
		vecs[n].Base = &b[0]
		vecs[n].SetLen(len(b))
		n++
	}
	if n == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&vecs[0])), uintptr(n))
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// Close closes a descriptor with close(2) as a raw system call, for the reason Read gives. A
// socket's close never waits unless SO_LINGER is on with a positive timeout, which nothing an
// event loop closes has (sluice sets SO_LINGER only to 0, a reset). Errors are unix.Close's.
func Close(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}

// SocketError returns a socket's pending error (getsockopt(2) SO_ERROR, which also clears it)
// as a raw system call, for the reason Read gives: nil, or the syscall.Errno of a connect
// that failed; a failure of getsockopt itself is returned as its errno.
func SocketError(fd int) error {
	var v int32
	l := uint32(unsafe.Sizeof(v))
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_ERROR,
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	if v != 0 {
		return unix.Errno(v)
	}
	return nil
}
