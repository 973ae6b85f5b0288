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

func TestKeepAliveReuse(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	for i := 0; i < 3; i++ {
		st, body, err := roundTrip(t, p, getHead, false, 64)
		if err != nil || st != 200 || body != "hello" {
			t.Fatalf("exchange %d: %d %q %v", i, st, body, err)
		}
	}
	s := p.Stats()
	if s.Dials != 1 || s.Reuses != 2 || s.Idle != 1 || s.Active != 0 {
		t.Fatalf("stats %+v, want 1 dial, 2 reuses, 1 idle", s)
	}
	if u.accepted() != 1 {
		t.Fatalf("upstream accepted %d conns, want 1", u.accepted())
	}
}

func TestNoReuseWhenBodyNotRead(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatal(err)
	}
	ReleaseExchange(x) // body left unread: conn closed
	if s := p.Stats(); s.Idle != 0 || s.Active != 0 {
		t.Fatalf("stats %+v, want the conn closed", s)
	}
}

func TestNoReuseOnConnectionClose(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "ok" {
		t.Fatal(body, err)
	}
	if s := p.Stats(); s.Idle != 0 {
		t.Fatalf("stats %+v: Connection: close conn was pooled", s)
	}
}

func TestMaxIdleConns(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	p := New(Options{Addr: u.addr(), MaxIdleConns: 1})
	defer p.Close()
	x1, x2 := AcquireExchange(), AcquireExchange()
	for _, x := range []*Exchange{x1, x2} {
		if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Active != 2 || s.Dials != 2 {
		t.Fatalf("stats %+v", s)
	}
	ReleaseExchange(x1)
	ReleaseExchange(x2)
	if s := p.Stats(); s.Idle != 1 || s.Active != 0 {
		t.Fatalf("stats %+v, want 1 idle", s)
	}
}

// TestClosedIdleConnNotReused: the upstream closes a keep-alive conn right after answering (as
// an upstream whose idle timeout fired would). The liveness peek notices it when the conn is
// taken from the pool: it is dropped and a fresh conn is dialled, with no request sent into the
// dead one.
func TestClosedIdleConnNotReused(t *testing.T) {
	closed := make(chan struct{})
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if n == 1 {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
			c.Close() // idle timeout on the upstream side
			close(closed)
			return
		}
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo")
		}
	})
	p := New(Options{Addr: u.addr(), LivenessCheckAfter: -1})
	defer p.Close()
	if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "one" {
		t.Fatal(body, err)
	}
	recv(t, closed, "upstream close")
	st, body, err := roundTrip(t, p, getHead, false, 64)
	if err != nil || st != 200 || body != "two" {
		t.Fatalf("after upstream idle close: %d %q %v", st, body, err)
	}
	if s := p.Stats(); s.Dials != 2 || s.Reuses != 0 {
		t.Fatalf("stats %+v, want 2 dials, no reuse of the closed conn", s)
	}
}

// TestKeepAliveRaceRetry: the upstream closes a pooled conn just as the next request arrives on
// it (the close crosses the request: it is read and dropped without an answer). The exchange
// sees EOF before any response byte on a reused conn and is retried once on a fresh conn.
func TestKeepAliveRaceRetry(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if n == 1 {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
			readReq(br) // the racing request: dropped by the close
			return
		}
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo")
		}
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "one" {
		t.Fatal(body, err)
	}
	st, body, err := roundTrip(t, p, getHead, false, 64)
	if err != nil || st != 200 || body != "two" {
		t.Fatalf("after keep-alive race: %d %q %v", st, body, err)
	}
	if s := p.Stats(); s.Dials != 2 || s.Reuses != 1 {
		t.Fatalf("stats %+v, want 2 dials (one retry), 1 reuse", s)
	}
}

// TestRetriedOnlyOnce: the fresh conn of the retry fails too: the error is returned, no third
// attempt.
func TestRetriedOnlyOnce(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if _, ok := readReq(br); !ok {
			return
		}
		if n == 1 {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
			readReq(br)
		}
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if _, _, err := roundTrip(t, p, getHead, false, 64); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("err %v, want ErrUpstreamClosed", err)
	}
	if s := p.Stats(); s.Dials != 2 || s.Active != 0 {
		t.Fatalf("stats %+v, want exactly one retry", s)
	}
}

// TestUnsolicitedBytesOnIdleConn: an upstream that writes after the end of a response (a "408
// Request Timeout" on idle close): the conn is not reused, and the stray bytes are never taken
// for the next response.
func TestUnsolicitedBytesOnIdleConn(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"+
				"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
		}
	})
	p := New(Options{Addr: u.addr(), LivenessCheckAfter: -1})
	defer p.Close()
	for i := 0; i < 3; i++ {
		st, body, err := roundTrip(t, p, getHead, false, 1)
		if err != nil || st != 200 || body != "ok" {
			t.Fatalf("exchange %d: %d %q %v", i, st, body, err)
		}
	}
	if s := p.Stats(); s.Dials != 3 {
		t.Fatalf("stats %+v, want a fresh conn per exchange", s)
	}
}

// TestFreshConnNotRetried: a freshly dialled conn that the upstream closes before answering
// is an upstream failure, not the keep-alive race: no retry.
func TestFreshConnNotRetried(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		readReq(bufio.NewReader(c))
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	_, _, err := roundTrip(t, p, getHead, false, 64)
	if !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("err %v, want ErrUpstreamClosed", err)
	}
	if s := p.Stats(); s.Dials != 1 {
		t.Fatalf("stats %+v, want exactly 1 dial", s)
	}
}

// TestReusedConnPartialResponseNotRetried: bytes of a response arrived, so the request was
// processed: never retried.
func TestReusedConnPartialResponseNotRetried(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if _, ok := readReq(br); !ok {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
		if _, ok := readReq(br); !ok {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 O")
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	_, _, err := roundTrip(t, p, getHead, false, 64)
	if !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("err %v, want ErrUpstreamClosed", err)
	}
	if s := p.Stats(); s.Dials != 1 {
		t.Fatalf("stats %+v, want no retry", s)
	}
}

func TestPoolClose(t *testing.T) {
	eof := make(chan struct{}, 1)
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		readReq(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		waitEOF(c, br)
		eof <- struct{}{}
	})
	p := New(Options{Addr: u.addr()})
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	p.Close()
	recv(t, eof, "idle conn closed by Pool.Close")
	_, _, err := roundTrip(t, p, getHead, false, 64)
	if !errors.Is(err, ErrDial) || !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("err %v, want ErrDial+ErrPoolClosed", err)
	}
}

func TestDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := New(Options{Addr: addr})
	_, _, err = roundTrip(t, p, getHead, false, 64)
	if !errors.Is(err, ErrDial) {
		t.Fatalf("err %v, want ErrDial", err)
	}
	if s := p.Stats(); s.DialErrors != 1 || s.Dials != 0 || s.Active != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestYoungIdleConnCheckedBeforeReuse: a conn reused at once, for a request that may be sent
// again, is still checked before reuse, whatever LivenessCheckAfter says: one the upstream
// closed, or on which it sent bytes after its response (here a whole response of its own), is
// not reused, and the request gets its own answer on a fresh conn.
func TestYoungIdleConnCheckedBeforeReuse(t *testing.T) {
	for _, after := range []string{"close", "stray response"} {
		t.Run(after, func(t *testing.T) {
			answered, done := make(chan struct{}), make(chan struct{})
			u := startUpstream(t, func(c net.Conn, n int) {
				br := bufio.NewReader(c)
				if n == 1 {
					if _, ok := readReq(br); !ok {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
					<-answered // the conn is idle in the pool
					if after == "close" {
						c.Close()
					} else {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\npoisoned")
					}
					close(done)
					readReq(br)
					return
				}
				for {
					if _, ok := readReq(br); !ok {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo")
				}
			})
			p := New(Options{Addr: u.addr(), LivenessCheckAfter: time.Hour})
			defer p.Close()
			if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "one" {
				t.Fatal(body, err)
			}
			close(answered)
			recv(t, done, "upstream "+after)
			st, body, err := roundTrip(t, p, getHead, false, 64)
			if err != nil || st != 200 || body != "two" {
				t.Fatalf("after upstream %s: %d %q %v", after, st, body, err)
			}
			if s := p.Stats(); s.Dials != 2 || s.Reuses != 0 {
				t.Fatalf("stats %+v, want 2 dials, no reuse of the first conn", s)
			}
		})
	}
}

// TestNonIdempotentRequestNotSentTwice: a POST that left whole on a reused conn which then
// closed without an answer may have been acted on: it fails instead of going out again.
func TestNonIdempotentRequestNotSentTwice(t *testing.T) {
	var posts atomic.Int32
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			req, ok := readReq(br)
			if !ok {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if req.Method == "POST" {
				posts.Add(1)
				if n == 1 {
					return // read whole, closed unanswered
				}
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	x := AcquireExchange()
	defer ReleaseExchange(x)
	err := x.RoundTrip(p, []byte("POST /boom HTTP/1.1\r\nHost: u\r\nContent-Length: 2\r\n\r\n"), []byte("{}"), false)
	if !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("err %v, want ErrUpstreamClosed", err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the upstream saw %d POSTs, want 1", n)
	}
}

// Event loops' idle connections (HoldIdle) and the idle stack share one MaxIdleConns: with the
// only slot held by a loop, a conn a worker's exchange gives back is closed, and Stats counts
// the loop's idle conn.
func TestMaxIdleConnsSharedWithLoops(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	p := New(Options{Addr: u.addr(), MaxIdleConns: 1})
	defer p.Close()
	if !p.HoldIdle() {
		t.Fatal("the first idle slot is free")
	}
	if p.HoldIdle() {
		t.Fatal("MaxIdleConns 1: a second slot was given")
	}
	if s := p.Stats(); s.Idle != 1 {
		t.Fatalf("stats %+v, want the loop's idle conn counted", s)
	}
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Idle != 1 || s.Dials != 1 || s.Active != 0 {
		t.Fatalf("stats %+v, want the exchange's conn closed (the slot is the loop's)", s)
	}
	p.DropIdle()
	if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Idle != 1 || s.Dials != 2 {
		t.Fatalf("stats %+v, want the slot the loop gave back used by the idle stack", s)
	}
}

// TestStatsDropsIdleConnsTheUpstreamClosed: Stats checks the idle stack first, so Idle counts
// only the conns that may carry a request. Of three idle conns the upstream closes the second
// one; Stats counts two, the other two stay pooled, most recently used on top, and carry the
// next requests without a dial, and once the upstream is gone Stats counts none.
func TestStatsDropsIdleConnsTheUpstreamClosed(t *testing.T) {
	kill, killed := make(chan struct{}), make(chan struct{})
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			if n == 2 {
				<-kill
				c.Close() // the upstream ends this conn while it is idle
				close(killed)
				return
			}
		}
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	xs := []*Exchange{AcquireExchange(), AcquireExchange(), AcquireExchange()}
	for _, x := range xs {
		if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range xs {
		if _, err := readAll(x, false, 64); err != nil {
			t.Fatal(err)
		}
		ReleaseExchange(x) // idle in the order dialled
	}
	if s := p.Stats(); s.Idle != 3 {
		t.Fatalf("stats %+v, want 3 idle", s)
	}
	close(kill)
	recv(t, killed, "upstream close")
	if s := p.Stats(); s.Idle != 2 {
		t.Fatalf("stats %+v: the conn the upstream closed is still counted", s)
	}
	for i := 0; i < 2; i++ {
		if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Dials != 3 || s.Reuses != 2 || s.Idle != 2 {
		t.Fatalf("stats %+v, want the two open conns reused, no dial", s)
	}
	u.close()
	if s := p.Stats(); s.Idle != 0 {
		t.Fatalf("stats %+v, want no idle conn once the upstream closed them all", s)
	}
}

// TestStatsLeavesIdleConnsToRequests: Stats checks the idle stack one conn at a time, so
// requests sent while it runs (a metrics scrape is one Stats per backend) keep finding idle
// conns to reuse: a pool with several open idle conns dials none, however often Stats runs.
func TestStatsLeavesIdleConnsToRequests(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	const conns = 8
	xs := make([]*Exchange, conns)
	for i := range xs {
		xs[i] = AcquireExchange()
		if err := xs[i].RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range xs {
		if _, err := readAll(x, false, 64); err != nil {
			t.Fatal(err)
		}
		ReleaseExchange(x)
	}
	if s := p.Stats(); s.Idle != conns || s.Dials != conns {
		t.Fatalf("stats %+v, want %d idle conns, %d dials", s, conns, conns)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	checks := 0
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				p.Stats()
				checks++
			}
		}
	}()
	for i := 0; i < 2000; i++ {
		if _, _, err := roundTrip(t, p, getHead, false, 64); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-stopped
	if s := p.Stats(); s.Dials != conns || s.Idle != conns {
		t.Fatalf("stats %+v after %d checks beside 2000 requests: want no dial, %d idle conns", s, checks, conns)
	}
}
