package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// A model router in front of a service that scales from zero: the servers of a model target
// are observed, and each replica, polled while it starts, reports itself not ready. The
// requests the buffer held are admitted the moment the replica passes its readiness probe, so
// its observation must say ready by then, or they would all be answered 503 no_backend after
// waiting for the cold start. Polls every 100 ms of a 1 s start make sure the replica was
// observed starting.
func TestColdStartServesAModelRouterWhoseWorkersAreObserved(t *testing.T) {
	_, addr, _ := startConfigGateway(t, scaledModelConfig(t, "1s", `keepalive_interval = "100ms"`))

	plainDone := goCall("POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	status, body := streamChatBody(t, addr, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	plain := <-plainDone
	require.NoError(t, plain.err)
	require.Equal(t, 200, plain.r.status, plain.r.body)
	require.Equal(t, 200, status)
	require.NotContains(t, body, "event: error")
	require.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "the model's stream after the keep-alives: %q", body)
}

// scaledModelConfig is a model router whose alias "m" has one target, service "llm": a
// service that scales from zero to one llmsim replica taking startup to start, observed every
// 100 ms; scaling holds more [services.llm.scaling] keys.
func scaledModelConfig(t *testing.T, startup, scaling string) string {
	llmsimBin := testenv.BuildBinary(t, "./cmd/llmsim")
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.llm.workers]
observe_interval = "100ms"
observation_ttl = "10s"
[services.llm.scaling]
executor = "exec"
max_replicas = 1
container_concurrency = 4
%s
[services.llm.scaling.exec]
command = [%q, "--listen", "127.0.0.1:{port}", "--startup-delay", %q, "--ttft", "20ms", "--itl", "2ms", "--tokens", "4"]
stop_timeout = "2s"
[models.m.targets.a]
service = "llm"
`, scaling, llmsimBin, startup)
}

// The replica slots of a service scaled to zero have no process: polling them would only
// meet refused connections, logged as workers that fail ("worker observation failed ...
// connection refused") at every start. The rounds poll only the replicas that serve; one
// that became ready is observed, by the rounds too.
func TestObservationLeavesOutReplicaSlotsWithoutAReplica(t *testing.T) {
	_, addr, admin := startConfigGateway(t, scaledModelConfig(t, "0s", `scale_to_zero_after = "1m"`))
	type row struct {
		Kind      string  `json:"kind"`
		LastError *string `json:"last_error"`
	}
	workers := func() ([]row, error) {
		resp, err := http.Get(admin + "/api/gateway/workers")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var rows []row
		return rows, json.NewDecoder(resp.Body).Decode(&rows)
	}
	// Several rounds of 100 ms pass with no replica. Never returns at its deadline while a
	// condition may still run on its own goroutine, so what the condition saw goes through a
	// mutex.
	var (
		mu   sync.Mutex
		seen []row
	)
	require.Never(t, func() bool {
		rows, err := workers()
		mu.Lock()
		seen = rows
		mu.Unlock()
		return err != nil || len(rows) != 1 || rows[0].LastError != nil || rows[0].Kind != "unknown"
	}, 600*time.Millisecond, 20*time.Millisecond, "a slot with no replica was polled")
	mu.Lock()
	last := seen
	mu.Unlock()
	require.Len(t, last, 1)

	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	require.Equal(t, 200, r.status, r.body)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rows, err := workers()
		if assert.NoError(c, err) && assert.Len(c, rows, 1) {
			assert.Equal(c, "worker", rows[0].Kind)
			assert.Nil(c, rows[0].LastError)
		}
	}, 5*time.Second, 20*time.Millisecond)
}
