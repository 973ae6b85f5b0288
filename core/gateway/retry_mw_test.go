package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// The retry middleware on both engines: a GET that meets two 503s gets the third attempt's
// 200, and so does the next one on the same connection; a POST is answered the first 503 and
// reached the upstream once.
func TestRetryMiddlewareOnBothEngines(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var n atomic.Int32
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
				st := 200
				if n.Add(1)%3 != 0 {
					st = 503
				}
				_, err := fmt.Fprintf(c, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", st)
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
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["again"]
[middlewares.again]
type = "retry"
attempts = 3
initial_backoff = "1ms"
max_backoff = "5ms"
`, engineTOML(engine), up.addr()))
			resp := get(t, base+"/v1/models")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, int32(3), n.Load())
			// Again, on the kept-alive connection: the request counts its own attempts.
			resp = get(t, base+"/v1/models")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, int32(6), n.Load())

			r, err := mwClient.Post(base+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
			require.Equal(t, int32(7), n.Load(), "the POST reached the upstream once")
		})
	}
}
