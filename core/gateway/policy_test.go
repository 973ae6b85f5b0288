package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The HTTP policy middlewares on a real gateway, on both engines: a browser app's preflight
// and request, a path prefix stripped, header edits both ways, a body bound and an address
// allow-list, all against a real upstream on loopback.
func TestPolicyMiddlewaresOnBothEngines(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var heads = make(chan string, 16)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				heads <- head
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nServer: upstream/1.0\r\nAccess-Control-Allow-Origin: *\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				return err == nil
			})
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[routers.api]
rule = "PathPrefix(`+"`/api`"+`)"
service = "up"
middlewares = ["cors", "edit", "strip", "small"]
[routers.internal]
rule = "PathPrefix(`+"`/internal`"+`)"
service = "up"
middlewares = ["office"]

[middlewares.cors]
type = "cors"
allow_origins = ["https://app.example"]
expose_headers = ["X-Request-Id"]
[middlewares.edit]
type = "headers"
request_set = { "X-Env" = "prod" }
request_remove = ["Cookie"]
response_remove = ["Server"]
[middlewares.strip]
type = "strip-prefix"
prefixes = ["/api"]
[middlewares.small]
type = "body-limit"
max_bytes = 16
[middlewares.office]
type = "ip-allow"
source_range = ["192.0.2.0/24"]
`, engineTOML(engine), up.addr()))
			addr := strings.TrimPrefix(base, "http://")
			c := dial(t, addr)
			r := bufio.NewReader(c)

			send(t, c, "OPTIONS /api/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 204, resp.status)
			require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"])
			require.Equal(t, "GET, HEAD, POST", resp.headers["access-control-allow-methods"])

			send(t, c, "POST /api/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nCookie: s=1\r\nContent-Length: 2\r\n\r\n{}")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, []string{"https://app.example"}, resp.all("Access-Control-Allow-Origin"), "the upstream's * is replaced")
			require.Empty(t, resp.all("Server"))
			head := <-heads
			require.True(t, strings.HasPrefix(head, "POST /v1/chat/completions HTTP/1.1\r\n"), head)
			require.Contains(t, head, "X-Env: prod\r\n")
			require.Contains(t, head, "X-Forwarded-Prefix: /api\r\n")
			require.NotContains(t, head, "Cookie")

			send(t, c, "POST /api/x HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nContent-Length: 17\r\n\r\n01234567890123456")
			resp = readResponse(t, r, false)
			require.Equal(t, 413, resp.status)
			require.Equal(t, "https://app.example", resp.headers["access-control-allow-origin"], "a script can read the refusal")

			send(t, c, "GET /internal/x HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 403, resp.status, "127.0.0.1 is not in 192.0.2.0/24")
			require.Contains(t, string(resp.body), `"code":"ip_not_allowed"`)
			require.Empty(t, heads, "only the one request passed")
		})
	}
}
