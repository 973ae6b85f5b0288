package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
)

// A request that holds the configuration a reload replaced and reaches its scaled service long
// after the reload, past buffer_timeout (here it waited in its model's admission queue), chooses
// among that configuration's backends: they must say which replicas are ready then, not when
// the reload was buffer_timeout old. One replica runs before the reload and holds the stream
// that fills the model's one slot; a second starts after the reload (more than buffer_timeout
// later it is ready); then the first dies, which ends the stream, and the queued request goes
// to the second replica instead of finding the dead one up and the ready one down.
func TestRequestQueuedBeforeAReloadFollowsTheReplicasLongAfterIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := lateScaledConfig(t)
	g, addr, admin := startFileGateway(t, path, base)
	first := waitScaling(t, admin, 10*time.Second, "min_replicas ready", func(s scalingView) bool { return s.Ready == 1 })
	require.Len(t, first.Replicas, 1)

	// A stream of model m holds its one slot, on the first replica.
	sendStalledModelChat(t, addr, "m")
	waitScaling(t, admin, 10*time.Second, "the stream in flight", func(s scalingView) bool { return s.InFlight == 1 })

	// The next request of model m waits for the slot, under the configuration in force now.
	late := make(chan lateResult, 1)
	go func() { late <- postChat(addr, tinyChat) }()
	waitMetric(t, admin+"/metrics", `sluice_model_queued_requests{model="m"}`, func(v float64) bool { return v == 1 })

	// A reload that keeps the scaling keys, then a second replica, started after it for a
	// stream of another model: ready a second later, past buffer_timeout after the reload.
	require.NoError(t, os.WriteFile(path, []byte(base+"\n# touched\n"), 0o644))
	require.NoError(t, g.Reload())
	sendStalledModelChat(t, addr, "other")
	waitScaling(t, admin, 10*time.Second, "the second replica ready", func(s scalingView) bool { return s.Ready == 2 })

	// The first replica dies: the stream that held the slot ends, and the queued request goes
	// on to the service.
	require.NoError(t, syscall.Kill(first.Replicas[0].PID, syscall.SIGKILL))
	r := <-late
	require.NoError(t, r.err)
	require.Equal(t, 200, r.status, "the request queued before the reload: %s", r.body)
}

type lateResult struct {
	status int
	body   string
	err    error
}

// postChat posts body to the gateway's chat endpoint; it runs on a goroutine of its own, so it
// reports errors instead of failing.
func postChat(addr, body string) lateResult {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return lateResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return lateResult{status: resp.StatusCode, body: string(b), err: err}
}

// sendStalledModelChat sends a streaming chat request of model that the replica stalls after
// its head until the client leaves, and leaves its connection open until the end of the test.
func sendStalledModelChat(t *testing.T, addr, model string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n%s: stall-after=0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		llmsim.FaultHeader, len(body), body)
	require.NoError(t, err)
}

// lateScaledConfig is a model router whose alias m takes one request at a time and queues one
// more, and whose alias other takes any number, both served by service llm: llmsim replicas, one
// at least and two at most, each taking a second to start.
func lateScaledConfig(t *testing.T) string {
	llmsimBin := testenv.BuildBinary(t, "./cmd/llmsim")
	// Two requests in flight ask for ⌈2 / (3 × 0.5)⌉ = 2 replicas; one replica takes 3.
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.llm.load_balancer]
strategy = "least-connections"
[services.llm.scaling]
executor = "exec"
min_replicas = 1
max_replicas = 2
container_concurrency = 3
target_utilization = 0.5
buffer_timeout = "300ms"
scale_down_delay = "1m"
[services.llm.scaling.exec]
command = [%q, "--listen", "127.0.0.1:{port}", "--startup-delay", "1s", "--ttft", "20ms", "--itl", "2ms", "--tokens", "4"]
stop_timeout = "2s"
[models.m.targets.a]
service = "llm"
[models.m.scheduling]
max_concurrent_requests = 1
max_queued_requests = 1
[models.other.targets.a]
service = "llm"
`, llmsimBin)
}

// A request that holds the configuration a reload replaced and reaches its scaled service once
// a later reload changed the keys that define its replicas (the exec command) finds the old scaler stopped, its replicas with it:
// it is answered 503 no_backend, as the requests the old buffer held are, and is not sent to
// the port of a replica that is gone.
func TestRequestQueuedBeforeTwoReloadsFindsTheOldReplicasDown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := lateScaledConfig(t)
	g, addr, admin := startFileGateway(t, path, base)
	waitScaling(t, admin, 10*time.Second, "min_replicas ready", func(s scalingView) bool { return s.Ready == 1 })
	sendStalledModelChat(t, addr, "m")
	waitScaling(t, admin, 10*time.Second, "the stream in flight", func(s scalingView) bool { return s.InFlight == 1 })

	// The queued request holds a configuration of its own, which no request in flight uses.
	require.NoError(t, os.WriteFile(path, []byte(base+"\n# touched\n"), 0o644))
	require.NoError(t, g.Reload())
	late := make(chan lateResult, 1)
	go func() { late <- postChat(addr, tinyChat) }()
	waitMetric(t, admin+"/metrics", `sluice_model_queued_requests{model="m"}`, func(v float64) bool { return v == 1 })

	// A reload that keeps the scaling keys, then one that changes the replicas' command: the old
	// replica stops, which ends the stream, and the queued request goes on to the old scaler.
	require.NoError(t, os.WriteFile(path, []byte(base+"\n# touched twice\n"), 0o644))
	require.NoError(t, g.Reload())
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(base, `"--tokens", "4"`, `"--tokens", "5"`, 1)), 0o644))
	require.NoError(t, g.Reload())
	r := <-late
	require.NoError(t, r.err)
	require.Equal(t, 503, r.status, "the request queued before the reloads: %s", r.body)
	require.Contains(t, r.body, `"code":"no_backend"`)
}

// A full buffer refuses a streaming caller with 503 before any byte, also when many arrive at
// once: the place in the queue of a caller told to wait is its own from the moment it is told,
// not only once its event stream has begun, so that no more callers get the head of an event
// stream than the buffer holds, and none an event stream that only says the queue was full.
func TestFullBufferRefusesConcurrentStreamingCallersBeforeAnyByte(t *testing.T) {
	_, addr, _ := startConfigGateway(t, scaledConfig(t, "30s", `
max_replicas = 1
buffer_size = 2
keepalive_interval = "100ms"
`))
	const n = 16
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	start := make(chan struct{})
	heads := make(chan lateResult, n)
	for range n {
		go func() {
			<-start
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				heads <- lateResult{err: err}
				return
			}
			r := lateResult{status: resp.StatusCode}
			if resp.StatusCode != 200 {
				b, err := io.ReadAll(resp.Body)
				r.body, r.err = string(b), err
				_ = resp.Body.Close()
			} else {
				// A held caller stays until every caller has its answer: one that left would
				// free its place for another.
				t.Cleanup(func() { _ = resp.Body.Close() })
			}
			heads <- r
		}()
	}
	close(start)
	held := 0
	for range n {
		r := <-heads
		require.NoError(t, r.err)
		if r.status == 200 {
			held++
			continue
		}
		require.Equal(t, 503, r.status, r.body)
		require.Contains(t, r.body, `"code":"cold_start_queue_full"`)
	}
	require.LessOrEqual(t, held, 2, "callers given an event stream to wait on, with a buffer of 2")
}
