package pool

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// abortLatency is how soon after Abort the upstream must see the close.
const abortLatency = 50 * time.Millisecond

// TestAbortDuringHeadWait: the client leaves while the upstream is still "thinking" (before the
// first byte, the LLM TTFT wait). The upstream must see EOF at once and RoundTrip must return
// ErrAborted.
func TestAbortDuringHeadWait(t *testing.T) {
	gotReq := make(chan struct{})
	sawEOF := make(chan time.Time, 1)
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		readReq(br)
		close(gotReq)
		sawEOF <- waitEOF(c, br)
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	defer ReleaseExchange(x)
	h := x.AbortHandle()
	rt := make(chan error, 1)
	go func() { rt <- x.RoundTrip(p, []byte(getHead), nil, false) }()
	recv(t, gotReq, "request at upstream")
	t0 := time.Now()
	h.Abort()
	h.Abort() // idempotent
	at := recv(t, sawEOF, "upstream EOF")
	if d := at.Sub(t0); d > abortLatency {
		t.Fatalf("upstream saw EOF %v after Abort, want < %v", d, abortLatency)
	}
	if err := recv(t, rt, "RoundTrip return"); !errors.Is(err, ErrAborted) {
		t.Fatalf("RoundTrip: %v, want ErrAborted", err)
	}
}

// TestAbortDuringStream: the client leaves in the middle of a streamed body.
func TestAbortDuringStream(t *testing.T) {
	sawEOF := make(chan time.Time, 1)
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		readReq(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"c\r\ndata: tok1\n\n\r\n")
		sawEOF <- waitEOF(c, br)
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	defer ReleaseExchange(x)
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := x.ReadBody(buf, false)
	if err != nil || string(buf[:n]) != "data: tok1\n\n" {
		t.Fatalf("first read %q %v", buf[:n], err)
	}
	rb := make(chan error, 1)
	go func() {
		_, err := x.ReadBody(buf, false) // blocks: the upstream is silent
		rb <- err
	}()
	t0 := time.Now()
	x.Abort()
	at := recv(t, sawEOF, "upstream EOF")
	if d := at.Sub(t0); d > abortLatency {
		t.Fatalf("upstream saw EOF %v after Abort, want < %v", d, abortLatency)
	}
	if err := recv(t, rb, "ReadBody return"); !errors.Is(err, ErrAborted) {
		t.Fatalf("ReadBody: %v, want ErrAborted", err)
	}
	if _, err := x.ReadBody(buf, false); !errors.Is(err, ErrAborted) {
		t.Fatalf("ReadBody after abort: %v", err)
	}
}

func TestAbortBeforeRoundTrip(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	x.Abort()
	if err := x.RoundTrip(p, []byte(getHead), nil, false); !errors.Is(err, ErrAborted) {
		t.Fatalf("err %v, want ErrAborted", err)
	}
	ReleaseExchange(x)
	if s := p.Stats(); s.Dials != 0 {
		t.Fatalf("stats %+v: dialled for an aborted exchange", s)
	}
}

// TestAbortHandleAfterRelease: a late client-disconnect callback must not touch a released
// exchange, nor the pooled conn it returned, nor a later use of the same object.
func TestAbortHandleAfterRelease(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	h := x.AbortHandle()
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(x, false, 16); err != nil {
		t.Fatal(err)
	}
	ReleaseExchange(x)
	h.Abort()
	x.Abort() // use after release: documented no-op
	x2 := AcquireExchange()
	h.Abort() // x2 may be the same object: must not be aborted
	if err := x2.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatalf("exchange after stale abort: %v", err)
	}
	if b, err := readAll(x2, false, 16); err != nil || string(b) != "ok" {
		t.Fatal(string(b), err)
	}
	ReleaseExchange(x2)
	if s := p.Stats(); s.Dials != 1 || s.Idle != 1 {
		t.Fatalf("stats %+v, want the one conn reused and pooled", s)
	}
}

// TestAbortRacesRelease runs Abort concurrently with the end of exchanges (for -race).
func TestAbortRacesRelease(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	for i := 0; i < 200; i++ {
		x := AcquireExchange()
		h := x.AbortHandle()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Abort()
			x.Abort()
		}()
		if err := x.RoundTrip(p, []byte(getHead), nil, false); err == nil {
			_, err = readAll(x, false, 16)
			if err != nil && !errors.Is(err, ErrAborted) {
				t.Errorf("read: %v", err)
			}
		} else if !errors.Is(err, ErrAborted) {
			t.Errorf("round trip: %v", err)
		}
		ReleaseExchange(x)
		wg.Wait()
	}
	if s := p.Stats(); s.Active != 0 {
		t.Fatalf("stats %+v: conns leaked", s)
	}
}

func TestMisuse(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	if _, err := x.ReadBody(make([]byte, 8), false); err == nil {
		t.Fatal("ReadBody before RoundTrip: no error")
	}
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatal(err)
	}
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err == nil {
		t.Fatal("second RoundTrip: no error")
	}
	if b, err := readAll(x, false, 8); err != nil || string(b) != "ok" {
		t.Fatal(string(b), err)
	}
	ReleaseExchange(x)
	if s := p.Stats(); s.Idle != 1 || s.Active != 0 {
		t.Fatalf("stats %+v", s)
	}
}
