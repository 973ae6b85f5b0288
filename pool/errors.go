package pool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Sentinel errors. RoundTrip and ReadBody return errors that wrap exactly one of them (test with
// errors.Is); the comment names the status the gateway answers a client with (RFC 9110 §15.6).
var (
	// ErrDial: the TCP connect or TLS handshake to the upstream failed or timed out
	// (Options.DialTimeout), or the Pool was closed. 502 Bad Gateway.
	ErrDial = errors.New("sluice: upstream dial failed")
	// ErrTimeout: no complete response head within Options.ResponseHeaderTimeout after the
	// request was written, a body read silent for Options.StreamIdleTimeout, or a request write
	// stalled for Options.StreamIdleTimeout. 504 Gateway Timeout.
	ErrTimeout = errors.New("sluice: upstream timeout")
	// ErrUpstreamProto: the upstream sent a malformed response head or body framing
	// (RFC 9112), or a head larger than the limits. 502 Bad Gateway.
	ErrUpstreamProto = errors.New("sluice: malformed upstream response")
	// ErrAborted: Abort was called (the client left); the upstream connection is closed.
	// Not an upstream failure: count it as a client cancellation.
	ErrAborted = errors.New("sluice: upstream exchange aborted")
	// ErrUpstreamClosed: the upstream closed or reset the connection before the response
	// (or its body) was complete. 502 Bad Gateway.
	ErrUpstreamClosed = errors.New("sluice: upstream closed connection")
	// ErrPoolClosed is wrapped together with ErrDial when RoundTrip runs on a closed Pool.
	ErrPoolClosed = errors.New("sluice: upstream pool closed")
)

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
	switch {
	case isTimeout(err):
		return fmt.Errorf("sluice: upstream %s: %s: %w (%w)", addr, op, ErrTimeout, err)
	default:
		return fmt.Errorf("sluice: upstream %s: %s: %w (%w)", addr, op, ErrUpstreamClosed, err)
	}
}

// protoErr wraps a framing error from core/http1 (or a local one) as ErrUpstreamProto.
func (x *Exchange) protoErr(err error, op string) error {
	addr := ""
	if x.p != nil {
		addr = x.p.o.Addr
	}
	if err == nil {
		return fmt.Errorf("sluice: upstream %s: %s: %w", addr, op, ErrUpstreamProto)
	}
	return fmt.Errorf("sluice: upstream %s: %s: %w (%w)", addr, op, ErrUpstreamProto, err)
}

// Misuse errors (programming errors in the caller).
var (
	errDecoderStalled = errors.New("sluice: pool: chunked decoder made no progress")
	errRoundTripTwice = errors.New("sluice: pool: RoundTrip called twice on one Exchange")
	errNoRoundTrip    = errors.New("sluice: pool: ReadBody without a successful RoundTrip")
)
