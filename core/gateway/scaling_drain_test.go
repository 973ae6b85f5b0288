package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// A scale-down after a reload counts the requests sent before it. Two replicas run: the first
// holds two stalled streams, the second a slow stream (about 5 s), all sent before a reload
// that keeps the scaling keys. Then the load falls to what one replica takes, and the stream
// on the second replica ends with [DONE]: the scale-down stops the idle first replica (both
// stalled streams left), or, when the first still holds one, waits for the stream before it
// stops the second.
func TestScaleDownAfterAReloadWaitsForTheStreamsSentBeforeIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		leave int  // stalled streams whose clients leave after the reload
		stays bool // the replica that keeps running is the second, the slow stream's
	}{
		{"the idle replica stops", 2, true},
		{"the busy replica drains", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sluice.toml")
			base := scaledConfig(t, "0s", `
min_replicas = 1
max_replicas = 2
container_concurrency = 2
target_utilization = 1.0
scale_down_delay = "500ms"
buffer_timeout = "30s"
`)
			g, addr, admin := startFileGateway(t, path, base)
			first := waitScaling(t, admin, 10*time.Second, "min_replicas running", func(s scalingView) bool { return s.Ready == 1 }).Replicas[0].URL
			// The first replica takes both stalled streams (the service's capacity is 2).
			stalled := []net.Conn{sendStalledChat(t, addr), sendStalledChat(t, addr)}
			waitScaling(t, admin, 10*time.Second, "the stalled streams in flight", func(s scalingView) bool { return s.InFlight == 2 })
			// The slow stream waits for a second replica and goes to it, the least busy.
			done := make(chan streamResult, 1)
			go func() { done <- slowStream(addr, "slow=1s") }()
			waitScaling(t, admin, 10*time.Second, "the second replica serving", func(s scalingView) bool { return s.Ready == 2 && s.InFlight == 3 })
			waitActive(t, admin, 3)

			require.NoError(t, os.WriteFile(path, []byte(base+"\n# touched\n"), 0o644))
			require.NoError(t, g.Reload())
			for _, conn := range stalled[:c.leave] {
				require.NoError(t, conn.Close())
			}
			waitScaling(t, admin, 10*time.Second, "the scale-down", func(s scalingView) bool { return s.Target == 1 })
			select {
			case r := <-done:
				require.NotContains(t, r.body, "[DONE]", "the stream finished before the scale-down: the test proves nothing")
				done <- r
			default:
			}
			r := <-done
			require.NoError(t, r.err)
			require.Equal(t, 200, r.status)
			require.True(t, strings.HasSuffix(r.body, "data: [DONE]\n\n"), "the stream finished: %q", r.body)
			left := waitScaling(t, admin, 10*time.Second, "one replica left", func(s scalingView) bool { return s.Ready == 1 && len(s.Replicas) == 1 })
			if c.stays {
				require.NotEqual(t, first, left.Replicas[0].URL, "the replica of the slow stream keeps running")
			} else {
				require.Equal(t, first, left.Replicas[0].URL, "the replica of the slow stream stopped once it ended")
			}
		})
	}
}

// sendStalledChat sends a streaming chat request that the replica stalls after its head until
// the client leaves, and returns the connection without reading it (closed at the end of the
// test).
func sendStalledChat(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n%s: stall-after=0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		llmsim.FaultHeader, len(body), body)
	require.NoError(t, err)
	return c
}

type streamResult struct {
	status int
	body   string
	err    error
}

// slowStream sends a streaming chat request with the simulator fault fault and reads the
// whole response; it runs on a goroutine of its own, so it reports errors instead of failing.
func slowStream(addr, fault string) streamResult {
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return streamResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(llmsim.FaultHeader, fault)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return streamResult{status: resp.StatusCode, body: string(b), err: err}
}

// waitActive polls the admin API until the backends in force count n requests in flight.
func waitActive(t *testing.T, admin string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, body := adminGet(t, admin+"/api/gateway/backends")
		require.Equal(t, 200, st, body)
		var backends []struct {
			Active int64 `json:"active_requests"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &backends))
		var sum int64
		for _, b := range backends {
			sum += b.Active
		}
		if sum == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight on the backends, want %d: %s", sum, n, body)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not an assertion
	}
}
