package gateway_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Responses without a body (RFC 9112 §6.3: HEAD, 1xx, 204, 304) must not make the gateway wait
// for one, and the connection stays usable for the next request.
func TestBodylessResponsesKeepTheConnection(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		var resp string
		switch {
		case strings.HasPrefix(head, "HEAD "):
			resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1234\r\n\r\n"
		case strings.HasPrefix(head, "GET /204"):
			resp = "HTTP/1.1 204 No Content\r\n\r\n"
		case strings.HasPrefix(head, "GET /304"):
			resp = "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"
		case strings.HasPrefix(head, "GET /100"):
			resp = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		default:
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone"
		}
		_, err := io.WriteString(c, resp)
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)

			send(t, c, "HEAD /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, r, true)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "1234", resp.headers["content-length"], "HEAD keeps the GET's length")

			send(t, c, "GET /204 HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 204, resp.status)
			require.Empty(t, resp.headers["content-length"])
			require.Empty(t, resp.headers["transfer-encoding"])

			send(t, c, "GET /304 HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 304, resp.status)
			require.Equal(t, `"x"`, resp.headers["etag"])

			send(t, c, "GET /100 HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status, "interim 1xx responses are not relayed")
			require.Equal(t, "ok", string(resp.body))

			send(t, c, "GET /last HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, "done", string(resp.body), "the connection is still in sync")
		})
	}
}
