package pool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/core/http1"
)

const chunkedWire = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"

// TestBodies runs each body framing with the response written at once and dribbled one byte
// per write, read with tiny and large buffers, raw and decoded. After each exchange the conn
// must be pooled exactly when the framing allows it.
func TestBodies(t *testing.T) {
	cases := []struct {
		name     string
		resp     string // full response
		head     string // request head
		isHEAD   bool
		mode     http1.BodyMode
		raw, dec string // expected raw and decoded body
		reusable bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", getHead, false,
			http1.BodyLength, "hello world", "hello world", true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedWire, getHead, false,
			http1.BodyChunked, chunkedWire, "hello, world", true},
		{"empty-chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", getHead, false,
			http1.BodyChunked, "0\r\n\r\n", "", true},
		{"zero-length", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", getHead, false,
			http1.BodyLength, "", "", true},
		{"no-content", "HTTP/1.1 204 No Content\r\n\r\n", getHead, false,
			http1.BodyNone, "", "", true},
		{"not-modified", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", getHead, false,
			http1.BodyNone, "", "", true},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD / HTTP/1.1\r\nHost: u\r\n\r\n", true,
			http1.BodyNone, "", "", true},
		{"until-close", "HTTP/1.1 200 OK\r\n\r\nuntil the end", getHead, false,
			http1.BodyUntilClose, "until the end", "until the end", false},
		{"http10", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", getHead, false,
			http1.BodyLength, "ok", "ok", false},
	}
	for _, tc := range cases {
		for _, dribble := range []bool{false, true} {
			for _, raw := range []bool{false, true} {
				for _, bufLen := range []int{1, 3, 4096} {
					name := fmt.Sprintf("%s/dribble=%v/raw=%v/buf=%d", tc.name, dribble, raw, bufLen)
					t.Run(name, func(t *testing.T) {
						testBody(t, tc.resp, tc.head, tc.isHEAD, dribble, raw, bufLen, tc.mode,
							map[bool]string{true: tc.raw, false: tc.dec}[raw], tc.reusable)
					})
				}
			}
		}
	}
}

func testBody(t *testing.T, resp, head string, isHEAD, dribble, raw bool, bufLen int,
	mode http1.BodyMode, want string, reusable bool) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			if dribble {
				for i := 0; i < len(resp); i++ {
					if _, err := c.Write([]byte{resp[i]}); err != nil {
						return
					}
				}
			} else if _, err := io.WriteString(c, resp); err != nil {
				return
			}
			if !strings.Contains(resp, "Length") && !strings.Contains(resp, "chunked") &&
				!strings.HasPrefix(resp, "HTTP/1.1 204") {
				return // until-close body: close ends it
			}
		}
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	for i := 0; i < 2; i++ {
		x := AcquireExchange()
		if err := x.RoundTrip(p, []byte(head), nil, isHEAD); err != nil {
			t.Fatal(err)
		}
		if x.BodyMode() != mode {
			t.Fatalf("body mode %v, want %v", x.BodyMode(), mode)
		}
		got, err := readAll(x, raw, bufLen)
		if err != nil || string(got) != want {
			t.Fatalf("body %q %v, want %q", got, err, want)
		}
		if n, err := x.ReadBody(make([]byte, 8), raw); n != 0 || err != io.EOF {
			t.Fatalf("read after end: %d %v, want io.EOF", n, err)
		}
		ReleaseExchange(x)
		s := p.Stats()
		if reusable && (s.Idle != 1 || s.Dials != 1) || !reusable && s.Idle != 0 {
			t.Fatalf("exchange %d: stats %+v, reusable=%v", i, s, reusable)
		}
	}
}

// TestRequestBody: head and body reach the upstream intact (one write when small, two when
// large).
func TestRequestBody(t *testing.T) {
	for _, size := range []int{10, BufSize, 3 * BufSize} {
		got := make(chan string, 1)
		u := startUpstream(t, func(c net.Conn, n int) {
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(req.Body)
			got <- string(b)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			waitEOF(c, br)
		})
		p := New(Options{Addr: u.addr()})
		body := strings.Repeat("b", size)
		head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: u\r\nContent-Length: %d\r\n\r\n", size)
		x := AcquireExchange()
		if err := x.RoundTrip(p, []byte(head), []byte(body), false); err != nil {
			t.Fatal(err)
		}
		if b := recv(t, got, "request body"); b != body {
			t.Fatalf("upstream got %d bytes, want %d", len(b), size)
		}
		ReleaseExchange(x)
		p.Close()
	}
}

func TestTruncatedBody(t *testing.T) {
	for _, resp := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nhalf",
	} {
		u := startUpstream(t, func(c net.Conn, n int) {
			readReq(bufio.NewReader(c))
			io.WriteString(c, resp)
		})
		p := New(Options{Addr: u.addr()})
		_, _, err := roundTrip(t, p, getHead, false, 64)
		if !errors.Is(err, ErrUpstreamClosed) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%q: err %v, want ErrUpstreamClosed (unexpected EOF)", resp, err)
		}
		if s := p.Stats(); s.Active != 0 || s.Idle != 0 {
			t.Fatalf("stats %+v", s)
		}
		p.Close()
	}
}

// TestCutByClose: a body delimited by the upstream's close that the caller finds cut short
// (CutByClose after io.EOF) fails as a length or chunked body cut short does, with a sticky
// error; before its end, and for a body with framing of its own, CutByClose changes nothing.
func TestCutByClose(t *testing.T) {
	for _, tc := range []struct {
		resp string
		cuts bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: a", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\ndata: a", false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: a\r\n0\r\n\r\n", false},
	} {
		u := startUpstream(t, func(c net.Conn, _ int) {
			readReq(bufio.NewReader(c))
			io.WriteString(c, tc.resp)
		})
		p := New(Options{Addr: u.addr()})
		x := AcquireExchange()
		if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
		if err := x.CutByClose(); err != nil {
			t.Fatalf("%q: CutByClose before the end: %v", tc.resp, err)
		}
		b, err := readAll(x, false, 4096)
		if err != nil || string(b) != "data: a" {
			t.Fatalf("%q: body %q %v", tc.resp, b, err)
		}
		err = x.CutByClose()
		if !tc.cuts {
			if err != nil {
				t.Fatalf("%q: CutByClose of a framed body: %v", tc.resp, err)
			}
			if _, err := x.ReadBody(make([]byte, 8), false); err != io.EOF {
				t.Fatalf("%q: ReadBody after CutByClose: %v, want io.EOF", tc.resp, err)
			}
		} else {
			var ue *UpstreamError
			if !errors.Is(err, ErrUpstreamClosed) || !errors.Is(err, io.ErrUnexpectedEOF) || !errors.As(err, &ue) {
				t.Fatalf("%q: err %v, want ErrUpstreamClosed (unexpected EOF)", tc.resp, err)
			}
			if got, want := ue.Failure(), "closed the connection before the response was complete"; got != want {
				t.Fatalf("failure %q, want %q", got, want)
			}
			if _, again := x.ReadBody(make([]byte, 8), false); again != err {
				t.Fatalf("ReadBody after CutByClose: %v, want the same error", again)
			}
			if again := x.CutByClose(); again != err {
				t.Fatalf("CutByClose again: %v, want the same error", again)
			}
		}
		ReleaseExchange(x)
		if s := p.Stats(); s.Active != 0 || (tc.cuts && s.Idle != 0) {
			t.Fatalf("%q: stats %+v", tc.resp, s)
		}
		p.Close()
	}
}

// TestExtraBytesAfterBody: an upstream that sends more than the framing says: the body ends at
// its framing and the conn is not reused.
func TestExtraBytesAfterBody(t *testing.T) {
	for _, resp := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nGARBAGE",
		"HTTP/1.1 204 No Content\r\n\r\nGARBAGE",
	} {
		u := startUpstream(t, serveFixed(resp))
		p := New(Options{Addr: u.addr()})
		x := AcquireExchange()
		if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
			t.Fatal(err)
		}
		b, err := readAll(x, false, 4096)
		if err != nil || strings.Contains(string(b), "GARBAGE") {
			t.Fatalf("%q: body %q %v", resp, b, err)
		}
		ReleaseExchange(x)
		if s := p.Stats(); s.Idle != 0 {
			t.Fatalf("%q: stats %+v: conn with stray bytes pooled", resp, s)
		}
		p.Close()
	}
}

// TestEarlyResponse: the upstream rejects a large request body from its head alone (413) and
// closes without reading the body; the write fails, and the early response is still relayed.
func TestEarlyResponse(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 8\r\n\r\ntoo big!")
		c.(*net.TCPConn).CloseWrite()
		c.(*net.TCPConn).SetLinger(0)
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	body := make([]byte, 64<<20)
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: u\r\nContent-Length: %d\r\n\r\n", len(body))
	x := AcquireExchange()
	defer ReleaseExchange(x)
	if err := x.RoundTrip(p, []byte(head), body, false); err != nil {
		t.Fatalf("err %v, want the early 413", err)
	}
	b, err := readAll(x, false, 64)
	if x.Resp.Status != 413 || string(b) != "too big!" || err != nil {
		t.Fatalf("%d %q %v", x.Resp.Status, b, err)
	}
}
