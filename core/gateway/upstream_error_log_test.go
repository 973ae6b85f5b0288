package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The warning for a failed upstream names the backend and the stage in their attributes and
// says in error= only what went wrong, each fact once, on every engine: a refused connect, an
// upstream that closes without answering, a garbage response head, a reset, a body cut short,
// and each timeout by its setting. Where the client gets the gateway's own error, its message
// says the same as the log.
func TestUpstreamRefusedLogLineSaysEachThingOnce(t *testing.T) {
	hold := func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		_, _ = io.Copy(io.Discard, c) // until the gateway gives up and closes
		return false
	}
	for _, tc := range []struct {
		name   string
		script func(c net.Conn, r *bufio.Reader, head string, body []byte) bool // nil: nothing listens
		extra  string                                                           // service keys
		want   string                                                           // after backend=http://ADDR
		client string                                                           // the client's error message, when it is the gateway's
	}{
		{"refused", nil, "",
			` stage=connect error="connection refused"`, "the upstream could not be reached"},
		{"closed before answering", func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			return false
		}, "", ` stage="response head" error="closed the connection before answering"`, "the upstream closed the connection before answering"},
		{"garbage head", func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			_, _ = io.WriteString(c, "garbage\r\n\r\n")
			return false
		}, "", ` stage="response head" error="malformed response head: malformed status line (RFC 9112 §4)"`, ""},
		{"reset", func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			_ = c.(*net.TCPConn).SetLinger(0) // the close sends RST
			return false
		}, "", ` stage="response head" error="connection reset by peer"`, ""},
		{"eof mid-body", func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
			return false
		}, "", ` stage=body error="closed the connection before the response was complete"`, ""},
		{"head timeout", hold, `response_header_timeout = "50ms"`,
			` stage="response head" error="no response head within response_header_timeout"`, ""},
		{"body idle", func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
			return hold(c, r, head, body)
		}, `stream_idle_timeout = "50ms"`, ` stage=body error="nothing read within stream_idle_timeout"`, ""},
	} {
		for _, engine := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				addr := deadUpstream(t)
				if tc.script != nil {
					addr = serveUpstream(t, tc.script).addr()
				}
				logs := new(syncBuffer)
				lb := fmt.Sprintf("servers = [{ url = %q }]\n%s", "http://"+addr, tc.extra)
				g := runGatewayLog(t, "test.toml", gatewayTOML(engine, "PathPrefix(`/`)", "", lb), slog.New(slog.NewTextHandler(logs, nil)))

				c := dial(t, g.Addr("web"))
				send(t, c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
				want := `msg="upstream failed" router=api backend=http://` + addr + tc.want + " suppressed_since_last=0\n"
				require.Eventually(t, func() bool { return strings.Contains(logs.String(), want) }, 5*time.Second, 5*time.Millisecond,
					"want %s\nin\n%s", want, logs)
				if tc.client != "" {
					resp := readResponse(t, bufio.NewReader(c), false)
					var body struct{ Error struct{ Message string } }
					require.NoError(t, json.Unmarshal(resp.body, &body), "%s", resp.body)
					require.Equal(t, tc.client, body.Error.Message)
				}
			})
		}
	}
}
