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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				if req.URL.Path == "/power/v1/observation" {
					_, _ = fmt.Fprint(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				}
				// Anything else: read and close without a byte of answer.
			}()
		}
	}()
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
`, engineTOML(engine), ln.Addr()))
			body := `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`
			client := &http.Client{Timeout: 10 * time.Second}
			resp, err := client.Post("http://"+g.Addr("web")+"/v1/chat/completions", "application/json", strings.NewReader(body))
			require.NoError(t, err, "an answer, not a hang")
			defer resp.Body.Close()
			require.Equal(t, 502, resp.StatusCode)
		})
	}
}
