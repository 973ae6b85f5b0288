// Copyright (c) 2026 The sluice authors. Licensed under the Apache License 2.0, as gnet.
//
// sluice patch (PATCHES.md): a connection whose connect(2) is in progress, registered on the
// loop that runs the caller, with no goroutine in between.

//go:build linux

package gnet

import (
	"net"
	"os"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	gio "github.com/panjf2000/gnet/v2/pkg/io"
)

func (el *eventloop) Connecting(fd int, remote net.Addr, ctx any) (Conn, error) {
	if el.engine.isShutdown() {
		_ = unix.Close(fd)
		return nil, errorx.ErrEngineInShutdown
	}
	// No local address: getsockname(2) would cost a system call per connection for what
	// LocalAddr alone reports.
	c := newStreamConn("tcp", fd, el, nil, nil, remote)
	c.ctx = ctx
	c.connecting = true
	// Level-triggered read and write interest: writable (or an error) ends the connect.
	if err := el.poller.AddReadWrite(&c.pollAttachment, false); err != nil {
		_ = unix.Close(fd)
		c.release()
		return nil, os.NewSyscallError("epoll_ctl add", err)
	}
	el.connections.addConn(c, el.idx)
	return c, nil
}

// connected runs on the first event of a connecting conn: the connect ended. On success the
// conn opens (OnOpen, whose output and the writes made meanwhile go out as for any
// connection); on failure it closes with the connect's error.
func (el *eventloop) connected(c *conn) error {
	c.connecting = false
	if err := gio.SocketError(c.fd); err != nil {
		c.outboundBuffer.Release()
		return el.closeConnecting(c, os.NewSyscallError("connect", err))
	}
	if c.outboundBuffer.IsEmpty() {
		if err := el.poller.ModRead(&c.pollAttachment, false); err != nil {
			return el.closeConnecting(c, err)
		}
	}
	return el.open(c)
}

// closeConnecting closes a connection whose connect ended without opening it: marked opened so
// that close runs OnClose and releases the descriptor.
func (el *eventloop) closeConnecting(c *conn, err error) error {
	c.opened = true
	return el.close(c, err)
}
