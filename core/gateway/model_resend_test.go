package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A model router's request (a POST) whose worker closes the connection before answering gets
// 502 at once on every engine: the resend rule reads the service the request went to (a
// model router's route names none).
func TestModelRequestCutByItsWorkerGets502(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if strings.HasPrefix(head, "GET /power/v1/observation ") {
			_, _ = fmt.Fprint(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
			return true
		}
		return false // anything else: closed without a byte of answer
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			g := runGateway(t, "model.toml", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s

[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true

[services.llm.load_balancer]
servers = [{ url = "http://%s" }]

[models.chat.targets.t1]
service = "llm"
upstream_model = "m"

[admin]
address = ""
`, engineTOML(engine), up.addr()))
			body := `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`
			client := &http.Client{Timeout: 10 * time.Second}
			resp, err := client.Post("http://"+g.Addr("web")+"/v1/chat/completions", "application/json", strings.NewReader(body))
			require.NoError(t, err, "an answer, not a hang")
			defer resp.Body.Close()
			require.Equal(t, 502, resp.StatusCode)
		})
	}
}
