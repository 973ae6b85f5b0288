package gateway_test

import (
	"bufio"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Max-Forwards on TRACE and OPTIONS (RFC 9110 §7.6.2): 0 is answered by the gateway as the
// final recipient, a larger value is forwarded one less; other methods forward it as received.
func TestMaxForwardsIsCheckedAndDecremented(t *testing.T) {
	up, heads := recordHeads(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)

			send(t, c, "OPTIONS /v1/models HTTP/1.1\r\nHost: gw\r\nMax-Forwards: 0\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "0", resp.headers["content-length"], "RFC 9110 §9.3.7")

			send(t, c, "TRACE /v1/models HTTP/1.1\r\nHost: gw\r\nMax-Forwards: 0\r\nAuthorization: Bearer sk-secret\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "message/http", resp.headers["content-type"])
			require.True(t, strings.HasPrefix(string(resp.body), "TRACE /v1/models HTTP/1.1\r\n"), "%q", resp.body)
			require.NotContains(t, string(resp.body), "sk-secret", "RFC 9110 §9.3.8: no sensitive fields reflected")
			select {
			case h := <-heads:
				t.Fatalf("Max-Forwards: 0 was forwarded:\n%s", h)
			default:
			}

			send(t, c, "OPTIONS /v1/models HTTP/1.1\r\nHost: gw\r\nMax-Forwards: 7\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status)
			h := <-heads
			require.Contains(t, h, "\r\nMax-Forwards: 6\r\n")
			require.Equal(t, 1, strings.Count(strings.ToLower(h), "max-forwards"))

			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\nMax-Forwards: 0\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status)
			require.Contains(t, <-heads, "\r\nMax-Forwards: 0\r\n")
		})
	}
}

// A TRACE the gateway answers as its final recipient reflects the request line as received
// (RFC 9110 §9.3.8), its HTTP-version included: a later HTTP/1 minor version is served as
// HTTP/1.1 (RFC 9110 §2.5) but reflected as the client wrote it. Requests pipelined in one
// write each get their own.
func TestTraceReflectsTheVersionAsReceived(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			versions := []string{"HTTP/1.2", "HTTP/1.1", "HTTP/1.9", "HTTP/1.2"}
			var all strings.Builder
			for _, v := range versions {
				all.WriteString("TRACE /v1/models " + v + "\r\nHost: gw\r\nMax-Forwards: 0\r\n\r\n")
			}
			send(t, c, all.String())
			for _, v := range versions {
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status, v)
				require.Equal(t, "message/http", resp.headers["content-type"], v)
				require.Equal(t, "TRACE /v1/models "+v+"\r\nHost: gw\r\n\r\n", string(resp.body), v)
			}

			c = dial(t, addr)
			r = bufio.NewReader(c)
			send(t, c, "TRACE /v1/models HTTP/1.0\r\nHost: gw\r\nMax-Forwards: 0\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "TRACE /v1/models HTTP/1.0\r\nHost: gw\r\n\r\n", string(resp.body))
		})
	}
}
