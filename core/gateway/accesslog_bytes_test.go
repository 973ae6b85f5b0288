package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The access log's bytes_out is the response body bytes the client got, whoever wrote them:
// the upstream's, and the gateway's own answers — the model list, a validation error, a rate
// limit's 429, a dead upstream's 502, a refused malformed request — and none for a HEAD, whose
// answer has no body. An SSE stream the upstream cut counts the error event the gateway ends
// it with.
func TestAccessLogBytesOutCountsTheGatewaysOwnReplies(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, body []byte) bool {
				if strings.Fields(head)[1] == "/cut" {
					// An event, then the upstream goes away mid-stream.
					_, _ = fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
						"d\r\ndata: first\n\n\r\n")
					return false
				}
				return echo(c, nil, head, body)
			})
			logPath := filepath.Join(t.TempDir(), "access.log")
			extra := fmt.Sprintf(`
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[models.m.targets.t]
service = "up"
[routers.limited]
rule = "PathPrefix(`+"`/limited`"+`)"
service = "up"
middlewares = ["rl"]
[middlewares.rl]
type = "rate-limit"
rate = 1
burst = 1
[routers.dead]
rule = "PathPrefix(`+"`/dead`"+`)"
service = "dead"
[services.dead.load_balancer]
servers = [{ url = "http://%s" }]
[log]
access_log = %q
`, deadUpstream(t), logPath)
			_, addr := startGateway(t, engine, up.addr(), extra)

			type sent struct {
				status int
				body   int
			}
			byID := map[string]sent{}
			do := func(id, req string, head bool) *response {
				c := dial(t, addr)
				send(t, c, req)
				resp := readResponse(t, bufio.NewReader(c), head)
				if id == "" {
					id = resp.headers["x-request-id"]
				}
				byID[id] = sent{resp.status, len(resp.body)}
				return resp
			}
			get := func(id, path string) *response {
				return do(id, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: gw\r\nX-Request-Id: %s\r\n\r\n", path, id), false)
			}
			require.Equal(t, 200, get("models", "/v1/models").status)
			require.Equal(t, 200, do("models-head", "HEAD /v1/models HTTP/1.1\r\nHost: gw\r\nX-Request-Id: models-head\r\n\r\n", true).status)
			require.Equal(t, 400, do("invalid", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Request-Id: invalid\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\nnot json", false).status)
			require.Equal(t, 200, get("limited-1", "/limited/a").status)
			require.Equal(t, 429, get("limited-2", "/limited/b").status)
			require.Equal(t, 502, get("dead", "/dead/x").status)
			require.Equal(t, 400, do("", "POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false).status)
			cut := do("cut", "POST /cut HTTP/1.1\r\nHost: gw\r\nX-Request-Id: cut\r\nContent-Length: 2\r\n\r\n{}", false)
			require.Equal(t, 200, cut.status)
			require.Contains(t, string(cut.body), "event: error", "the cut stream ends with the gateway's error event")

			lines := accessLines(t, logPath, len(byID))
			require.Len(t, lines, len(byID))
			for _, l := range lines {
				id := l["request_id"].(string)
				want, ok := byID[id]
				require.True(t, ok, "a line for a request sent: %v", l)
				require.EqualValues(t, want.status, l["status"], "%s", id)
				assert.EqualValues(t, want.body, l["bytes_out"], "%s: the body bytes the client got (status %d)", id, want.status)
			}
			require.Zero(t, byID["models-head"].body)
			require.NotZero(t, byID["models"].body)
		})
	}
}

// A held stream's body is the gateway's own until its upstream answers: the keep-alive
// comments sent while the caller waits for a cold start and the error event that ends a wait
// that timed out count in bytes_out like any body bytes.
func TestAccessLogBytesOutOfAHeldStream(t *testing.T) {
	streamBody := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "access.log")
			_, addr, _ := startConfigGateway(t, scaledConfigEngine(t, engine, "30s", `
max_replicas = 1
keepalive_interval = "100ms"
buffer_timeout = "500ms"
`)+fmt.Sprintf("[log]\naccess_log = %q\n", logPath))
			status, body := streamChatBody(t, addr, streamBody)
			require.Equal(t, 200, status)
			require.True(t, strings.HasPrefix(body, ": keep-alive\n\n"), "%q", body)
			require.Contains(t, body, "event: error")
			lines := accessLines(t, logPath, 1)
			require.EqualValues(t, len(body), lines[0]["bytes_out"], "the keep-alives and the error event: %q", body)
		})
	}
}

// A chunked response that is not an event stream goes to the client with the upstream's own
// chunks; bytes_out counts their payload, as for a body the gateway re-chunks or one of
// fixed length, not the chunk framing, so that every engine logs the same figure for it.
func TestAccessLogBytesOutOfAChunkedResponseIsItsPayload(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
				_, err := fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+
					"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
				return err == nil
			})
			logPath := filepath.Join(t.TempDir(), "access.log")
			_, addr := startGateway(t, engine, up.addr(), fmt.Sprintf("[log]\naccess_log = %q\n", logPath))
			c := dial(t, addr)
			send(t, c, "GET /chunked HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "hello world", string(resp.body))
			lines := accessLines(t, logPath, 1)
			require.EqualValues(t, len("hello world"), lines[0]["bytes_out"], "the payload, not the chunk framing")
		})
	}
}
