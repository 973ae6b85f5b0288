package ingress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sluice-gw/sluice/core/pipeline"
)

// A client that speaks plain HTTP to a TLS entrypoint (http:// where https:// was meant) gets
// a 400 saying so, as nginx ("The plain HTTP request was sent to HTTPS port") and Go's
// net/http ("Client sent an HTTP request to an HTTPS server") answer, instead of a connection
// closed without a word. crypto/tls tells such a client from a TLS one by the first record
// header it reads: it returns a tls.RecordHeaderError holding those five bytes and, when they
// cannot begin a handshake, the raw connection, on which nothing was written yet. Nothing more
// is read or buffered than those bytes (crypto/tls reads at most one small chunk for them);
// a TLS client's handshake takes the path it took before, untouched.

// errPlainHTTP is the answer to a plain HTTP request on a TLS entrypoint.
var errPlainHTTP = &pipeline.GatewayError{Status: 400, Type: pipeline.InvalidRequest, Code: "plain_http_to_tls_port",
	Message: "the plain HTTP request was sent to a TLS port: send it with https://"}

// errPlainHTTPAnswered is what a connection whose plain HTTP request was answered returns to
// fasthttp: net.ErrClosed, on which fasthttp writes nothing more and lets go of it.
var errPlainHTTPAnswered = fmt.Errorf("sluice: plain HTTP request on a TLS entrypoint, answered 400: %w", net.ErrClosed)

// tlsListener is crypto/tls's server listener (tls.NewListener) whose connections have the
// engine answer a client that speaks plain HTTP to them.
type tlsListener struct {
	net.Listener
	config *tls.Config
	e      *FastEngine
}

// Accept implements net.Listener. The handshake runs at the connection's first read, on
// fasthttp's goroutine for it, not here.
func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsServerConn{Conn: tls.Server(c, l.config), e: l.e}, nil
}

// tlsServerConn is a server-side TLS connection (its NetConn is the TCP connection, as for a
// *tls.Conn) that answers a plain HTTP request instead of its handshake.
type tlsServerConn struct {
	*tls.Conn
	e        *FastEngine
	answered bool
}

// Read implements net.Conn.
func (c *tlsServerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.answerPlainHTTP(err) {
		return n, errPlainHTTPAnswered
	}
	return n, err
}

// answerPlainHTTP answers, once, the plain HTTP request whose first bytes made the handshake
// fail with err, and reports whether it did: false when err is any other error.
func (c *tlsServerConn) answerPlainHTTP(err error) bool {
	if c.answered {
		return true
	}
	var rh tls.RecordHeaderError
	if !errors.As(err, &rh) || rh.Conn == nil || !looksLikeHTTP(rh.RecordHeader) {
		return false
	}
	c.answered = true
	c.e.answerPlainHTTP(rh.Conn, rh.RecordHeader)
	return true
}

// looksLikeHTTP reports whether the first five bytes a client sent begin an HTTP/1 request
// line (RFC 9112 §3): a method and a space, or five capitals of a longer method. Methods are
// case-sensitive tokens, and every registered one (IANA's HTTP Method Registry) is written in
// capitals; crypto/tls has already found that these bytes cannot begin a TLS record (no record
// type is a capital letter). net/http recognises "GET /", "HEAD ", "POST ", "PUT /" and
// "OPTIO" only: a DELETE, a PATCH or an absolute-form target are plain HTTP too.
func looksLikeHTTP(hdr [5]byte) bool {
	for i, b := range hdr {
		if b == ' ' && i > 0 {
			return true
		}
		if b < 'A' || b > 'Z' {
			return false
		}
	}
	return true
}

// answerPlainHTTP writes errPlainHTTP on raw, the TCP connection under a TLS connection whose
// client sent plain HTTP starting with hdr, and closes it, lingering (linger.go): the client
// may still be sending its request, and a close with unread bytes would reset the connection
// and lose the answer. The refusal is counted and logged like any other (pipeline.Entrypoint
// .Reject). The answer carries no more of the request than its method, which is all hdr
// surely holds: a HEAD gets the head alone (RFC 9110 §9.3.2).
func (e *FastEngine) answerPlainHTTP(raw net.Conn, hdr [5]byte) {
	rc := pipeline.AcquireRequestCtx()
	for i, b := range hdr {
		if b == ' ' {
			rc.Req.Method = append(rc.Req.Method, hdr[:i]...)
			break
		}
	}
	rc.SetClientAddr(peerAddr(raw.RemoteAddr()))
	e.pipe.Reject(rc, errPlainHTTP)
	resp := rc.AppendHead(nil)
	// The answer fits a socket's send buffer: the deadline only bounds a client that has
	// stopped reading with a full window.
	_ = raw.SetWriteDeadline(time.Now().Add(e.set.linger.idle))
	_, _ = raw.Write(resp)
	rc.Finish()
	pipeline.ReleaseRequestCtx(rc)
	lingerClose(raw, e.set.linger)
}
