package ingress

import (
	"net"
	"sync"
	"time"
)

// Lingering close (RFC 9112 §9.6). When the gateway answers before it has read the whole
// request (a body or head over its limit, a framing error) and closes the connection, the client
// is often still sending: most clients write the whole request before they read. A socket
// closed with unread bytes in its receive buffer, or receiving bytes after the close, makes the
// kernel send a reset, and a reset makes the client's kernel drop the response it has not read
// yet: the client sees "connection reset" or "broken pipe" instead of the gateway's 413. So the
// gateway closes only its sending side (the client sees the response end), reads and discards
// what still arrives, and closes once the client closes or a bound below is reached. A response
// that ends the connection while the client has sent more (a pipelined request) ends it the
// same way. Discarded bytes are never buffered: a lingering connection costs a socket, not its
// traffic.
const (
	// lingerTimeout bounds a lingering close from its start: the read_header_timeout default, the
	// time a client may already hold a connection without a complete request. It lets the upload
	// of lingerMaxBytes finish at about 54 Mbit/s.
	lingerTimeout = 10 * time.Second
	// lingerIdleTimeout ends a lingering close once nothing arrived for this long: the client
	// has sent all it meant to, or stalled, and a close then resets nothing it still reads.
	lingerIdleTimeout = 2 * time.Second
	// lingerMaxBytes bounds the bytes discarded: 4 times the default max_body_bytes, more than
	// an oversized prompt; a client still sending after that is not finishing a request.
	lingerMaxBytes = 64 << 20
	// lingerReadBytes is the buffer one lingering fasthttp connection discards into.
	lingerReadBytes = 32 << 10
)

// lingerLimits are the bounds of one engine's lingering closes (tests shorten them).
type lingerLimits struct {
	total time.Duration // from the start of the linger
	idle  time.Duration // with no byte arriving
	bytes int64         // discarded
}

func (l *lingerLimits) fill() {
	if l.total <= 0 {
		l.total = lingerTimeout
	}
	if l.idle <= 0 {
		l.idle = lingerIdleTimeout
	}
	if l.bytes <= 0 {
		l.bytes = lingerMaxBytes
	}
}

var lingerBufs = sync.Pool{New: func() any { b := make([]byte, lingerReadBytes); return &b }}

// lingerClose closes the sending side of c (a TCP connection, possibly under TLS and counting
// wrappers), discards what the client still sends within lim, and closes c. It blocks for up
// to lim.total (a TLS close_notify to a client that reads nothing may take TLS's own 5 s);
// closing c from another goroutine ends it at once.
func lingerClose(c net.Conn, lim lingerLimits) {
	defer c.Close()
	tcp := unwrapTCP(c)
	if tcp == nil {
		return
	}
	end := time.Now().Add(lim.total)
	closeWrite(c)
	bp := lingerBufs.Get().(*[]byte)
	defer lingerBufs.Put(bp)
	var n int64
	for n <= lim.bytes {
		dl := time.Now().Add(lim.idle)
		if dl.After(end) {
			dl = end
		}
		if tcp.SetReadDeadline(dl) != nil {
			return
		}
		k, err := tcp.Read(*bp)
		n += int64(k)
		if err != nil {
			return // the client closed, a bound passed, or the connection was cut
		}
	}
}

// closeWrite ends the sending side of c: TLS's close_notify, then the TCP FIN
// (shutdown(SHUT_WR)), each where a layer of c has one.
func closeWrite(c net.Conn) {
	for i := 0; i < maxWraps && c != nil; i++ {
		if w, ok := c.(interface{ CloseWrite() error }); ok {
			_ = w.CloseWrite()
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}
