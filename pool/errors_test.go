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

	"github.com/stretchr/testify/require"
)

// An upstream failure reads "sluice: upstream ADDR: " and its Failure, each part once (a
// dial's Failure is its cause, after "dial failed: "), and errors.Is still finds both the
// sentinel the caller branches on and the cause.
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
	// A name, so that the dial goes through the resolver and the dialer, which see the
	// timeout run out before they start.
	dialTimeout := func(t *testing.T) *Pool {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		return New(Options{Addr: "localhost:" + port, DialTimeout: time.Nanosecond})
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
		text  string // the Failure, and after "sluice: upstream ADDR: " (and "dial failed: " for a dial)
		kind  error
		cause error
	}{
		{"refused", refused, "connection refused", ErrDial, syscall.ECONNREFUSED},
		{"pool closed", closed, "pool closed", ErrDial, ErrPoolClosed},
		{"dial timeout", dialTimeout, "no connection within dial_timeout", ErrDial, nil},
		{"closed before the head", answering(""), "closed the connection before answering", ErrUpstreamClosed, io.EOF},
		{"closed in the head", answering("HTTP/1.1 200 OK\r\n"), "closed the connection before answering", ErrUpstreamClosed, io.EOF},
		{"closed in the body", answering("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"), "closed the connection before the response was complete", ErrUpstreamClosed, io.ErrUnexpectedEOF},
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
			text := tc.text
			var ue *UpstreamError
			if errors.As(err, &ue) && tc.name == "dial timeout" {
				// The resolver may finish before the timeout is seen: the error then names the
				// address the name resolved to, as the message does when it differs.
				if f := ue.Failure(); f == "127.0.0.1:"+p.Addr()[len("localhost:"):]+": "+tc.text {
					text = f
				}
			}
			want := "sluice: upstream " + p.Addr() + ": " + text
			if tc.kind == ErrDial {
				want = "sluice: upstream " + p.Addr() + ": dial failed: " + text
			}
			if err.Error() != want {
				t.Fatalf("error %q, want %q", err, want)
			}
			if ue == nil || ue.Failure() != text {
				t.Fatalf("error %q: Failure should be %q", err, text)
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

// A failed dial counts in Stats.DialErrors against the upstream, unless the gateway's own
// host was short of descriptors, memory or ports.
func TestDialErrorsLeaveOutTheGatewaysShortage(t *testing.T) {
	p := New(Options{Addr: "127.0.0.1:9"})
	defer p.Close()
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		err := p.ConnectDone(os.NewSyscallError("socket", errno))
		require.ErrorIs(t, err, ErrDial)
		require.True(t, LocalResource(err), "%v", errno)
	}
	require.Zero(t, p.Stats().DialErrors)
	err := p.ConnectDone(os.NewSyscallError("connect", syscall.ECONNREFUSED))
	require.False(t, LocalResource(err))
	require.Equal(t, 1, p.Stats().DialErrors)
}
