//go:build linux || darwin || freebsd || netbsd || openbsd

package pool

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
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

// alive reports whether an idle conn may carry the next request: not closed or reset by the
// upstream, and no bytes from it since its last response (a body on a HEAD, 204 or 304
// answer, a body longer than its Content-Length, a "408 Request Timeout" sent on idle close):
// read as the next request's answer, they would answer it with another's. On a TLS conn
// pending bytes may be records that carry no data (a session ticket, a key update), so they
// are read through the TLS layer to tell (tlsQuiet).
func (c *conn) alive() bool {
	if c.pk.rc == nil {
		return true
	}
	if err := c.pk.rc.Read(c.pk.fn); err != nil {
		return false
	}
	pending := false
	switch {
	case c.pk.err == syscall.EAGAIN || c.pk.err == syscall.EWOULDBLOCK:
		// nothing to read on the socket: idle and open
	case c.pk.err == syscall.EINTR:
		return true
	case c.pk.err != nil:
		return false // ECONNRESET and friends
	case c.pk.n == 0:
		return false // EOF: the upstream closed it
	default:
		pending = true
	}
	if c.nc == c.raw {
		return !pending
	}
	return c.tlsQuiet(pending)
}

// tlsPendingWait is how long tlsQuiet waits for the records pending on an idle TLS conn's
// socket: they have arrived, so only a record cut across segments takes longer than the
// system calls, and a conn whose records bring no data pays all of it (rare: servers send
// session tickets before their first response).
const tlsPendingWait = time.Millisecond

// tlsQuiet reports whether an idle TLS conn holds no application data and no alert. crypto/tls
// may hold some the socket no longer shows: the records of the last read past the response's
// end, which a read bounded by the body's length left undecrypted or unread. When the socket
// has nothing (pending false), a read with the socket's reads turned off (quietConn) returns
// those without a system call, a deadline or an allocation; when it has bytes, the read may
// wait tlsPendingWait for them.
func (c *conn) tlsQuiet(pending bool) bool {
	if !pending && c.quiet != nil {
		c.quiet.off = true
		n, err := c.nc.Read(c.pk.b[:])
		c.quiet.off = false
		return n == 0 && err == errQuiet
	}
	if c.nc.SetReadDeadline(time.Now().Add(tlsPendingWait)) != nil {
		return false
	}
	if n, err := c.nc.Read(c.pk.b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	// A timeout leaves a tls.Conn usable (crypto/tls keeps only non-temporary errors).
	return c.nc.SetReadDeadline(time.Time{}) == nil
}
