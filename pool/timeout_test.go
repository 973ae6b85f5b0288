package pool

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func TestResponseHeaderTimeout(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		readReq(br)
		waitEOF(c, br) // never answers
	})
	p := New(Options{Addr: u.addr(), ResponseHeaderTimeout: 30 * time.Millisecond})
	defer p.Close()
	_, _, err := roundTrip(t, p, getHead, false, 64)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if s := p.Stats(); s.Dials != 1 || s.Active != 0 || s.Idle != 0 {
		t.Fatalf("stats %+v: timed-out conn must be closed, not retried", s)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		readReq(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
		waitEOF(c, br) // then silence
	})
	p := New(Options{Addr: u.addr(), StreamIdleTimeout: 30 * time.Millisecond})
	defer p.Close()
	x := AcquireExchange()
	defer ReleaseExchange(x)
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatal(err)
	}
	b, err := readAll(x, true, 64)
	if string(b) != "first" || !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %q %v, want first bytes then ErrTimeout", b, err)
	}
}

// TestIdleTimeout: a pooled conn idle for longer than IdleTimeout is closed, not reused. The
// pool's clock is driven by the test.
func TestIdleTimeout(t *testing.T) {
	eof := make(chan int, 2)
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				eof <- n
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	var clock atomic.Int64
	p := New(Options{Addr: u.addr(), IdleTimeout: time.Second})
	p.now = clock.Load
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(999 * time.Millisecond))
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Dials != 1 || s.Reuses != 1 {
		t.Fatalf("stats %+v: conn younger than IdleTimeout not reused", s)
	}
	clock.Add(int64(time.Second))
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Dials != 2 || s.Reuses != 1 || s.Idle != 1 {
		t.Fatalf("stats %+v: stale conn reused", s)
	}
	if n := recv(t, eof, "stale conn closed"); n != 1 {
		t.Fatalf("conn %d closed, want the first", n)
	}
}

// TestIdleSweep: Sweep (and the lazy sweep in Get/Put) closes stale conns at the bottom of the
// idle stack while fresh ones stay.
func TestIdleSweep(t *testing.T) {
	eof := make(chan int, 4)
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				eof <- n
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	var clock atomic.Int64
	p := New(Options{Addr: u.addr(), IdleTimeout: time.Second})
	p.now = clock.Load
	defer p.Close()
	// Two conns in use at once, released at different times.
	x1, x2 := AcquireExchange(), AcquireExchange()
	for _, x := range []*Exchange{x1, x2} {
		if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	ReleaseExchange(x1)
	clock.Add(int64(600 * time.Millisecond))
	ReleaseExchange(x2)
	clock.Add(int64(600 * time.Millisecond)) // x1's conn is 1.2s idle, x2's 0.6s
	p.Sweep()
	if s := p.Stats(); s.Idle != 1 {
		t.Fatalf("stats %+v, want 1 idle after sweep", s)
	}
	recv(t, eof, "stale conn closed by sweep")
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Dials != 2 || s.Reuses != 1 {
		t.Fatalf("stats %+v, want the fresh conn reused", s)
	}
}
