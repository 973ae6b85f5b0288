package gateway_test

import (
	"bufio"
	"context"
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

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/openai"
)

// waitWorkerState waits until the gateway's admin API shows worker id observed in epoch and,
// for the model's target, eligible or not as eligible says.
func waitWorkerState(t *testing.T, admin, id string, epoch int64, eligible bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(admin + "/api/gateway/workers")
		if !assert.NoError(c, err) {
			return
		}
		defer resp.Body.Close()
		var rows []struct {
			Observation *struct {
				WorkerID string `json:"worker_id"`
				Epoch    int64  `json:"epoch"`
			} `json:"observation"`
			Targets []struct {
				Eligible bool `json:"eligible"`
			} `json:"targets"`
		}
		if !assert.NoError(c, json.NewDecoder(resp.Body).Decode(&rows)) {
			return
		}
		found := false
		for _, r := range rows {
			if r.Observation != nil && r.Observation.WorkerID == id {
				found = true
				assert.Equal(c, epoch, r.Observation.Epoch)
				if assert.Len(c, r.Targets, 1) {
					assert.Equal(c, eligible, r.Targets[0].Eligible, "%s eligible", id)
				}
			}
		}
		assert.True(c, found, "%s observed", id)
	}, 10*time.Second, 5*time.Millisecond)
}

// A server that restarted (its observation reports another epoch) lost its KV cache: prefix
// affinity drops its hints once the gateway sees the new epoch, and a conversation it held is
// placed as a new one would be, here on the server that holds the conversation's system
// prompt, instead of being sent back to the empty cache.
func TestPrefixAffinityForgetsARestartedWorker(t *testing.T) {
	prefixForgetsARestartedWorker(t, false)
}

// A server's restart that a reload falls after is seen too: the hints the reload kept are
// dropped with the restart epochs they were learned in, which the reload keeps with them.
func TestPrefixAffinityForgetsAWorkerRestartedBeforeAReload(t *testing.T) {
	prefixForgetsARestartedWorker(t, true)
}

// prefixForgetsARestartedWorker opens a conversation on w-a, restarts w-a (then reloads the
// configuration when reload is set) and checks that the next turn goes to w-b.
func prefixForgetsARestartedWorker(t *testing.T, reload bool) {
	cfg := llmsim.Config{Seed: 1}
	for _, id := range []string{"w-a", "w-b"} {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.WorkerID, ic.MaxRunning = "127.0.0.1:0", id, 1
		ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(2*time.Millisecond), llmsim.Duration(time.Millisecond), 4
		cfg.Instance = append(cfg.Instance, ic)
	}
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	const a, b = 0, 1
	urls := []string{"http://" + f.Addrs()[a], "http://" + f.Addrs()[b]}
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
observation_ttl = "2s"
[models.sticky.targets.t]
service = "fleet"
[models.sticky.scheduling]
prefix_affinity = true
`, urls[a], urls[b])
	path := filepath.Join(t.TempDir(), "restart.toml")
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	gcfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(gcfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	base, admin := "http://"+g.Addr("web"), "http://"+g.AdminAddr()

	// A conversation whose rendezvous choice is w-b (servers are named by their URL's hash).
	var c *conversation
	for n := 0; c == nil; n++ {
		cand := newConversation("sticky", fmt.Sprintf("R%d", n))
		var p affinity.Print
		require.NoError(t, affinity.Fingerprint(openai.ChatCompletions, []byte(cand.turn(1)), openai.Span{}, openai.Span{}, &p))
		wa := affinity.RendezvousWeight(p.Conversation, affinity.Target(xxhash.Sum64String(urls[a])))
		wb := affinity.RendezvousWeight(p.Conversation, affinity.Target(xxhash.Sum64String(urls[b])))
		if wb > wa {
			c = newConversation("sticky", fmt.Sprintf("R%d", n))
		}
	}
	send := func(body string) (instance, cache string) {
		t.Helper()
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		require.Equal(t, 200, resp.StatusCode, string(raw))
		return resp.Header.Get(llmsim.InstanceHeader), resp.Header.Get(llmsim.CacheHeader)
	}

	// w-b runs its one sequence, another conversation under the same system prompt sent to
	// it directly (it caches the system prompt), while the conversation opens: on w-a.
	waitWorkerState(t, admin, "w-b", 0, true)
	hold, err := net.DialTimeout("tcp", f.Addrs()[b], 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Close() })
	other := strings.Replace(newConversation("sticky", "other").turn(1), `"max_tokens":4`, `"max_tokens":100,"stream":true`, 1)
	fmt.Fprintf(hold, "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n%s: stall-after=1\r\nContent-Length: %d\r\n\r\n%s", llmsim.FaultHeader, len(other), other)
	_ = hold.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(hold).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "200")
	waitWorkerState(t, admin, "w-b", 0, false)
	instance, _ := send(c.turn(1))
	require.Equal(t, "w-a", instance, "the conversation opened on w-a")
	require.NoError(t, hold.Close())
	waitWorkerState(t, admin, "w-b", 0, true)

	// w-a restarts: its cache is empty.
	require.NoError(t, f.Crash(a, 10*time.Millisecond))
	waitWorkerState(t, admin, "w-a", 1, true)
	if reload {
		// A reload that changes the alias builds the model table anew.
		toml += "prefix_affinity_headers = true\n"
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		require.NoError(t, g.Reload())
		waitWorkerState(t, admin, "w-a", 1, true)
	}

	// The next turn goes where rendezvous hashing places the conversation, w-b, which holds
	// its system prompt, not to the empty w-a.
	instance, cache := send(c.turn(2))
	require.Equal(t, "w-b", instance, "the next turn did not go back to the restarted w-a")
	require.NotEqual(t, "miss", cache, "w-b had the system prompt cached")
}
