package pool

import (
	"crypto/tls"
	"testing"
)

// BenchmarkExchangeTLS: BenchmarkExchangeIdempotent to an https upstream, over one kept
// connection (checked before each reuse: tlsQuiet).
func BenchmarkExchangeTLS(b *testing.B) {
	cert, roots := testCert(b)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		b.Fatal(err)
	}
	addr := benchUpstreamOn(b, ln, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"id\":\"chatcmpl-1\",\"ok\":1}\n")
	benchExchangeTo(b, New(Options{Addr: addr, TLS: &tls.Config{RootCAs: roots}}), false, "GET /v1/models HTTP/1.1\r\nHost: upstream\r\n\r\n", "")
}
