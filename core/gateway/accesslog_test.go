package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// accessLines waits until the access log at path holds n complete lines and returns them
// decoded. A line without its newline is still being written: a reader of a regular file can
// see part of a concurrent write, so only newline-terminated lines count.
func accessLines(t *testing.T, path string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		data = data[:bytes.LastIndexByte(data, '\n')+1]
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(data) > 0 && len(lines) >= n {
			out := make([]map[string]any, len(lines))
			for i, l := range lines {
				require.NoError(t, json.Unmarshal([]byte(l), &out[i]), "line %d is JSON: %s", i, l)
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("access log has %d lines, want %d:\n%s", len(lines), n, data)
		}
		time.Sleep(10 * time.Millisecond) // polling interval under the deadline above, not an assertion
	}
}

// The access log has a line for a streamed, a failed and a cancelled request, and never a
// body, a credential or a query value.
func TestAccessLogLinesAndNoSecrets(t *testing.T) {
	const secretQuery, secretHeader, secretBody = "QSECRET42", "HSECRET42", "BSECRET42"
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int)
			up := sseUpstream(t, next)
			t.Cleanup(func() { close(next) }) // the cancelled stream's script waits on next
			deadAddr := deadUpstream(t)
			logPath := filepath.Join(t.TempDir(), "access.log")
			extra := fmt.Sprintf(`
[routers.dead]
rule = "PathPrefix(`+"`/dead`"+`)"
service = "dead"
[services.dead.load_balancer]
servers = [{ url = "http://%s" }]
[log]
access_log = %q
`, deadAddr, logPath)
			_, addr := startGateway(t, engine, up.addr(), extra)

			// 1. A streamed request, completed.
			c := dial(t, addr)
			send(t, c, fmt.Sprintf("POST /v1/chat/completions?api_key=%s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nX-Request-Id: stream-1\r\nContent-Length: %d\r\n\r\n%s", secretQuery, secretHeader, len(secretBody), secretBody))
			r := bufio.NewReader(c)
			go func() { next <- 0; next <- -1 }()
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "stream-1", resp.headers["x-request-id"])

			// 2. A failed request: nothing listens behind the dead service.
			c2 := dial(t, addr)
			send(t, c2, "GET /dead/x?token="+secretQuery+" HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 502, readResponse(t, bufio.NewReader(c2), false).status)

			// 3. A cancelled request: the client leaves while waiting for the first event.
			c3 := dial(t, addr)
			send(t, c3, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			r3 := bufio.NewReader(c3)
			line, err := r3.ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, line, "200")
			require.NoError(t, c3.Close())

			lines := accessLines(t, logPath, 3)
			raw, _ := os.ReadFile(logPath)
			for _, s := range []string{secretQuery, secretHeader, secretBody, "api_key", "token"} {
				require.NotContains(t, string(raw), s, "the access log must not hold %q", s)
			}
			byID := map[string]map[string]any{}
			for _, l := range lines {
				for _, k := range []string{"time", "request_id", "entrypoint", "router", "service", "backend", "method", "path", "status", "bytes_in", "bytes_out", "duration_ms", "ttft_ms", "upstream_error", "client_ip"} {
					require.Contains(t, l, k)
				}
				byID[l["request_id"].(string)] = l
			}
			s := byID["stream-1"]
			require.NotNil(t, s, "the client's request id is logged: %v", lines)
			require.Equal(t, "/v1/chat/completions", s["path"])
			require.EqualValues(t, 200, s["status"])
			require.EqualValues(t, len(secretBody), s["bytes_in"])
			require.Greater(t, s["bytes_out"].(float64), 0.0)
			require.Greater(t, s["ttft_ms"].(float64), 0.0)
			require.Equal(t, "127.0.0.1", s["client_ip"])
			require.Equal(t, "api", s["router"])
			require.Equal(t, "up", s["service"])
			var failed, canceled map[string]any
			for _, l := range lines {
				if l["path"] == "/dead/x" {
					failed = l
				}
				if l["canceled"] == true {
					canceled = l
				}
			}
			require.NotNil(t, failed)
			require.EqualValues(t, 502, failed["status"])
			require.Equal(t, "dial", failed["upstream_error"])
			require.Equal(t, "http://"+deadAddr, failed["backend"])
			require.NotNil(t, canceled, "the cancelled request is logged as such: %v", lines)
			require.Equal(t, "/v1/chat/completions", canceled["path"])
		})
	}
}

// X-Request-Id: a sane one from the client is kept, anything else replaced by a generated
// one; either way the upstream gets it and the client gets it back.
func TestRequestIDKeptOrGenerated(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			seen := make(chan []string, 4) // each request's X-Request-Id values, checked by the test
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				var ids []string
				for _, l := range strings.Split(head, "\r\n") {
					if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "X-Request-Id") {
						ids = append(ids, strings.TrimSpace(v))
					}
				}
				seen <- ids
				_, err := fmt.Fprint(c, "HTTP/1.1 200 OK\r\nX-Request-Id: upstream-own\r\nContent-Length: 2\r\n\r\n{}")
				return err == nil
			})
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for _, tc := range []struct{ sent, want string }{
				{"abc-123_x.y:z", "abc-123_x.y:z"},
				{"", ""},
				{"bad id with spaces", ""},
				{strings.Repeat("a", 129), ""},
			} {
				h := ""
				if tc.sent != "" {
					h = "X-Request-Id: " + tc.sent + "\r\n"
				}
				send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n"+h+"\r\n")
				resp := readResponse(t, r, false)
				got := resp.headers["x-request-id"]
				ids := <-seen
				require.Len(t, ids, 1, "one X-Request-Id upstream")
				require.Equal(t, got, ids[0], "the upstream gets the id the client gets back")
				if tc.want != "" {
					require.Equal(t, tc.want, got)
				} else {
					require.NotEmpty(t, got)
					require.NotEqual(t, tc.sent, got)
					require.NotEqual(t, "upstream-own", got)
				}
			}
		})
	}
}

// A request refused before routing (a framing error, a body over the limit) gets an
// X-Request-Id and an access log line like any other.
func TestRejectedRequestIsLoggedWithRequestID(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, echo)
			logPath := filepath.Join(t.TempDir(), "access.log")
			_, addr := startGateway(t, engine, up.addr(), fmt.Sprintf("max_body_bytes = 16\n[log]\naccess_log = %q\n", logPath))
			for _, req := range []string{
				"POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
				"POST /big HTTP/1.1\r\nHost: gw\r\nContent-Length: 17\r\n\r\n01234567890123456",
			} {
				c := dial(t, addr)
				send(t, c, req)
				resp := readResponse(t, bufio.NewReader(c), false)
				require.GreaterOrEqual(t, resp.status, 400)
				require.NotEmpty(t, resp.headers["x-request-id"], "status %d", resp.status)
				require.Contains(t, string(resp.body), `"error"`)
			}
			lines := accessLines(t, logPath, 2)
			statuses := []float64{lines[0]["status"].(float64), lines[1]["status"].(float64)}
			require.ElementsMatch(t, []float64{400, 413}, statuses)
			for _, l := range lines {
				require.Equal(t, true, l["gateway_reply"])
				require.NotEmpty(t, l["request_id"])
			}
		})
	}
}

// The access log's path is the one the client asked for and the router matched, not the one a
// strip-prefix stage sent upstream: a log reader matches lines to client requests.
func TestAccessLogPathIsTheClientsAfterStripPrefix(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			upPaths := make(chan string, 2)
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				upPaths <- strings.Fields(head)[1]
				_, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				return err == nil
			})
			logPath := filepath.Join(t.TempDir(), "access.log")
			extra := fmt.Sprintf(`
[routers.stripped]
rule = "PathPrefix(`+"`/api`"+`)"
service = "up"
middlewares = ["strip"]
[middlewares.strip]
type = "strip-prefix"
prefixes = ["/api"]
[log]
access_log = %q
`, logPath)
			_, addr := startGateway(t, engine, up.addr(), extra)
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for i, target := range []string{"/api/v1/models?x=1", "/api"} {
				send(t, c, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: gw\r\nX-Request-Id: r%d\r\n\r\n", target, i))
				require.Equal(t, 200, readResponse(t, r, false).status)
			}
			require.Equal(t, "/v1/models?x=1", <-upPaths, "the upstream gets the stripped path")
			require.Equal(t, "/", <-upPaths)

			byID := map[string]any{}
			for _, l := range accessLines(t, logPath, 2) {
				byID[l["request_id"].(string)] = l["path"]
				require.Equal(t, "stripped", l["router"])
			}
			require.Equal(t, map[string]any{"r0": "/api/v1/models", "r1": "/api"}, byID)
		})
	}
}
