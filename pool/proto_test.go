package pool

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/core/http1"
)

func TestMalformedResponse(t *testing.T) {
	for _, resp := range []string{
		"HTTP/1.1 2OO OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 20000) + "\r\n\r\n",
		"SSH-2.0-OpenSSH_9.6\r\n\r\n",
	} {
		u := startUpstream(t, serveFixed(resp))
		p := New(Options{Addr: u.addr()})
		_, _, err := roundTrip(t, p, getHead, false, 64)
		if !errors.Is(err, ErrUpstreamProto) {
			t.Fatalf("%.40q: err %v, want ErrUpstreamProto", resp, err)
		}
		if s := p.Stats(); s.Active != 0 || s.Idle != 0 {
			t.Fatalf("stats %+v", s)
		}
		p.Close()
	}
}

func TestMalformedChunked(t *testing.T) {
	for _, raw := range []bool{false, true} {
		u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n"))
		p := New(Options{Addr: u.addr()})
		_, body, err := roundTrip(t, p, getHead, raw, 64)
		if !errors.Is(err, ErrUpstreamProto) {
			t.Fatalf("raw=%v: body %q err %v, want ErrUpstreamProto", raw, body, err)
		}
		p.Close()
	}
}

func TestHeadLimit(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nX: "+strings.Repeat("a", 300)+"\r\nContent-Length: 0\r\n\r\n"))
	p := New(Options{Addr: u.addr(), Limits: &http1.Limits{MaxHeaderBytes: 256}})
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); !errors.Is(err, ErrUpstreamProto) {
		t.Fatalf("err %v, want ErrUpstreamProto", err)
	}
}

// TestInterimResponses: 100 Continue and 103 Early Hints are skipped (RFC 9110 §15.2); the
// final response and its body follow on the same conn.
func TestInterimResponses(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 100 Continue\r\n\r\n"+
		"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
		"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	for i := 0; i < 2; i++ {
		st, body, err := roundTrip(t, p, getHead, false, 64)
		if err != nil || st != 200 || body != "done" {
			t.Fatalf("%d %q %v", st, body, err)
		}
	}
	if s := p.Stats(); s.Dials != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTooManyInterimResponses(t *testing.T) {
	u := startUpstream(t, serveFixed(strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 100)))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); !errors.Is(err, ErrUpstreamProto) {
		t.Fatalf("err %v, want ErrUpstreamProto", err)
	}
}

// TestSwitchingProtocols: 101 is the final response; the upgraded stream is read until close
// and the conn is never pooled.
func TestSwitchingProtocols(t *testing.T) {
	u := startUpstream(t, func(c net.Conn, n int) {
		readReq(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nframes")
	})
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	x := AcquireExchange()
	if err := x.RoundTrip(p, []byte(getHead), nil, false); err != nil {
		t.Fatal(err)
	}
	if x.Resp.Status != 101 || x.BodyMode() != http1.BodyUntilClose {
		t.Fatalf("status %d mode %v", x.Resp.Status, x.BodyMode())
	}
	b, err := readAll(x, true, 64)
	if err != nil || string(b) != "frames" {
		t.Fatal(string(b), err)
	}
	ReleaseExchange(x)
	if s := p.Stats(); s.Idle != 0 {
		t.Fatalf("stats %+v", s)
	}
}
