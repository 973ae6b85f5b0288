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

// TestJanitorClosesIdleConnsWithoutTraffic: idle conns of a pool that sees no more requests
// are closed by the pool's janitor within IdleTimeout plus its slack (waited for with a
// generous deadline), none before IdleTimeout; with the stack empty the janitor is disarmed.
func TestJanitorClosesIdleConnsWithoutTraffic(t *testing.T) {
	const idle, conns = 300 * time.Millisecond, 4
	closed := make(chan time.Time, conns)
	u := startUpstream(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				closed <- time.Now()
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	p := New(Options{Addr: u.addr(), IdleTimeout: idle, MaxIdleConns: conns})
	defer p.Close()
	// A burst of concurrent exchanges, so that the pool ends with conns idle conns.
	xs := make([]*Exchange, conns)
	for i := range xs {
		xs[i] = AcquireExchange()
		if err := xs[i].RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
		if _, err := readAll(xs[i], false, 64); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	for _, x := range xs {
		ReleaseExchange(x)
	}
	if s := p.Stats(); s.Idle != conns {
		t.Fatalf("stats %+v, want %d idle", s, conns)
	}
	deadline := time.After(idle + time.Duration(janitorSlack(int64(idle))) + time.Second)
	for i := 0; i < conns; i++ {
		select {
		case at := <-closed:
			if d := at.Sub(released); d < idle {
				t.Fatalf("idle conn closed after %v, before IdleTimeout %v", d, idle)
			}
		case <-deadline:
			t.Fatalf("%d of %d idle conns still open well past IdleTimeout %v; stats %+v", conns-i, conns, idle, p.Stats())
		}
	}
	// The janitor disarms once it finds the stack empty.
	if !waitUntil(func() bool { return p.Stats().Idle == 0 && !p.JanitorArmed() }) {
		t.Fatalf("stats %+v, janitor armed %v: want an empty, disarmed pool", p.Stats(), p.JanitorArmed())
	}
}

// TestCloseDisarmsJanitor: a closed pool leaves no timer behind.
func TestCloseDisarmsJanitor(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	p := New(Options{Addr: u.addr(), IdleTimeout: time.Hour})
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if !p.JanitorArmed() {
		t.Fatal("an idle conn waits and the janitor is not armed")
	}
	p.Close()
	if p.JanitorArmed() {
		t.Fatal("janitor still armed after Close")
	}
}

// waitUntil polls cond (on a short ticker) until it holds or waitFor passes.
func waitUntil(cond func() bool) bool {
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	end := time.After(waitFor)
	for !cond() {
		select {
		case <-tk.C:
		case <-end:
			return false
		}
	}
	return true
}
