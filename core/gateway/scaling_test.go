package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// scaledConfig is a gateway whose service "llm" runs llmsim replicas through the exec
// executor, each taking startup to become ready; scaling holds the other scaling keys.
func scaledConfig(t *testing.T, startup string, scaling string) string {
	return scaledConfigEngine(t, "gnet", startup, scaling)
}

// scaledConfigEngine is scaledConfig on the given ingress engine.
func scaledConfigEngine(t *testing.T, engine, startup string, scaling string) string {
	llmsimBin := testenv.BuildBinary(t, "./cmd/llmsim")
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.load_balancer]
strategy = "least-connections"
[services.llm.scaling]
executor = "exec"
%s
[services.llm.scaling.exec]
command = [%q, "--listen", "127.0.0.1:{port}", "--startup-delay", %q, "--ttft", "20ms", "--itl", "2ms", "--tokens", "4"]
stop_timeout = "2s"
`, engineTOML(engine), scaling, llmsimBin, startup)
}

type scalingView struct {
	Desired  int `json:"desired_replicas"`
	Target   int `json:"target_replicas"`
	Ready    int `json:"ready_replicas"`
	Starting int `json:"starting_replicas"`
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	Replicas []struct {
		URL   string `json:"url"`
		State string `json:"state"`
		PID   int    `json:"pid"`
	} `json:"replicas"`
}

func scalingOf(t *testing.T, admin string) scalingView {
	t.Helper()
	st, body := adminGet(t, admin+"/api/gateway/services")
	require.Equal(t, 200, st, body)
	var all []struct {
		Name    string       `json:"name"`
		Scaling *scalingView `json:"scaling"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &all))
	for _, s := range all {
		if s.Name == "llm" && s.Scaling != nil {
			return *s.Scaling
		}
	}
	t.Fatalf("no scaled service llm in %s", body)
	return scalingView{}
}

// waitScaling polls the admin API until ok holds, or fails after within.
func waitScaling(t *testing.T, admin string, within time.Duration, what string, ok func(scalingView) bool) scalingView {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := scalingOf(t, admin)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened: %+v", what, s)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not an assertion
	}
}

// Scale from zero: with no replica running and each taking 2 s to start, 20 requests sent at
// once all wait in the buffer and all succeed (none gets a 502 or 503); the replicas started
// follow the formula (⌈20 / (10 × 0.7)⌉ = 3, clamped to max_replicas 2); once the load is
// gone the replicas go back to zero.
func TestScaleFromZeroBuffersABurstAndScalesBackToZero(t *testing.T) {
	_, addr, admin := startConfigGateway(t, scaledConfig(t, "2s", `
min_replicas = 0
max_replicas = 2
container_concurrency = 10
target_utilization = 0.7
scale_down_delay = "200ms"
scale_to_zero_after = "400ms"
buffer_timeout = "30s"
`))
	s := scalingOf(t, admin)
	require.Equal(t, 0, s.Ready+s.Starting, "nothing runs before the first request")

	const n = 20
	type result struct {
		status int
		took   time.Duration
	}
	results := make([]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			r, err := tryCall("POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
			results[i], errs[i] = result{r.status, time.Since(start)}, err
		}()
	}
	// The burst is queued while the replicas start: the formula asks for 3, clamped to 2.
	s = waitScaling(t, admin, 10*time.Second, "the burst queued", func(s scalingView) bool { return s.Queued == n })
	require.Equal(t, 2, s.Desired)
	require.Equal(t, 2, s.Target)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	var slowest, fastest time.Duration
	for i, r := range results {
		require.Equal(t, 200, r.status, "request %d", i)
		if fastest == 0 || r.took < fastest {
			fastest = r.took
		}
		slowest = max(slowest, r.took)
	}
	t.Logf("20 requests through a cold start of 2 s: fastest %v, slowest %v", fastest.Round(time.Millisecond), slowest.Round(time.Millisecond))

	s = waitScaling(t, admin, 10*time.Second, "back to zero", func(s scalingView) bool { return s.Target == 0 && len(s.Replicas) == 0 })
	require.Equal(t, 0, s.Ready)
	waitMetric(t, admin+"/metrics", `sluice_scaling_replicas{service="llm",state="ready"}`, func(v float64) bool { return v == 0 })
}

// The buffer is FIFO: with one replica taking one request at a time, requests queued one
// after the other go upstream in the order they came. The order is read at a shadow that
// every request is mirrored to when it goes upstream, by one sender in turn.
func TestColdStartBufferDrainsInArrivalOrder(t *testing.T) {
	sh := startShadow(t)
	_, addr, admin := startConfigGateway(t, scaledConfig(t, "500ms", `
max_replicas = 1
container_concurrency = 1
scale_down_delay = "10s"
`)+fmt.Sprintf(`
[services.llm.mirror]
service = "order"
percentage = 100
max_concurrent = 1
[services.order.load_balancer]
servers = [{ url = "http://%s" }]
`, sh.addr()))
	const n = 8
	done := make(chan callOutcome, n)
	var answered atomic.Int64
	for i := 0; i < n; i++ {
		go func() {
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"request %d"}],"max_tokens":1}`, i)
			r, err := tryCall("POST", "http://"+addr+"/v1/chat/completions", "", body)
			answered.Add(1)
			done <- callOutcome{r, err}
		}()
		// The next request is sent once this one is queued (or, for the first, once the
		// replica took it, or even answered it, should the replica be up by then), so that
		// the arrival order is known.
		waitScaling(t, admin, 10*time.Second, fmt.Sprintf("request %d queued", i), func(s scalingView) bool {
			return int64(s.Queued+s.InFlight)+answered.Load() >= int64(i+1)
		})
	}
	for i := 0; i < n; i++ {
		o := <-done
		require.NoError(t, o.err)
		require.Equal(t, 200, o.r.status, o.r.raw)
	}
	got := sh.wait(t, n)
	for i, body := range got {
		require.Contains(t, body, fmt.Sprintf(`"request %d"`, i), "went upstream in arrival order")
	}
}

// A full buffer refuses at once with 503; a client that leaves is taken out of the queue; a
// request that waits past buffer_timeout gets 504; all OpenAI-shaped.
func TestColdStartBufferBounds(t *testing.T) {
	_, addr, admin := startConfigGateway(t, scaledConfig(t, "30s", `
max_replicas = 1
buffer_size = 2
buffer_timeout = "3s"
`))
	body := tinyChat
	// A: a raw client that will leave while queued.
	a, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = fmt.Fprintf(a, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	waitScaling(t, admin, 5*time.Second, "A queued", func(s scalingView) bool { return s.Queued == 1 })
	// B: waits until its deadline.
	bDone := goCall("POST", "http://"+addr+"/v1/chat/completions", "", body)
	waitScaling(t, admin, 5*time.Second, "B queued", func(s scalingView) bool { return s.Queued == 2 })

	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body)
	require.Equal(t, 503, r.status, r.raw)
	require.Equal(t, "cold_start_queue_full", errField(r, "code"))
	require.Equal(t, "1", r.header.Get("Retry-After"))

	require.NoError(t, a.Close())
	waitScaling(t, admin, 5*time.Second, "A left the queue", func(s scalingView) bool { return s.Queued == 1 })

	b := <-bDone
	require.NoError(t, b.err)
	r = b.r
	require.Equal(t, 504, r.status, r.raw)
	require.Equal(t, "cold_start_timeout", errField(r, "code"))
	waitMetric(t, admin+"/metrics", `sluice_scaling_buffer_rejected_total{service="llm",reason="timeout"}`, func(v float64) bool { return v >= 1 })
}

// A streaming caller that waits for a cold start gets the head of its event stream at once and
// SSE comment lines while it waits, then the model's events; one whose wait passes its
// deadline gets an OpenAI-shaped error event instead, never [DONE]. On both engines.
func TestColdStartKeepsWaitingStreamsAlive(t *testing.T) {
	streamBody := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, engine := range engines {
		t.Run(engine+"/served", func(t *testing.T) {
			_, addr, _ := startConfigGateway(t, scaledConfigEngine(t, engine, "1s", `
max_replicas = 1
keepalive_interval = "100ms"
`))
			status, body := streamChatBody(t, addr, streamBody)
			require.Equal(t, 200, status)
			require.True(t, strings.HasPrefix(body, ": keep-alive\n\n"), "keep-alives first: %q", body)
			require.GreaterOrEqual(t, strings.Count(body, ": keep-alive\n\n"), 3, "one every 100 ms of a 1 s start")
			require.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "then the model's stream: %q", body)
			require.Contains(t, body, `"chat.completion.chunk"`)
		})
		t.Run(engine+"/timed out", func(t *testing.T) {
			_, addr, admin := startConfigGateway(t, scaledConfigEngine(t, engine, "30s", `
max_replicas = 1
keepalive_interval = "100ms"
buffer_timeout = "500ms"
`))
			status, body := streamChatBody(t, addr, streamBody)
			require.Equal(t, 200, status)
			require.True(t, strings.HasPrefix(body, ": keep-alive\n\n"), "%q", body)
			require.Contains(t, body, "event: error")
			require.Contains(t, body, `"code":"cold_start_timeout"`)
			require.NotContains(t, body, "[DONE]")
			waitScaling(t, admin, 5*time.Second, "the queue emptied", func(s scalingView) bool { return s.Queued == 0 })
		})
	}
}

// streamChatBody posts body to the gateway's chat endpoint and returns the status and the
// whole response body.
func streamChatBody(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
