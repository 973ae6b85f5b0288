package gateway

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// net/http refuses some requests before any handler runs and writes its answer on the
// connection itself, as text/plain: a head it cannot parse (400), no Host or a malformed one
// (400), an HTTP version it does not serve (505), a transfer coding it does not know (501), an
// expectation other than 100-continue (417, empty), a head over MaxHeaderBytes (431). No hook
// of http.Server shapes those answers, so the admin listener's connections do: a response
// written on a connection while no handler is answering a request there is one of net/http's
// own, and an error among them is replaced by the admin API's JSON error with the same status.
// net/http writes each in a single Write, once the previous response is out (the connection
// turns idle only then) and before the connection closes.

// adminListener is the admin API's listener, whose connections answer net/http's own errors
// in JSON.
type adminListener struct{ net.Listener }

// Accept implements net.Listener.
func (l adminListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &adminConn{Conn: c}, nil
}

// adminConn is an admin API connection.
type adminConn struct {
	net.Conn
	// answering: a handler took the connection's current request; cleared when the
	// connection turns idle, its response written.
	answering bool
}

// CloseWrite shuts down the writing side of the TCP connection: net/http half-closes a
// connection before it closes one whose client may still be sending (a head over the limit,
// an unread body), so that the client reads the answer instead of a reset. net/http finds
// it by a type assertion, which the wrapper must keep passing.
func (c *adminConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// adminConnKey is the request context key of the *adminConn a request came on.
type adminConnKey struct{}

// adminConnContext is http.Server.ConnContext: it records c in its requests' contexts.
func adminConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, adminConnKey{}, c)
}

// adminConnState is http.Server.ConnState: an idle connection has no response in progress.
// net/http calls it, Write and the handler on the connection's own goroutine.
func adminConnState(c net.Conn, s http.ConnState) {
	if ac, ok := c.(*adminConn); ok && s == http.StateIdle {
		ac.answering = false
	}
}

// markAnswering marks the connection of each request as answered by a handler, so that its
// response passes as written.
func markAnswering(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ac, ok := r.Context().Value(adminConnKey{}).(*adminConn); ok {
			ac.answering = true
		}
		next.ServeHTTP(w, r)
	})
}

// Write implements net.Conn. An error response of net/http's own is written as the admin
// API's JSON error instead; p counts as written when that was.
func (c *adminConn) Write(p []byte) (int, error) {
	if c.answering || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || len(p) < 12 {
		return c.Conn.Write(p)
	}
	status, err := strconv.Atoi(string(p[9:12]))
	if err != nil || status < 400 {
		return c.Conn.Write(p) // OPTIONS *: net/http's 200
	}
	var body []byte
	if _, b, ok := bytes.Cut(p, []byte("\r\n\r\n")); ok {
		body = b
	}
	e := netHTTPError(status, body)
	out := http1.AppendStatusLine(nil, 1, 1, e.Status, nil)
	b := pipeline.AppendErrorBody(nil, e)
	out = append(out, "Content-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(b)), 10)
	out = append(out, "\r\n\r\n"...)
	out = append(out, b...)
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// netHTTPError is the admin API's error for the answer net/http made with status and body
// (its text: "400 Bad Request: missing required Host header", or the status alone), with the
// code an entrypoint answers that status with.
func netHTTPError(status int, body []byte) *pipeline.GatewayError {
	prefix := strconv.Itoa(status) + " " + http.StatusText(status)
	msg := ""
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		msg = "the request head is over 1 MiB, the most the admin API reads"
	case http.StatusNotImplemented:
		msg = "unsupported transfer encoding: the admin API takes chunked request bodies only"
	case http.StatusExpectationFailed:
		msg = "the only expectation the admin API meets is 100-continue (RFC 9110 §10.1.1)"
	default:
		if rest, ok := bytes.CutPrefix(body, []byte(prefix+": ")); ok {
			msg = string(rest) // net/http's reason: "missing required Host header", "unsupported protocol version"
		} else if status == http.StatusBadRequest {
			msg = "malformed request: not an HTTP/1.1 request head"
		} else {
			msg = http.StatusText(status)
		}
	}
	e := pipeline.FramingGatewayError(&http1.Error{Status: status, Msg: msg})
	if status == http.StatusExpectationFailed {
		e.Code = "expectation_failed"
	}
	return e
}
