package gateway_test

import (
	"bufio"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The requests net/http refuses before any handler of the admin API runs (a head it cannot
// parse, no Host, an HTTP version it does not serve, a transfer coding it does not know, an
// expectation other than 100-continue, a head over its 1 MiB limit) get the admin API's JSON
// error with net/http's status, not net/http's text/plain answer; the connection closes as
// net/http closes it. A malformed request after a good one on the same connection too.
func TestAdminAnswersProtocolErrorsInJSON(t *testing.T) {
	g, _, _ := runAdmin(t, adminTOML(""))
	addr := g.AdminAddr()
	host := "Host: " + addr + "\r\n"
	for _, c := range []struct {
		name, head string
		status     int
		code, msg  string
	}{
		{"no Host", "GET /api/gateway/health HTTP/1.1\r\n\r\n", 400, "bad_request", "Host"},
		{"bad header name", "GET /api/gateway/health HTTP/1.1\r\n" + host + "Bad Name: x\r\n\r\n", 400, "bad_request", "header name"},
		{"garbage request line", "hello\r\n\r\n", 400, "bad_request", "malformed"},
		{"HTTP/2.0 request line", "GET /api/gateway/health HTTP/2.0\r\n" + host + "\r\n", 505, "http_version_not_supported", "version"},
		{"unknown transfer coding", "POST /api/gateway/reload HTTP/1.1\r\n" + host + "Content-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "not_implemented", "transfer"},
		{"unknown expectation", "GET /api/gateway/health HTTP/1.1\r\n" + host + "Expect: 200-ok\r\n\r\n", 417, "expectation_failed", "100-continue"},
		{"head over 1 MiB", "GET /api/gateway/health HTTP/1.1\r\n" + host + "X-Big: " + strings.Repeat("a", 1<<20+8192) + "\r\n\r\n", 431, "request_header_fields_too_large", "1 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := rawAdmin(t, addr, c.head, false)
			requireJSONError(t, resp, false, c.status, c.code, c.name)
			require.Contains(t, string(resp.body), c.msg)
			require.Equal(t, "close", resp.headers["connection"])
		})
	}

	t.Run("after a good request", func(t *testing.T) {
		conn := dial(t, addr)
		br := bufio.NewReader(conn)
		send(t, conn, "GET /api/gateway/health HTTP/1.1\r\n"+host+"\r\n")
		resp := readResponse(t, br, false)
		require.Equal(t, 200, resp.status)
		send(t, conn, "GET /api/gateway/health HTTP/1.1\r\n\r\n")
		requireJSONError(t, readResponse(t, br, false), false, 400, "bad_request", "no Host after a good request")
	})
}
