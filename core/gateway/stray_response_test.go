package gateway_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// strayResponse is what an upstream out of step with its requests sends after a response: a
// whole response of its own, which must never be read as the answer to the next request.
const strayResponse = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\npoisoned"

// Bytes an upstream sends past the end of a response (a body on a HEAD, 204 or 304 answer, a
// body longer than its Content-Length), whether with the response or just after it, over
// plaintext or TLS, close that connection: the next request, another client's, gets its own
// answer (RFC 9112 §9.3.2; response queue poisoning), on every engine.
func TestUpstreamBytesAfterResponseNeverAnswerTheNextRequest(t *testing.T) {
	big := strings.Repeat("b", 8<<10) // longer than the gateway's first read of a response
	cases := []struct {
		name, method, answer string
		late                 bool // the stray bytes come after the client has its answer
	}{
		{"HEAD answered with a body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 45\r\n\r\n", true},
		{"204 with a body", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 45\r\n\r\n", true},
		{"304 with a body", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 45\r\n\r\n", true},
		{"body longer than Content-Length, late", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
		{"body longer than Content-Length, one write", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
		{"large body longer than Content-Length, one write", "GET",
			fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(big), big), false},
		{"chunked body then more, one write", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	}
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "up", "up", "upstream.internal")
	pair, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	for _, tc := range cases {
		for _, scheme := range []string{"http", "https"} {
			for _, engine := range engines {
				t.Run(tc.name+"/"+scheme+"/"+engine, func(t *testing.T) {
					late := make(chan net.Conn, 1)
					script := func(_ *upstream, c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
						if !strings.Contains(head, " /first ") {
							_, err := fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal")
							return err == nil
						}
						if tc.late {
							_, err := fmt.Fprint(c, tc.answer)
							late <- c
							return err == nil
						}
						_, err := fmt.Fprint(c, tc.answer+strayResponse)
						return err == nil
					}
					ln, err := net.Listen("tcp", "127.0.0.1:0")
					require.NoError(t, err)
					settings := ""
					if scheme == "https" {
						ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}})
						settings = fmt.Sprintf("\ntls = { ca_file = %q, server_name = \"upstream.internal\" }", ca.pemFile)
					}
					up := serveUpstreamOn(t, ln, script)
					_, gw := startGatewayServers(t, engine, fmt.Sprintf(`servers = [{ url = "%s://%s" }]`, scheme, up.addr())+settings)
					c := dial(t, gw)
					send(t, c, tc.method+" /first HTTP/1.1\r\nHost: gw\r\n\r\n")
					readResponse(t, bufio.NewReader(c), tc.method == "HEAD")
					if tc.late {
						_, err := fmt.Fprint(<-late, strayResponse)
						require.NoError(t, err)
					}
					for range 2 {
						next := dial(t, gw)
						send(t, next, "GET /next HTTP/1.1\r\nHost: gw\r\n\r\n")
						resp := readResponse(t, bufio.NewReader(next), false)
						require.Equal(t, 200, resp.status)
						require.Equal(t, "real", string(resp.body), "the answer to another request")
					}
				})
			}
		}
	}
}
