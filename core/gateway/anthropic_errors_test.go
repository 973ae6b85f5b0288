package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// On a router without models, the gateway's own answers for a failed upstream on Anthropic's
// Messages API paths are in Anthropic's error shape, as the middlewares' refusals on the same
// route are, so that the Anthropic SDK reports them as the API's own: the 502 of an upstream
// that cannot be reached, and the SSE error event of a stream cut short. The path judged is
// the one the upstream is sent (after strip-prefix); other paths keep OpenAI's shape.
func TestPlainRouteAnswersAnthropicPathsInAnthropicShape(t *testing.T) {
	const messages = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
	for _, engine := range engines {
		t.Run("unreachable/"+engine, func(t *testing.T) {
			addr := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["strip"]

[middlewares.strip]
type = "strip-prefix"
prefixes = ["/claude"]

[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[admin]
address = ""
`, engineTOML(engine), deadUpstream(t)))
			for _, c := range []struct{ path, want string }{
				{"/v1/messages", `{"type":"error","error":{"type":"api_error","message":"the upstream could not be reached"}}` + "\n"},
				{"/claude/v1/messages", `{"type":"error","error":{"type":"api_error","message":"the upstream could not be reached"}}` + "\n"},
				{"/v1/chat/completions", `{"error":{"message":"the upstream could not be reached","type":"upstream_error","param":null,"code":"upstream_unreachable"}}` + "\n"},
			} {
				resp, err := http.Post(addr+c.path, "application/json", strings.NewReader(messages))
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusBadGateway, resp.StatusCode, c.path)
				require.Equal(t, c.want, string(body), c.path)
			}
		})
	}

	const first = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		fmt.Fprintf(c, "%x\r\n%s\r\n", len(first), first)
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // RST: the stream is cut
		}
		return false
	})
	for _, engine := range engines {
		t.Run("stream cut/"+engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			send(t, c, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(messages), messages))
			payload, ended := readCutChunks(t, bufio.NewReader(c))
			require.True(t, ended, "the body ends with its last chunk: %q", payload)
			require.Equal(t, first+"event: error\n"+
				`data: {"type":"error","error":{"type":"api_error","message":"the upstream failed during the stream"}}`+"\n\n", payload)
		})
	}
}
