package pool

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/sluice-gw/sluice/core/http1"
)

// Sentinel errors. RoundTrip and ReadBody return errors that wrap exactly one of them (test with
// errors.Is); the comment names the status the gateway answers a client with (RFC 9110 §15.6).
// Alone, each reads "sluice: upstream <what>"; inside an *UpstreamError, which already names
// the upstream, only its <what>.
var (
	// ErrDial: the TCP connect or TLS handshake to the upstream failed or timed out
	// (Options.DialTimeout), or the Pool was closed. 502 Bad Gateway.
	ErrDial error = &kindError{"dial failed"}
	// ErrTimeout: no complete response head within Options.ResponseHeaderTimeout after the
	// request was written, a body read silent for Options.StreamIdleTimeout, or a request write
	// stalled for Options.StreamIdleTimeout. 504 Gateway Timeout.
	ErrTimeout error = &kindError{"timeout"}
	// ErrUpstreamProto: the upstream sent a malformed response head or body framing
	// (RFC 9112), or a head larger than the limits. 502 Bad Gateway.
	ErrUpstreamProto error = &kindError{"malformed response"}
	// ErrAborted: Abort was called (the client left); the upstream connection is closed.
	// Not an upstream failure: count it as a client cancellation.
	ErrAborted error = &kindError{"exchange aborted"}
	// ErrUpstreamClosed: the upstream closed or reset the connection before the response
	// (or its body) was complete. 502 Bad Gateway.
	ErrUpstreamClosed error = &kindError{"closed connection"}
	// ErrPoolClosed is wrapped together with ErrDial when RoundTrip runs on a closed Pool.
	ErrPoolClosed error = &kindError{"pool closed"}
)

// LocalResource reports whether err (a dial's, or any error wrapping a syscall.Errno) failed
// for want of a resource of the gateway's own host: descriptors (EMFILE, ENFILE), kernel
// memory (ENOBUFS, ENOMEM) or a local port (EADDRNOTAVAIL: the ephemeral range is spent for
// that destination). Such a failure says nothing of the upstream: it must not count against
// the backend (passive health, circuit breakers, active health checks), and another backend
// would most likely fail the same way.
func LocalResource(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL:
		return true
	}
	return false
}

// kindError is a sentinel: what went wrong with an upstream, without saying which one.
type kindError struct{ what string }

func (k *kindError) Error() string { return "sluice: upstream " + k.what }

// UpstreamError is a failure of an exchange with the upstream at Addr: while doing Op (empty
// for the dial itself), of the kind Kind (one of the sentinel errors above), caused by Err
// (nil when there is no more to say). errors.Is finds both Kind and Err. It reads
// "sluice: upstream 127.0.0.1:9: dial failed: connection refused": the upstream once, then
// for a dial that it failed, then its Failure, so a log line carrying it does not repeat
// itself.
type UpstreamError struct {
	Addr string
	Op   string
	Kind error
	Err  error
}

// Error returns "sluice: upstream ADDR: ", "dial failed: " for a dial, and the Failure.
func (e *UpstreamError) Error() string {
	if e.Kind == ErrDial {
		return "sluice: upstream " + e.Addr + ": " + what(ErrDial) + ": " + e.Failure()
	}
	return "sluice: upstream " + e.Addr + ": " + e.Failure()
}

// Failure says what went wrong without naming the upstream, each fact once, for a log record
// that carries the backend and the stage (connect, response head, body) apart:
//
//	connection refused
//	no connection within dial_timeout
//	malformed response head: malformed status line (RFC 9112 §4)
//	connection reset by peer
//	closed the connection before answering
//	closed the connection before the response was complete
//	no response head within response_header_timeout
//	nothing read within stream_idle_timeout
//
// A dial's failure is its cause alone: the record's stage says it was the connect, which the
// net package's "dial tcp ADDR: connect:" would say twice more. The timeouts are named by the
// service keys that set Options.DialTimeout, Options.ResponseHeaderTimeout and
// Options.StreamIdleTimeout. An upstream that closes before the response head "closed the
// connection before answering", in the words of the 502 the client gets
// (core/pipeline.ErrUpstreamClosed). A cause that is a net.OpError on another address than
// Addr (the one a host name resolved to) keeps that address.
func (e *UpstreamError) Failure() string {
	switch e.Kind {
	case ErrDial:
		return e.dialFailure()
	case ErrTimeout:
		if e.Op == OpReadHead {
			return "no response head within response_header_timeout"
		}
		return "nothing " + pastTense(e.Op) + " within stream_idle_timeout"
	case ErrUpstreamClosed:
		var errno syscall.Errno
		switch {
		case errors.Is(e.Err, io.EOF) || errors.Is(e.Err, io.ErrUnexpectedEOF):
			switch e.Op {
			case opWriteRequest:
				return "closed the connection before the request was sent"
			case OpReadHead:
				return "closed the connection before answering"
			}
			return "closed the connection before the response was complete"
		case errors.As(e.Err, &errno):
			return errno.Error() // "connection reset by peer", "broken pipe"
		}
	case ErrUpstreamProto:
		// The op says what was malformed; an http1.Error says how, without its status.
		var fe *http1.Error
		if errors.As(e.Err, &fe) {
			return e.Op + ": " + fe.Msg
		}
		if e.Op != "" {
			return join(e.Op, e.Err)
		}
	}
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(what(e.Kind))
	if e.Err != nil {
		b.WriteString(": ")
		cause := e.Err
		if oe, ok := cause.(*net.OpError); ok && oe.Err != nil && oe.Addr != nil && oe.Addr.String() == e.Addr {
			cause = oe.Err
		}
		b.WriteString(what(cause))
	}
	return b.String()
}

// dialFailure is the Failure of a dial: its cause, without the net package's "dial tcp ADDR:"
// and "connect:" around the errno; the address a host name resolved to is kept.
func (e *UpstreamError) dialFailure() string {
	cause, at := e.Err, ""
	if oe, ok := cause.(*net.OpError); ok && oe.Err != nil {
		cause = oe.Err
		if oe.Addr != nil && oe.Addr.String() != e.Addr {
			at = oe.Addr.String() + ": "
		}
	}
	var errno syscall.Errno
	switch {
	case cause == nil:
		return what(ErrDial)
	case errors.Is(cause, os.ErrDeadlineExceeded) || errors.Is(cause, context.DeadlineExceeded):
		return at + "no connection within dial_timeout"
	case errors.As(cause, &errno):
		if se, ok := cause.(*os.SyscallError); ok && se.Err == errno {
			return at + errno.Error() // "connection refused", "no route to host"
		}
	}
	return at + what(cause)
}

// Ops of an exchange that Exchange.Timeout takes: the response head or body was awaited.
const (
	OpReadHead = "read response head"
	OpReadBody = "read response body"
)

// Other ops, as UpstreamError.Op. The proto ones say what was malformed.
const (
	opWriteRequest = "write request"
	opParseHead    = "malformed response head"
	opChunked      = "malformed chunked body"
)

// pastTense is what a timed-out op did not do, for "nothing ... within".
func pastTense(op string) string {
	switch op {
	case opWriteRequest:
		return "written"
	default:
		return "read"
	}
}

// join is "op: err", or op alone when err is nil.
func join(op string, err error) string {
	if err == nil {
		return op
	}
	return op + ": " + what(err)
}

// Unwrap returns Kind and Err, for errors.Is and errors.As.
func (e *UpstreamError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// what is err's text inside an UpstreamError: a sentinel's without its "sluice: upstream".
func what(err error) string {
	if k, ok := err.(*kindError); ok {
		return k.what
	}
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// isTimeout reports whether err is a socket deadline expiry.
func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// isConnDrop reports whether err means the peer closed or reset the connection: the symptom of
// the keep-alive race on a reused connection.
func isConnDrop(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// ioErr maps a socket error during op on the upstream addr to the sentinel the caller branches
// on. Error path only: it may allocate.
func (x *Exchange) ioErr(err error, op string) error {
	if x.aborted.Load() {
		return ErrAborted
	}
	addr := ""
	if x.p != nil {
		addr = x.p.o.Addr
	}
	kind := ErrUpstreamClosed
	if isTimeout(err) {
		kind = ErrTimeout
	}
	return &UpstreamError{Addr: addr, Op: op, Kind: kind, Err: err}
}

// protoErr wraps a framing error from core/http1 (or a local one) as ErrUpstreamProto.
func (x *Exchange) protoErr(err error, op string) error {
	addr := ""
	if x.p != nil {
		addr = x.p.o.Addr
	}
	return &UpstreamError{Addr: addr, Op: op, Kind: ErrUpstreamProto, Err: err}
}

// Misuse errors (programming errors in the caller).
var (
	errDecoderStalled = errors.New("sluice: pool: chunked decoder made no progress")
	errRoundTripTwice = errors.New("sluice: pool: RoundTrip called twice on one Exchange")
	errNoRoundTrip    = errors.New("sluice: pool: ReadBody without a successful RoundTrip")
)
