package pd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	"github.com/sluice-gw/sluice/pd"
)

// conversation is a chat body with a long system prompt and the given turns (user,
// assistant, user, ...).
func conversation(topic string, turns ...string) string {
	msgs := []map[string]string{{"role": "system", "content": strings.Repeat("You answer about "+topic+". ", 120)}}
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": c})
	}
	b, _ := json.Marshal(map[string]any{"model": "chat", "stream": true, "stream_options": map[string]bool{"include_usage": true}, "messages": msgs})
	return string(b)
}

// conversationRanking returns the worker the conversation's rendezvous weight prefers.
func conversationRanking(t *testing.T, body string, ids ...string) string {
	t.Helper()
	var p affinity.Print
	require.NoError(t, affinity.Fingerprint(openai.ChatCompletions, []byte(body), openai.Span{}, openai.Span{}, &p))
	best, bw := "", uint64(0)
	for _, id := range ids {
		if w := affinity.RendezvousWeight(p.Conversation, affinity.Target(xxhash.Sum64String(id))); best == "" || w > bw {
			best, bw = id, w
		}
	}
	return best
}

// With prompt_cache_affinity, a conversation's next turn goes to the prefill worker that
// computed its previous turn (and finds it cached), though rendezvous ranking alone would
// send it to the other one.
func TestPromptCacheAffinityKeepsAConversationOnItsPrefillWorker(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillB {
			// One sequence at a time, slowly: a request there makes it full for a while.
			ic.MaxRunning, ic.FaultRate, ic.Fault = 1, 1, "slow=3s"
		}
	})
	g := startGateway(t, f.gatewayTOML("prompt_cache_affinity = true", ""))

	// A conversation that rendezvous ranking sends to prefill-b, by its conversation key
	// (affinity without a hint) and by its second turn's request key (without affinity).
	var topic string
	for n := 0; ; n++ {
		topic = fmt.Sprintf("topic %d", n)
		second := pd.RequestKey([]byte(conversation(topic, "first question", "an answer", "second question")))
		if conversationRanking(t, conversation(topic, "first question"), "prefill-a", "prefill-b") == "prefill-b" &&
			pd.Rank(second, "prefill-b") > pd.Rank(second, "prefill-a") {
			break
		}
	}
	// Keep prefill-b full while the first turn comes: it goes to prefill-a.
	busy := make(chan error, 1)
	held := chatBody(promptRankedFirst(t, "prefill-b", "prefill-a"))
	go func() {
		_, _, err := streamErr(g.Addr("web"), held)
		busy <- err
	}()
	f.waitCall(t, prefillB, "prefill", "")
	waitObservedActive(t, g.AdminAddr(), 1, "prefill-b")
	status, data := stream(t, g, conversation(topic, "first question"))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 1, "the first turn went to prefill-a")
	require.NoError(t, <-busy, "the request that kept prefill-b full")
	waitIdleObserved(t, f, g.AdminAddr())

	// The second turn extends the first: the hint beats rendezvous ranking.
	status, data = stream(t, g, conversation(topic, "first question", "an answer", "second question"))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 2, "the second turn went to prefill-a too")
	require.Len(t, f.executions(prefillB, "prefill"), 1)
	var usage struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(data[len(data)-2]), &usage))
	require.Positive(t, usage.Usage.Details.Cached, "the prefill found the first turn cached")
}

// waitObservedActive waits until the gateway's observations show at least n of the workers
// ids running a sequence (so that its choices see them full).
func waitObservedActive(t *testing.T, admin string, n int, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/api/gateway/workers")
		require.NoError(t, err)
		var rows []struct {
			Observation *struct {
				WorkerID string `json:"worker_id"`
				Active   int64  `json:"active"`
			} `json:"observation"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rows)
		resp.Body.Close()
		require.NoError(t, err)
		busy := 0
		for _, r := range rows {
			if r.Observation != nil && r.Observation.Active > 0 && slices.Contains(ids, r.Observation.WorkerID) {
				busy++
			}
		}
		if busy >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %v not observed busy within 10s", n, ids)
		time.Sleep(5 * time.Millisecond) // polling for the condition, not asserting on time
	}
}

// The prefill worker is chosen on the fingerprint of the conversation as the client sent it,
// also when the router rewrote "model" to a longer upstream model: there the offsets of the
// client's body fall elsewhere, here on a member before "messages" whose end they would place
// inside the last message, leaving the conversation out of the fingerprint.
func TestPromptCacheAffinityFingerprintsTheBodyAsSent(t *testing.T) {
	f := startFleet(t, nil)
	const tools = `[{"type":"function","function":{"name":"f"}}]`
	// The upstream model is longer than the alias by what separates the tools' value from
	// the messages' (46+12 bytes), and the last message ends in the 58 bytes
	// `,"content":"<43 bytes>"}]`.
	shift := len(tools) + len(`,"messages":`)
	upstream := "chat" + strings.Repeat("x", shift)
	last := strings.Repeat("q", shift-len(`,"content":""}]`))
	toml := strings.Replace(f.gatewayTOML("prompt_cache_affinity = true", ""), `service = "fleet"`,
		`service = "fleet"`+"\nupstream_model = \""+upstream+"\"", 1)
	g := startGateway(t, toml)

	body := func(topic string) string {
		sys, _ := json.Marshal(strings.Repeat("You answer about "+topic+". ", 120))
		return `{"model":"chat","tools":` + tools + `,"messages":[{"role":"system","content":` + string(sys) +
			`},{"role":"user","content":"` + last + `"}],"stream":true}`
	}
	// A conversation whose rendezvous choice (affinity without a hint) and whose request
	// key's rank (no affinity) name different prefill workers.
	var b string
	for n := 0; ; n++ {
		b = body(fmt.Sprintf("topic %d", n))
		key := pd.RequestKey([]byte(strings.Replace(b, `"chat"`, `"`+upstream+`"`, 1)))
		byRank := "prefill-a"
		if pd.Rank(key, "prefill-b") > pd.Rank(key, "prefill-a") {
			byRank = "prefill-b"
		}
		if conversationRanking(t, b, "prefill-a", "prefill-b") != byRank {
			break
		}
	}
	want := conversationRanking(t, b, "prefill-a", "prefill-b")
	status, data := stream(t, g, b)
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(indexOf(f.ids, want), "prefill"), 1, "the conversation's rendezvous choice computed it")
}

// promptUsage returns the prompt tokens and the cached prompt tokens of a streamed answer's
// usage (its last chunk before [DONE]).
func promptUsage(t *testing.T, data []string) (prompt, cached int) {
	t.Helper()
	require.GreaterOrEqual(t, len(data), 2, data)
	var u struct {
		Usage struct {
			Prompt  int `json:"prompt_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(data[len(data)-2]), &u), data[len(data)-2])
	return u.Usage.Prompt, u.Usage.Details.Cached
}

// holdFirstPair makes the first request that gets a worker pair from now on wait, counted on
// both workers, until the returned release is called; held is closed once it waits.
func holdFirstPair(t *testing.T) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	pd.SetPairHook(func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(h)
			<-r
		}
	})
	release = func() { releaseOnce.Do(func() { close(r) }) }
	t.Cleanup(func() {
		release()
		pd.SetPairHook(nil)
	})
	return h, release
}

// longTurn is a conversation message of a few hundred bytes (a few 16-token cache blocks).
func longTurn(what string) string { return strings.Repeat(what+" ", 40) }

// Behind two gateway replicas that share nothing, a conversation's turns alternate between
// them: the prefill worker of a turn is the one that computed the turn before it, whichever
// replica sent it there. A replica whose own hint ends before the previous turn (the other
// replica served it) does not follow that hint to the worker of older turns, but ranks the
// workers by the conversation's rendezvous hashing, as the other replica did; the prefill
// then finds the previous turn cached.
func TestPromptCacheAffinityFollowsTheTurnAnotherReplicaServed(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillB {
			ic.MaxRunning = 1 // one request held there makes it full
		}
	})
	toml := f.gatewayTOML("prompt_cache_affinity = true", "")
	g1, g2 := startGateway(t, toml), startGateway(t, toml)
	u1, a1, u2, a2, u3 := longTurn("first question"), longTurn("an answer"), longTurn("second question"), longTurn("another answer"), longTurn("third question")

	// A conversation whose rendezvous choice is prefill-b.
	var topic string
	for n := 0; ; n++ {
		topic = fmt.Sprintf("topic %d", n)
		if conversationRanking(t, conversation(topic, u1), "prefill-a", "prefill-b") == "prefill-b" {
			break
		}
	}
	// The first turn comes to g1 while g1 holds a request on prefill-b: it goes to prefill-a.
	held, release := holdFirstPair(t)
	busyMsg := promptRankedFirst(t, "prefill-b", "prefill-a")
	busy := make(chan error, 1)
	go func() {
		_, _, err := streamErr(g1.Addr("web"), chatBody(busyMsg))
		busy <- err
	}()
	<-held
	status, data := stream(t, g1, conversation(topic, u1))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 1, "the first turn went to prefill-a")
	firstPrompt, _ := promptUsage(t, data)
	release()
	require.NoError(t, <-busy)
	require.Len(t, f.executions(prefillB, "prefill"), 1, "the held request went to prefill-b")
	waitIdleObserved(t, f, g1.AdminAddr(), g2.AdminAddr())

	// The second turn comes to g2, which has no hint: rendezvous hashing sends it to
	// prefill-b.
	status, data = stream(t, g2, conversation(topic, u1, a1, u2))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillB, "prefill"), 2, "the second turn went to prefill-b")
	waitIdleObserved(t, f, g1.AdminAddr(), g2.AdminAddr())

	// The third comes to g1 again. Its hint (prefill-a, the first turn) ends before the
	// second turn: prefill-b, which computed the second turn, gets the third.
	status, data = stream(t, g1, conversation(topic, u1, a1, u2, a2, u3))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillB, "prefill"), 3, "the third turn went to prefill-b, which computed the second")
	require.Len(t, f.executions(prefillA, "prefill"), 1)
	_, cached := promptUsage(t, data)
	require.Greater(t, cached, firstPrompt, "the prefill found more than the first turn cached")
}

// waitEligibleInEpoch waits until the gateway's admin API shows worker id observed in epoch
// and eligible for the model's target.
func waitEligibleInEpoch(t *testing.T, admin, id string, epoch int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get("http://" + admin + "/api/gateway/workers")
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
				assert.NotEmpty(c, r.Targets)
				for _, tg := range r.Targets {
					assert.True(c, tg.Eligible, "%s eligible", id)
				}
			}
		}
		assert.True(c, found, "%s observed", id)
	}, 10*time.Second, 5*time.Millisecond)
}

// A prefill worker that restarted (its observation's epoch changed) lost its KV cache: its
// hints are dropped, and a conversation it held is placed as a new one would be, here on the
// worker that holds the conversation's system prompt, rather than sent to the empty cache.
func TestPromptCacheAffinityForgetsARestartedWorker(t *testing.T) {
	forgetsARestartedWorker(t, false)
}

// A prefill worker's restart that a reload falls after is seen too: the hints the reload kept
// are dropped with the restart epochs they were learned in, which the reload keeps with them.
func TestPromptCacheAffinityForgetsAWorkerRestartedBeforeAReload(t *testing.T) {
	forgetsARestartedWorker(t, true)
}

// forgetsARestartedWorker opens a conversation on prefill-a, restarts prefill-a (then
// reloads the configuration when reload is set) and checks that the next turn goes to
// prefill-b.
func forgetsARestartedWorker(t *testing.T, reload bool) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillB {
			ic.MaxRunning = 1 // one request held there makes it full
		}
	})
	g, reloadConfig := startReloadableGateway(t, f.gatewayTOML("prompt_cache_affinity = true", ""))

	// Two conversations under one system prompt whose rendezvous choice is prefill-b.
	var topic, other string
	for n := 0; topic == ""; n++ {
		if tp := fmt.Sprintf("topic %d", n); conversationRanking(t, conversation(tp, "first question"), "prefill-a", "prefill-b") == "prefill-b" {
			topic = tp
		}
	}
	for n := 0; other == ""; n++ {
		if q := fmt.Sprintf("other question %d", n); conversationRanking(t, conversation(topic, q), "prefill-a", "prefill-b") == "prefill-b" {
			other = q
		}
	}
	// The other conversation is held on prefill-b (which caches the system prompt once it
	// is released) while the first opens: that goes to prefill-a.
	held, release := holdFirstPair(t)
	busy := make(chan error, 1)
	go func() {
		_, _, err := streamErr(g.Addr("web"), conversation(topic, other))
		busy <- err
	}()
	<-held
	status, data := stream(t, g, conversation(topic, "first question"))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 1, "the first turn went to prefill-a")
	release()
	require.NoError(t, <-busy)
	require.Len(t, f.executions(prefillB, "prefill"), 1, "the other conversation went to prefill-b")

	// prefill-a restarts: its cache is empty.
	require.NoError(t, f.sim.Crash(prefillA, 10*time.Millisecond))
	waitEligibleInEpoch(t, g.AdminAddr(), "prefill-a", 1)
	if reload {
		reloadConfig()
	}
	waitIdleObserved(t, f, g.AdminAddr())

	// The second turn goes by rendezvous hashing to prefill-b, which has the system prompt
	// cached, not to prefill-a, which has nothing.
	status, data = stream(t, g, conversation(topic, "first question", "an answer", "second question"))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 1, "the second turn did not go to the restarted prefill-a")
	require.Len(t, f.executions(prefillB, "prefill"), 2, "the second turn went to prefill-b")
	_, cached := promptUsage(t, data)
	require.Positive(t, cached, "the prefill found the system prompt cached")
}

// startReloadableGateway runs a gateway on toml read from a file; reload rewrites the file
// with a longer execution timeout for model chat, which builds its targets anew, and reloads.
func startReloadableGateway(t *testing.T, toml string) (g *gateway.Gateway, reload func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pd.toml")
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	t.Setenv(workerKeyEnv, workerKey)
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err = gateway.New(cfg, path, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	waitObserved(t, g)
	return g, func() {
		t.Helper()
		const table = "[models.chat.scheduling.distributed_serving]\n"
		require.Contains(t, toml, table)
		toml = strings.Replace(toml, table, table+"execution_timeout_ms = 20000\n", 1)
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		require.NoError(t, g.Reload())
		waitObserved(t, g)
	}
}

// A reload keeps the hints: a conversation's next turn after a reload goes back to the
// prefill worker that computed its first turn, as it would without the reload.
func TestPromptCacheAffinityKeepsItsHintsAcrossAReload(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillB {
			ic.MaxRunning, ic.FaultRate, ic.Fault = 1, 1, "slow=3s"
		}
	})
	g, reload := startReloadableGateway(t, f.gatewayTOML("prompt_cache_affinity = true", ""))

	var topic string
	for n := 0; ; n++ {
		topic = fmt.Sprintf("topic %d", n)
		if conversationRanking(t, conversation(topic, "first question"), "prefill-a", "prefill-b") == "prefill-b" {
			break
		}
	}
	// Keep prefill-b full while the first turn comes: it goes to prefill-a.
	busy := make(chan error, 1)
	held := chatBody(promptRankedFirst(t, "prefill-b", "prefill-a"))
	go func() {
		_, _, err := streamErr(g.Addr("web"), held)
		busy <- err
	}()
	f.waitCall(t, prefillB, "prefill", "")
	waitObservedActive(t, g.AdminAddr(), 1, "prefill-b")
	status, data := stream(t, g, conversation(topic, "first question"))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 1, "the first turn went to prefill-a")
	require.NoError(t, <-busy, "the request that kept prefill-b full")
	waitIdleObserved(t, f, g.AdminAddr())

	reload()

	status, data = stream(t, g, conversation(topic, "first question", "an answer", "second question"))
	require.Equal(t, 200, status, data)
	require.Len(t, f.executions(prefillA, "prefill"), 2, "the second turn went back to prefill-a after the reload")
}
