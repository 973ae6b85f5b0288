package snapshot_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// chatHead is a typical OpenAI chat request head as an SDK sends it.
const chatHead = "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway.example.com\r\nUser-Agent: OpenAI/Python 1.54.0\r\nAccept: application/json\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-test-0123456789abcdef\r\nX-Stainless-Lang: python\r\nContent-Length: 312\r\n\r\n"

// twentyRouters builds a config with 20 routers of mixed rules; the chat route matches late.
func twentyRouters(b *testing.B) *snapshot.Snapshot {
	var sb strings.Builder
	sb.WriteString("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n")
	for i := 0; i < 19; i++ {
		fmt.Fprintf(&sb, "[routers.r%02d]\nrule = \"Host(`tenant%d.example.com`) && PathPrefix(`/api/%d`) && Method(`GET`)\"\nservice = \"up\"\n", i, i, i)
	}
	sb.WriteString("[routers.chat]\nrule = \"PathPrefix(`/v1`) && Method(`POST`) && Header(`Content-Type`, `application/json`)\"\nservice = \"up\"\npriority = 1\n")
	cfg, err := config.LoadBytes("bench.toml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	s, err := snapshot.Compile(cfg, nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Retire(nil) })
	return s
}

// BenchmarkParseAndRoute is the per-request work on an event loop before a request is handed
// to a worker: find the head, parse it (RFC 9112 framing checks included) and match it against
// 20 routers. Must be 0 allocs/op.
func BenchmarkParseAndRoute(b *testing.B) {
	s := twentyRouters(b)
	in := []byte(chatHead)
	var req http1.Request
	lim := &http1.Limits{}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		skip, n := http1.FindHeadEnd(in)
		if err := req.ParseRequestHead(in[skip:skip+n], lim); err != nil {
			b.Fatal(err)
		}
		if rt, _ := s.Resolve("web", &req); rt == nil || rt.Name != "chat" {
			b.Fatal("chat route not matched")
		}
	}
}
