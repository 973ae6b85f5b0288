package ingress

import (
	"strconv"
	"testing"

	"github.com/sluice-gw/sluice/core/http1"
)

// benchBody and benchHead make a typical chat completion request.
const (
	benchBody = `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"Say hello in one word."}],"stream":true}`
	benchHead = "POST /v1/chat/completions HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: OpenAI/Python 1.40.0\r\n" +
		"Accept: application/json\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-0123456789abcdef\r\n" +
		"X-Stainless-Lang: python\r\nX-Stainless-Runtime: CPython\r\nContent-Length: "
)

var benchRequest = benchHead + strconv.Itoa(len(benchBody)) + "\r\n\r\n" + benchBody

// BenchmarkFramingCheck is what the fasthttp engine's framing check costs per request, as
// the bytes come: in one read, and with the first byte alone first (as fasthttp reads a
// keep-alive connection's next request). BenchmarkParseRequestHead is the handler's own parse
// of the same head, for scale.
func BenchmarkFramingCheck(b *testing.B) {
	req := []byte(benchRequest)
	for _, tc := range []struct {
		name string
		cut  int
	}{{"one read", len(req)}, {"first byte apart", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			fc := framingCheck{lim: &http1.Limits{}}
			b.ReportAllocs()
			b.SetBytes(int64(len(req)))
			for i := 0; i < b.N; i++ {
				if fc.feed(req[:tc.cut]) != nil || fc.feed(req[tc.cut:]) != nil {
					b.Fatal(fc.err)
				}
			}
		})
	}
}

func BenchmarkParseRequestHead(b *testing.B) {
	req := []byte(benchRequest)
	head := req[:len(req)-len(benchBody)]
	var r http1.Request
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for i := 0; i < b.N; i++ {
		if err := r.ParseRequestHead(head, nil); err != nil {
			b.Fatal(err)
		}
	}
}
