package ingress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/snapshot"
	"github.com/sluice-gw/sluice/sse"
)

// sseChunk is one typical chat.completion.chunk event in chunked framing.
var sseEvent = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n"

// streamingUpstream answers one request with an endless SSE stream, one event per chunk,
// written as fast as the gateway takes them, until the connection closes.
func streamingUpstream(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", len(sseEvent), sseEvent))
	batch := []byte(strings.Repeat(string(chunk), 16))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if l == "\r\n" {
						break
					}
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				for {
					if _, err := c.Write(batch); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

type eventCounter struct{ n atomic.Int64 }

func (e *eventCounter) OnEvent(sse.Event) { e.n.Add(1) }

func startEngine(b *testing.B, engine, upstream string) string {
	toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %q\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://%s\" }]\n[admin]\naddress = \"\"\n", engine, upstream)
	cfg, err := config.LoadBytes("bench.toml", []byte(toml))
	if err != nil {
		b.Fatal(err)
	}
	snap, err := snapshot.Compile(cfg, nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	var live snapshot.Live
	live.Activate(snap)
	set := ingress.Settings{Name: "web", Address: "127.0.0.1:0", Limits: http1.Limits{}, Multicore: true}
	var t ingress.Transport
	if engine == "gnet" {
		t = ingress.NewGnet(set, &live, nil)
	} else {
		t = ingress.NewFast(set, &live, nil)
	}
	if err := t.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_ = t.Drain(ctx)
		live.Load().Retire(nil)
	})
	return t.Addr()
}

// BenchmarkRelaySSEEvent measures the gateway's cost per relayed SSE event on a live stream
// (upstream → gateway → client over loopback), including the upstream read, chunk framing, the
// client write and the TTFT/ITL accounting. One op is one event; allocs/op must be 0.
func BenchmarkRelaySSEEvent(b *testing.B) {
	for _, engine := range []string{"gnet", "fasthttp"} {
		b.Run(engine, func(b *testing.B) {
			addr := startEngine(b, engine, streamingUpstream(b))
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			r := bufio.NewReaderSize(c, 64<<10)
			for { // response head
				l, err := r.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if l == "\r\n" {
					break
				}
			}
			var dec http1.ChunkedDecoder
			var sc sse.Scanner
			var cnt eventCounter
			buf := make([]byte, 64<<10)
			pump := func(target int64) {
				for cnt.n.Load() < target {
					n, err := r.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					p := buf[:n]
					for len(p) > 0 {
						data, k, err := dec.Next(p)
						if err != nil {
							b.Fatal(err)
						}
						if err := sc.Feed(data, &cnt); err != nil {
							b.Fatal(err)
						}
						p = p[k:]
					}
				}
			}
			pump(1000) // warm up pools and buffers
			b.SetBytes(int64(len(sseEvent)))
			b.ReportAllocs()
			b.ResetTimer()
			pump(cnt.n.Load() + int64(b.N))
		})
	}
}
