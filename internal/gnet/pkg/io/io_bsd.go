// Copyright (c) 2021 The Gnet Authors. All rights reserved.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package io

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Writev invokes the writev system call directly.
//
// Note that SYS_WRITEV is about to be deprecated on Darwin
// and the Go team suggested to use libSystem wrappers instead of direct system-calls,
// hence, this way to implement the writev might not be backward-compatible in the future.
func Writev(fd int, bs [][]byte) (int, error) {
	if len(bs) == 0 {
		return 0, nil
	}
	iov := bytes2iovec(bs)
	n, _, err := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov))) //nolint:staticcheck
	if err != 0 {
		return int(n), err
	}
	return int(n), nil
}

// Readv invokes the readv system call directly.
//
// Note that SYS_READV is about to be deprecated on Darwin
// and the Go team suggested to use libSystem wrappers instead of direct system-calls,
// hence, this way to implement the readv might not be backward-compatible in the future.
func Readv(fd int, bs [][]byte) (int, error) {
	if len(bs) == 0 {
		return 0, nil
	}
	iov := bytes2iovec(bs)
	// syscall
	n, _, err := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov))) //nolint:staticcheck
	if err != 0 {
		return int(n), err
	}
	return int(n), nil
}

var _zero uintptr

func bytes2iovec(bs [][]byte) []unix.Iovec {
	iovecs := make([]unix.Iovec, len(bs))
	for i, b := range bs {
		iovecs[i].SetLen(len(b))
		if len(b) > 0 {
			iovecs[i].Base = &b[0]
		} else {
			iovecs[i].Base = (*byte)(unsafe.Pointer(&_zero))
		}
	}
	return iovecs
}

// Read calls read(2). (The raw system calls of io_linux.go are measured on Linux only.)
func Read(fd int, p []byte) (int, error) { return unix.Read(fd, p) }

// Write calls write(2).
func Write(fd int, p []byte) (int, error) { return unix.Write(fd, p) }

// Peek reads up to len(p) bytes of a socket without taking them from its receive queue
// (recvfrom(2) with MSG_PEEK|MSG_DONTWAIT); io_linux.go makes it a raw system call.
func Peek(fd int, p []byte) (int, error) {
	n, _, err := unix.Recvfrom(fd, p, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil {
		return -1, err
	}
	return n, nil
}

// RawWritev is Writev, already a raw system call here.
func RawWritev(fd int, iov [][]byte) (int, error) { return Writev(fd, iov) }

// Close closes a descriptor (close(2)); io_linux.go makes it a raw system call.
func Close(fd int) error { return unix.Close(fd) }
