//go:build linux || darwin || freebsd || netbsd || openbsd

package pool

import (
	"net"
	"syscall"
)

// peeker checks an idle conn without blocking and without consuming bytes: a recv with
// MSG_PEEK|MSG_DONTWAIT on the raw socket. It replaces the per-conn background reader that
// net/http uses to notice an upstream closing an idle conn: no goroutine, one system call when
// the conn is taken from the pool.
type peeker struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // c.peek bound once at dial, so a check does not allocate
	n   int
	err error
	b   [1]byte
}

func (c *conn) initPeek() {
	tc, ok := c.raw.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	c.pk.rc = rc
	c.pk.fn = c.peek
}

func (c *conn) peek(fd uintptr) bool {
	c.pk.n, _, c.pk.err = syscall.Recvfrom(int(fd), c.pk.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true // never wait for readiness
}

// alive reports whether an idle conn may still carry a request: not closed or reset by the
// upstream, and (plaintext) no unsolicited bytes such as a "408 Request Timeout" sent on idle
// close. On a TLS conn pending bytes are not judged (session tickets, alerts): the keep-alive
// race retry covers a close there.
func (c *conn) alive() bool {
	if c.pk.rc == nil {
		return true
	}
	if err := c.pk.rc.Read(c.pk.fn); err != nil {
		return false
	}
	switch {
	case c.pk.err == syscall.EAGAIN || c.pk.err == syscall.EWOULDBLOCK:
		return true // nothing to read: idle and open
	case c.pk.err == syscall.EINTR:
		return true
	case c.pk.err != nil:
		return false // ECONNRESET and friends
	case c.pk.n == 0:
		return false // EOF: the upstream closed it
	default:
		return c.nc != c.raw // bytes pending: fine under TLS, unsolicited in plaintext
	}
}
