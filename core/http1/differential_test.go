package http1

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// TestAgreesWithNetHTTP cross-checks the framing of well-formed requests against Go's
// net/http.ReadRequest, an independent RFC 9112 implementation.
func TestAgreesWithNetHTTP(t *testing.T) {
	heads := []string{
		chatHead,
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /x?y=1 HTTP/1.0\r\n\r\n",
		"GET /x HTTP/1.0\r\nConnection: keep-alive\r\nHost: a:1\r\n\r\n",
		"POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"PUT /u HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 42\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://b.example/p?q HTTP/1.1\r\nHost: b.example\r\n\r\n",
		"DELETE /a%20b HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
	}
	for _, h := range heads {
		std, err := http.ReadRequest(bufio.NewReader(strings.NewReader(h)))
		if err != nil {
			t.Fatalf("net/http rejects %q: %v", h, err)
		}
		r, err := parseReq(t, h, nil)
		if err != nil {
			t.Fatalf("%q: %v", h, err)
		}
		chunked := len(std.TransferEncoding) > 0 && std.TransferEncoding[0] == "chunked"
		stdCL := std.ContentLength
		if stdCL == 0 && std.Header.Get("Content-Length") == "" && !chunked {
			stdCL = -1 // net/http reports 0 for "no body"
		}
		switch {
		case string(r.Method) != std.Method,
			string(r.URI) != std.RequestURI,
			string(r.Host) != std.Host,
			r.Chunked != chunked,
			r.ContentLength != stdCL && !(chunked && r.ContentLength == -1),
			r.KeepAlive == std.Close,
			r.Major != std.ProtoMajor || r.Minor != std.ProtoMinor:
			t.Errorf("%q: got method %q uri %q host %q chunked %v cl %d keepalive %v; net/http %q %q %q %v %d close=%v",
				h, r.Method, r.URI, r.Host, r.Chunked, r.ContentLength, r.KeepAlive,
				std.Method, std.RequestURI, std.Host, chunked, std.ContentLength, std.Close)
		}
	}
}
