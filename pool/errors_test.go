package pool

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// An upstream failure reads "sluice: upstream ADDR: [OP: ]KIND: CAUSE", each part once, and
// errors.Is still finds both the sentinel the caller branches on and the cause.
func TestErrorTextNamesEachPartOnce(t *testing.T) {
	refused := func(t *testing.T) *Pool {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return New(Options{Addr: addr})
	}
	closed := func(t *testing.T) *Pool {
		p := refused(t)
		p.Close()
		return p
	}
	answering := func(resp string) func(t *testing.T) *Pool {
		return func(t *testing.T) *Pool {
			u := startUpstream(t, func(c net.Conn, n int) {
				readReq(bufio.NewReader(c))
				io.WriteString(c, resp)
			})
			return New(Options{Addr: u.addr()})
		}
	}
	silent := func(t *testing.T) *Pool {
		hold := make(chan struct{})
		u := startUpstream(t, func(c net.Conn, n int) {
			readReq(bufio.NewReader(c))
			<-hold
		})
		t.Cleanup(func() { close(hold) }) // before the upstream's close, which waits for it
		return New(Options{Addr: u.addr(), ResponseHeaderTimeout: 30 * time.Millisecond})
	}
	for _, tc := range []struct {
		name  string
		pool  func(t *testing.T) *Pool
		text  string // after "sluice: upstream ADDR: ", and the Failure
		kind  error
		cause error
	}{
		{"refused", refused, "dial failed: connect: connection refused", ErrDial, syscall.ECONNREFUSED},
		{"pool closed", closed, "dial failed: pool closed", ErrDial, ErrPoolClosed},
		{"closed before the head", answering(""), "closed the connection before the response was complete", ErrUpstreamClosed, io.EOF},
		{"malformed head", answering("HTTP/1.1 abc OK\r\n\r\n"), "malformed response head: invalid status code (RFC 9110 §15)", ErrUpstreamProto, nil},
		{"no head in time", silent, "no response head within response_header_timeout", ErrTimeout, os.ErrDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pool(t)
			defer p.Close()
			_, _, err := roundTrip(t, p, getHead, false, 64)
			if err == nil {
				t.Fatal("round trip succeeded")
			}
			if want := "sluice: upstream " + p.Addr() + ": " + tc.text; err.Error() != want {
				t.Fatalf("error %q, want %q", err, want)
			}
			var ue *UpstreamError
			if !errors.As(err, &ue) || ue.Failure() != tc.text {
				t.Fatalf("error %q: Failure should be %q", err, tc.text)
			}
			if !errors.Is(err, tc.kind) {
				t.Fatalf("error %q is not %v", err, tc.kind)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("error %q is not %v", err, tc.cause)
			}
		})
	}
}

// A sentinel alone still says that it is about an upstream.
func TestSentinelTextStandsAlone(t *testing.T) {
	for err, want := range map[error]string{
		ErrDial:           "sluice: upstream dial failed",
		ErrTimeout:        "sluice: upstream timeout",
		ErrUpstreamProto:  "sluice: upstream malformed response",
		ErrAborted:        "sluice: upstream exchange aborted",
		ErrUpstreamClosed: "sluice: upstream closed connection",
		ErrPoolClosed:     "sluice: upstream pool closed",
	} {
		if err.Error() != want {
			t.Errorf("%q, want %q", err, want)
		}
	}
}
