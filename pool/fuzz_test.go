package pool

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http/httputil"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
)

// FuzzExchange sends arbitrary upstream response bytes through a real loopback exchange (the
// upstream writes them and closes) and checks, raw and decoded: no panic or hang, every error
// wraps a sentinel, the raw body is exactly the bytes after the final head (a prefix of them,
// ending where the framing says), and the decoded chunked body equals Go's own chunked reader
// applied to the raw body. Run: go test -fuzz=FuzzExchange ./pool
func FuzzExchange(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedWire,
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nuntil close",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\nEXTRA",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nframes",
		"\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	} {
		f.Add([]byte(s), uint8(7))
	}
	resps := make(chan []byte, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			resp := <-resps
			br := bufio.NewReader(c)
			readReq(br)
			c.Write(resp)
			c.Close()
		}
	}()
	f.Fuzz(func(t *testing.T, resp []byte, bufLen uint8) {
		if len(resp) > 64<<10 {
			return
		}
		var raw []byte
		for _, rawMode := range []bool{true, false} {
			p := New(Options{Addr: ln.Addr().String(), ResponseHeaderTimeout: 2 * time.Second,
				StreamIdleTimeout: 2 * time.Second})
			resps <- resp
			x := AcquireExchange()
			err := x.RoundTrip(p, []byte(getHead), nil, false)
			if err != nil {
				checkSentinel(t, err)
				ReleaseExchange(x)
				p.Close()
				return
			}
			body, err := readAll(x, rawMode, int(bufLen)+1)
			if err != nil {
				checkSentinel(t, err)
			}
			mode := x.BodyMode()
			ReleaseExchange(x)
			p.Close()
			if rawMode {
				raw = body
				if !bytes.Contains(resp, body) {
					t.Fatalf("raw body %q is not part of the response", body)
				}
				if err == nil && mode != http1.BodyNone && !bytes.HasSuffix(resp, body) &&
					mode == http1.BodyUntilClose {
					t.Fatalf("until-close body %q is not the tail of the response", body)
				}
				continue
			}
			if err == nil && mode == http1.BodyChunked {
				want, rerr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(raw)))
				if rerr == nil && !bytes.Equal(want, body) {
					t.Fatalf("decoded %q, Go's chunked reader %q (raw %q)", body, want, raw)
				}
			}
		}
	})
}

func checkSentinel(t *testing.T, err error) {
	t.Helper()
	for _, s := range []error{ErrUpstreamProto, ErrUpstreamClosed, ErrTimeout, ErrDial, ErrAborted} {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %v wraps no sentinel", err)
}
