package pool

import "net"

// quietConn is the TCP socket under an upstream's tls.Conn. While off is set (by the goroutine
// that holds the idle conn, around one read), a read fails at once with errQuiet instead of
// reaching the socket: crypto/tls then returns what it holds already, or errQuiet, which it
// does not keep (a temporary net.Error), so the conn reads on afterwards.
type quietConn struct {
	net.Conn
	off bool
}

func (q *quietConn) Read(b []byte) (int, error) {
	if q.off {
		return 0, errQuiet
	}
	return q.Conn.Read(b)
}

// NetConn returns the TCP socket, for those that look through a tls.Conn for it (a
// WebSocket tunnel's half-close).
func (q *quietConn) NetConn() net.Conn { return q.Conn }

// errQuiet is a quietConn's read while off: temporary, so that crypto/tls does not keep it.
var errQuiet error = quietError{}

type quietError struct{}

func (quietError) Error() string   { return "pool: idle check read" }
func (quietError) Timeout() bool   { return true }
func (quietError) Temporary() bool { return true }
