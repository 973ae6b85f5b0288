package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/openai"
)

// A server that a hint chose and that reported a full cache miss (it evicted the
// conversation) has just computed the prompt, and holds it now: the next turn goes back to it
// by a hint, matched and served from its cache, and is not sent where rendezvous hashing
// places the conversation, a server that holds none of it.
func TestPrefixAffinityFullMissKeepsTheConversationOnItsServer(t *testing.T) {
	cfg := llmsim.Config{Seed: 1}
	for _, c := range []struct {
		id         string
		maxRunning int
	}{{"w-a", 4}, {"w-b", 1}} {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.WorkerID, ic.MaxRunning = "127.0.0.1:0", c.id, c.maxRunning
		ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(2*time.Millisecond), llmsim.Duration(time.Millisecond), 4
		ic.PerUncachedToken = llmsim.Duration(time.Microsecond)
		// 256 blocks of 16 tokens: 16 KiB of prompt, a few turns of the conversation, which
		// one larger prompt evicts.
		ic.Blocks = 256
		cfg.Instance = append(cfg.Instance, ic)
	}
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	const a, b = 0, 1
	urls := []string{"http://" + f.Addrs()[a], "http://" + f.Addrs()[b]}
	logPath := filepath.Join(t.TempDir(), "access.log")
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[log]
access_log = %q
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
prefix_affinity_headers = true
`, logPath, urls[a], urls[b])
	gcfg, err := config.LoadBytes("miss.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(gcfg, "", nil)
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
		cand := newConversation("sticky", fmt.Sprintf("M%d", n))
		var p affinity.Print
		require.NoError(t, affinity.Fingerprint(openai.ChatCompletions, []byte(cand.turn(1)), openai.Span{}, openai.Span{}, &p))
		wa := affinity.RendezvousWeight(p.Conversation, affinity.Target(xxhash.Sum64String(urls[a])))
		wb := affinity.RendezvousWeight(p.Conversation, affinity.Target(xxhash.Sum64String(urls[b])))
		if wb > wa {
			c = newConversation("sticky", fmt.Sprintf("M%d", n))
		}
	}
	var ids []string
	turn := func(n int) prefixAnswer {
		t.Helper()
		// Each turn is chosen while both servers are eligible: an observation taken while
		// the previous request ran would leave w-b out for its one sequence.
		waitWorkerState(t, admin, "w-a", 0, true)
		waitWorkerState(t, admin, "w-b", 0, true)
		r := prefixCall(t, base, "", c.turn(n))
		ids = append(ids, r.id)
		return r
	}
	// lines names the turns' access log lines, for the failure messages.
	lines := func() string {
		var out []string
		for n, l := range accessLines(t, logPath, len(ids)) {
			out = append(out, fmt.Sprintf("turn %d: instance %v outcome %v matched %v invalidated %v", n+1,
				l["backend"], l["prefix_outcome"], l["prefix_matched_bytes"], l["prefix_invalidated"]))
		}
		return strings.Join(out, "\n")
	}

	// w-b runs its one sequence (a request sent to it directly) while the conversation
	// opens: on w-a.
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
	a1 := prefixCall(t, base, "", c.turn(1))
	ids = append(ids, a1.id)
	require.Equal(t, "w-a", a1.instance, "the conversation opened on w-a")
	require.NoError(t, hold.Close())

	a2 := turn(2)
	require.Equal(t, "w-a", a2.instance, "turn 2 follows its hint\n%s", lines())
	require.Positive(t, a2.matched)
	require.NotEqual(t, "miss", a2.cache)

	// A larger prompt sent to w-a directly evicts the conversation from its cache.
	evict := fmt.Sprintf(`{"model":"sticky","max_tokens":4,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("evict ", 6000))
	resp, err := http.Post(urls[a]+"/v1/chat/completions", "application/json", strings.NewReader(evict))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	a3 := turn(3)
	require.Equal(t, "w-a", a3.instance, "turn 3 follows its hint\n%s", lines())
	require.Positive(t, a3.matched)
	require.Equal(t, "miss", a3.cache, "w-a evicted the conversation")

	a4 := turn(4)
	require.Equal(t, "w-a", a4.instance, "turn 4 goes back to the server that computed turn 3\n%s", lines())
	require.Positive(t, a4.matched, "turn 4 is routed by turn 3's hint\n%s", lines())
	require.NotEqual(t, "miss", a4.cache, "w-a holds turn 3")

	l := logLines(t, logPath, 4)
	require.Equal(t, true, l[a3.id]["prefix_invalidated"], lines())
	require.Equal(t, "hit", l[a4.id]["prefix_outcome"], lines())
	require.Equal(t, false, l[a4.id]["prefix_invalidated"], lines())
}
