package pool

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitFor is how long a test waits for an event before failing (never a sleep).
const waitFor = 5 * time.Second

// upstream is a raw-TCP loopback server; handle runs on its own goroutine per accepted conn.
type upstream struct {
	t      *testing.T
	ln     net.Listener
	handle func(c net.Conn, n int) // n: 1-based accept count
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startUpstream(t *testing.T, handle func(c net.Conn, n int)) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveUpstream(t, ln, handle)
}

func serveUpstream(t *testing.T, ln net.Listener, handle func(c net.Conn, n int)) *upstream {
	u := &upstream{t: t, ln: ln, handle: handle}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func(n int) {
				defer u.wg.Done()
				defer c.Close()
				handle(c, n)
			}(n)
		}
	}()
	t.Cleanup(u.close)
	return u
}

func (u *upstream) addr() string { return u.ln.Addr().String() }

func (u *upstream) accepted() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.conns)
}

func (u *upstream) close() {
	u.ln.Close()
	u.mu.Lock()
	for _, c := range u.conns {
		c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// readReq reads one request (head and Content-Length body) from br; false at EOF or error.
func readReq(br *bufio.Reader) (*http.Request, bool) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	return req, true
}

// serveFixed answers every request on c with resp.
func serveFixed(resp string) func(c net.Conn, n int) {
	return func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	}
}

// waitEOF reads c until EOF or error and reports when that happened.
func waitEOF(c net.Conn, br *bufio.Reader) time.Time {
	if br != nil {
		_, _ = io.Copy(io.Discard, br)
	} else {
		_, _ = io.Copy(io.Discard, c)
	}
	return time.Now()
}

const getHead = "GET /v1/models HTTP/1.1\r\nHost: upstream\r\n\r\n"

// roundTrip runs one full exchange and returns the (raw or decoded) body read with a small
// buffer of size bufLen. The Exchange is released before returning.
func roundTrip(t *testing.T, p *Pool, head string, raw bool, bufLen int) (status int, body string, err error) {
	t.Helper()
	x := AcquireExchange()
	defer ReleaseExchange(x)
	x.Idempotent = strings.HasPrefix(head, "GET ") || strings.HasPrefix(head, "HEAD ")
	if err := x.RoundTrip(p, []byte(head), nil, false); err != nil {
		return 0, "", err
	}
	status = x.Resp.Status
	b, err := readAll(x, raw, bufLen)
	return status, string(b), err
}

func readAll(x *Exchange, raw bool, bufLen int) ([]byte, error) {
	var out []byte
	buf := make([]byte, bufLen)
	for {
		n, err := x.ReadBody(buf, raw)
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// recv waits for a value on ch, failing the test after waitFor.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
