package pd_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Oddly spelled states, as a worker may send them: white space, escapes, key order.
const (
	oddTarget = `{ "z":1 ,"a" : [ "\u00e9", 2.50 ] }`
	oddSource = `{"kv":"\/blocks\/7" , "n" :  3}`
)

// stubWorker serves the worker protocol for one role, with fixed opaque states, and keeps
// the bodies it got.
type stubWorker struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string]string // by path
}

func startStubWorker(t *testing.T, id, role string) *stubWorker {
	w := &stubWorker{bodies: map[string]string{}}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+workerKey {
			rw.WriteHeader(401)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.bodies[r.URL.Path] = string(b)
		w.mu.Unlock()
		switch r.URL.Path {
		case "/power/v1/observation":
			fmt.Fprintf(rw, `{"worker_id":%q,"role":%q,"ready":true,"healthy":true,"active":0,"max_active":8,"waiting":0,"state_transfer":true,"execution_config_digest":"sha256:good","deployment_generation":3,"epoch":0}`, id, role)
		case "/power/v1/decode/prepare":
			fmt.Fprintf(rw, `{"target": %s }`, oddTarget)
		case "/power/v1/prefill/execute":
			fmt.Fprintf(rw, `{"source":%s,"cached_tokens":0}`, oddSource)
		case "/power/v1/decode/execute":
			rw.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(rw, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		default:
			rw.WriteHeader(404)
		}
	}))
	t.Cleanup(w.Close)
	return w
}

func (w *stubWorker) body(path string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bodies[path]
}

// The target and source states go from one answer into the next call byte for byte.
func TestOpaqueStatesForwardedByteForByte(t *testing.T) {
	p, d := startStubWorker(t, "stub-prefill", "prefill"), startStubWorker(t, "stub-decode", "decode")
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.fleet.load_balancer]
servers = [{ url = %q }, { url = %q }]
[services.fleet.workers]
observe_interval = "20ms"
api_key_env = %q
[models.chat.targets.t]
service = "fleet"
deployment_generation = 3
[models.chat.scheduling]
phase = "decode"
[models.chat.scheduling.distributed_serving]
api_key_env = %q
`, p.URL, d.URL, workerKeyEnv, workerKeyEnv)
	g := startGateway(t, toml)
	status, data := stream(t, g, chatBody("opaque"))
	require.Equal(t, 200, status, data)
	require.Equal(t, []string{`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`, "[DONE]"}, data)
	require.True(t, strings.Contains(p.body("/power/v1/prefill/execute"), `"target":`+oddTarget), p.body("/power/v1/prefill/execute"))
	require.True(t, strings.Contains(d.body("/power/v1/decode/execute"), `"source":`+oddSource), d.body("/power/v1/decode/execute"))
	require.True(t, strings.Contains(d.body("/power/v1/decode/execute"), `"request":`+chatBody("opaque")), "the request goes as the client sent it")
}
