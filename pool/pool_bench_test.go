package pool

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the process's user+system CPU time. Loopback latency on a shared VM is
// noisy; CPU ns/op (client and in-process upstream together) compares pool and baseline better.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// benchUpstream answers every request head (no request body) with resp, allocation-free, so
// -benchmem measures the pool alone.
func benchUpstream(b *testing.B, resp string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return benchUpstreamOn(b, ln, resp)
}

// benchUpstreamOn is benchUpstream on ln.
func benchUpstreamOn(b *testing.B, ln net.Listener, resp string) string {
	r := []byte(resp)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 8192)
				n := 0
				for {
					m, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += m
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						n = copy(buf, buf[i+4:n])
						if _, err := c.Write(r); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func benchExchange(b *testing.B, resp string, raw bool) {
	benchExchangeOf(b, resp, raw, "POST /v1/chat/completions HTTP/1.1\r\nHost: upstream\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n", "{}")
}

// benchExchangeOf is benchExchange of the request head and body given.
func benchExchangeOf(b *testing.B, resp string, raw bool, reqHead, reqBody string) {
	benchExchangeTo(b, New(Options{Addr: benchUpstream(b, resp)}), raw, reqHead, reqBody)
}

// benchExchangeTo is benchExchangeOf through pool p, which it closes.
func benchExchangeTo(b *testing.B, p *Pool, raw bool, reqHead, reqBody string) {
	defer p.Close()
	head, body := []byte(reqHead), []byte(reqBody)
	buf := GetBuf()
	defer PutBuf(buf)
	one := func() {
		x := AcquireExchange()
		x.Idempotent = reqBody == ""
		if err := x.RoundTrip(p, head, body, false); err != nil {
			b.Fatal(err)
		}
		for {
			_, err := x.ReadBody(*buf, raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		ReleaseExchange(x)
	}
	for i := 0; i < 100; i++ {
		one() // warm the pools
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		one()
	}
	b.StopTimer()
	reportCPU(b, cpu0)
	if s := p.Stats(); s.Dials != 1 {
		b.Fatalf("stats %+v: conn not reused", s)
	}
}

// BenchmarkExchangeLength: RoundTrip + ReadBody of a small JSON response (Content-Length).
func BenchmarkExchangeLength(b *testing.B) {
	benchExchange(b, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"id\":\"chatcmpl-1\",\"ok\":1}\n", false)
}

// BenchmarkExchangeIdempotent: BenchmarkExchangeLength for a GET, which may be sent again and
// so is not held to the pool's check of a connection before reuse for that reason.
func BenchmarkExchangeIdempotent(b *testing.B) {
	benchExchangeOf(b, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"id\":\"chatcmpl-1\",\"ok\":1}\n", false,
		"GET /v1/models HTTP/1.1\r\nHost: upstream\r\n\r\n", "")
}

// BenchmarkExchangeChunkedRaw: an SSE-like chunked response relayed raw.
func BenchmarkExchangeChunkedRaw(b *testing.B) {
	benchExchange(b, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"f\r\ndata: {\"a\":1}\n\n\r\nf\r\ndata: {\"b\":2}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n", true)
}

// BenchmarkExchangeChunkedDecoded: the same response, chunked decoded.
func BenchmarkExchangeChunkedDecoded(b *testing.B) {
	benchExchange(b, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"f\r\ndata: {\"a\":1}\n\n\r\nf\r\ndata: {\"b\":2}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n", false)
}

// BenchmarkExchangeParallel: many goroutines sharing one Pool (several conns).
func BenchmarkExchangeParallel(b *testing.B) {
	p := New(Options{Addr: benchUpstream(b, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")})
	defer p.Close()
	head := []byte("GET /health HTTP/1.1\r\nHost: upstream\r\n\r\n")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 512)
		for pb.Next() {
			x := AcquireExchange()
			if err := x.RoundTrip(p, head, nil, false); err != nil {
				b.Error(err)
				ReleaseExchange(x)
				return
			}
			for {
				_, err := x.ReadBody(buf, false)
				if err != nil {
					break
				}
			}
			ReleaseExchange(x)
		}
	})
}

// BenchmarkBaselineRawTCP: the same request/response ping-pong on a bare net.Conn against the
// same upstream, without the pool: the floor that BenchmarkExchangeLength is compared with.
func BenchmarkBaselineRawTCP(b *testing.B) {
	resp := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"id\":\"chatcmpl-1\",\"ok\":1}\n"
	c, err := net.Dial("tcp", benchUpstream(b, resp))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: upstream\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer reportCPU(b, cpu0)
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < len(resp); {
			n, err := c.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
}
