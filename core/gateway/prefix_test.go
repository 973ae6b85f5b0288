package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// prefixFleet starts n llmsim instances with fast timing and a KV cache.
func prefixFleet(t *testing.T, n int) *llmsim.Fleet {
	t.Helper()
	cfg := llmsim.DefaultConfig()
	cfg.Instances = n
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(2 * time.Millisecond)
	cfg.Defaults.PerUncachedToken = llmsim.Duration(time.Microsecond)
	cfg.Defaults.ITL = llmsim.Duration(time.Millisecond)
	cfg.Defaults.Tokens = 4
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// startPrefixGateway runs a model router over the fleet, balanced round-robin: "sticky" has
// prefix affinity with its response fields, "other" has it too (another alias, so another
// domain), "plain" has none. Consumers: prod-1 and prod-1b (environment prod, generation 1),
// prod-2 (prod, generation 2), staging-1 (staging, generation 1). It returns the entrypoint's
// and the admin API's base URLs and the access log's path.
func startPrefixGateway(t *testing.T, engine string, f *llmsim.Fleet) (string, string, string) {
	t.Helper()
	return startPrefixGatewayAt(t, engine, f.Addrs(), "")
}

// startPrefixGatewayAt is startPrefixGateway over the servers at addrs, with the TOML extra
// added to its configuration.
func startPrefixGatewayAt(t *testing.T, engine string, addrs []string, extra string) (string, string, string) {
	t.Helper()
	var servers []string
	for _, a := range addrs {
		servers = append(servers, fmt.Sprintf("{ url = %q }", "http://"+a))
	}
	logPath := filepath.Join(t.TempDir(), "access.log")
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[log]
access_log = %q
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
middlewares = ["keys"]
[middlewares.keys]
type = "api-key"
[services.fleet.load_balancer]
strategy = "round-robin"
servers = [%s]
[models.sticky.targets.t]
service = "fleet"
[models.sticky.scheduling]
prefix_affinity = true
prefix_affinity_headers = true
prefix_prefill_us_per_token = 50
[models.other.targets.t]
service = "fleet"
[models.other.scheduling]
prefix_affinity = true
prefix_affinity_headers = true
[models.plain.targets.t]
service = "fleet"
[consumers.prod-1]
api_key_sha256 = [%q]
environment = "prod"
generation = 1
[consumers.prod-1.grants]
models = ["*"]
endpoints = ["*"]
[consumers.prod-1b]
api_key_sha256 = [%q]
environment = "prod"
generation = 1
[consumers.prod-1b.grants]
models = ["*"]
endpoints = ["*"]
[consumers.prod-2]
api_key_sha256 = [%q]
environment = "prod"
generation = 2
[consumers.prod-2.grants]
models = ["*"]
endpoints = ["*"]
[consumers.staging-1]
api_key_sha256 = [%q]
environment = "staging"
generation = 1
[consumers.staging-1.grants]
models = ["*"]
endpoints = ["*"]
`, engineTOML(engine), logPath, strings.Join(servers, ", "), sha("k-prod-1"), sha("k-prod-1b"), sha("k-prod-2"), sha("k-staging-1")) + extra
	cfg, err := config.LoadBytes("prefix.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	return "http://" + g.Addr("web"), "http://" + g.AdminAddr(), logPath
}

// conversation builds the chat bodies of a conversation turn by turn: a system prompt
// shared by every conversation of a test (2 KiB, over the 1 KiB minimum prefix), then user
// turns that differ per conversation, each after the previous answer.
type conversation struct {
	id    string
	msgs  []string
	model string
}

var sharedSystem = strings.Repeat("You are a terse assistant for the prefix affinity test. ", 40)

func newConversation(model, id string) *conversation {
	c := &conversation{id: id, model: model}
	c.msgs = append(c.msgs, fmt.Sprintf(`{"role":"system","content":%q}`, sharedSystem))
	return c
}

// turn appends the next user message (after the previous answer) and returns the body.
func (c *conversation) turn(n int) string {
	if n > 1 {
		c.msgs = append(c.msgs, fmt.Sprintf(`{"role":"assistant","content":%q}`, "Answer "+strconv.Itoa(n-1)+" of "+c.id+": "+strings.Repeat("fact ", 60)))
	}
	c.msgs = append(c.msgs, fmt.Sprintf(`{"role":"user","content":%q}`, "Conversation "+c.id+", question "+strconv.Itoa(n)+": "+strings.Repeat("why? ", 60)))
	return fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[%s]}`, c.model, strings.Join(c.msgs, ","))
}

// prefixCall sends one chat completion and returns the instance that answered, its cache
// state and the gateway's prefix fields.
type prefixAnswer struct {
	id, instance, cache string
	matched             int
	estimatedMs         float64
}

func prefixCall(t *testing.T, base, key, body string) prefixAnswer {
	t.Helper()
	r := call(t, "POST", base+"/v1/chat/completions", key, body)
	require.Equal(t, 200, r.status, r.raw)
	a := prefixAnswer{id: r.header.Get("X-Request-Id"), instance: r.header.Get(llmsim.InstanceHeader), cache: r.header.Get(llmsim.CacheHeader)}
	require.NotEmpty(t, a.instance)
	var err error
	a.matched, err = strconv.Atoi(r.header.Get("X-Sluice-Prefix-Matched-Bytes"))
	require.NoError(t, err, "X-Sluice-Prefix-Matched-Bytes on a routed request")
	a.estimatedMs, err = strconv.ParseFloat(r.header.Get("X-Sluice-Prefix-Estimated-Ms"), 64)
	require.NoError(t, err)
	return a
}

// logLines returns the access log's lines by request id, once it holds n lines.
func logLines(t *testing.T, path string, n int) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, l := range accessLines(t, path, n) {
		id, _ := l["request_id"].(string)
		out[id] = l
	}
	return out
}

// metricValue reads one series from the admin API's metrics page (0 when absent).
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	_, body := adminGet(t, admin+"/metrics")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)`)
	if s := re.FindStringSubmatch(body); s != nil {
		v, err := strconv.ParseFloat(s[1], 64)
		require.NoError(t, err)
		return v
	}
	return 0
}

// A multi-turn conversation stays on one backend of a round-robin service (each follow-up
// routed by a hint, served from the backend's prefix cache), conversations that share only
// their system prompt spread over the backends, and without prefix affinity the same
// conversation is spread by round robin and misses the cache. The access log carries the
// prefix fields.
func TestPrefixAffinityKeepsAConversationOnOneBackend(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			f := prefixFleet(t, 4)
			base, admin, logPath := startPrefixGateway(t, engine, f)
			hits0 := metricValue(t, admin, `sluice_prefix_affinity_selections_total{model="sticky",outcome="hit"}`)
			matched0 := metricValue(t, admin, `sluice_prefix_affinity_matched_bytes_total{model="sticky"}`)
			scanned0 := metricValue(t, admin, `sluice_prefix_affinity_scanned_bytes_total{model="sticky"}`)

			const turns = 5
			c := newConversation("sticky", "A")
			var first string
			var ids []string
			matched := 0
			for n := 1; n <= turns; n++ {
				a := prefixCall(t, base, "k-prod-1", c.turn(n))
				ids = append(ids, a.id)
				matched += a.matched
				if n == 1 {
					first = a.instance
					require.Zero(t, a.matched, "the first turn has no hint")
					continue
				}
				require.Equal(t, first, a.instance, "turn %d stays on the conversation's backend", n)
				require.Positive(t, a.matched, "turn %d is routed by the previous turn's hint", n)
				require.InDelta(t, float64(a.matched/4*50)/1000, a.estimatedMs, 1e-9, "estimate: bytes/4 tokens × 50 µs")
				require.NotEqual(t, "miss", a.cache, "turn %d finds its prefix in the backend's cache", n)
			}
			require.GreaterOrEqual(t, metricValue(t, admin, `sluice_prefix_affinity_selections_total{model="sticky",outcome="hit"}`)-hits0, float64(turns-1))
			// The matched bytes the responses reported are counted, and each turn's
			// fingerprint scanned more than its hint covered (it adds a turn).
			matchedN := metricValue(t, admin, `sluice_prefix_affinity_matched_bytes_total{model="sticky"}`) - matched0
			scannedN := metricValue(t, admin, `sluice_prefix_affinity_scanned_bytes_total{model="sticky"}`) - scanned0
			require.Equal(t, float64(matched), matchedN, "matched bytes counted as the responses reported them")
			require.Greater(t, scannedN, matchedN)
			require.Positive(t, metricValue(t, admin, `sluice_prefix_affinity_index_entries`))

			// New conversations under the same system prompt are told apart: the hint of the
			// system prompt alone (over half of each request) is not taken, and each goes by
			// the rendezvous hash of its own conversation key (up to the end of its first
			// question), so they spread over the backends.
			used := map[string]bool{}
			for i := range 12 {
				a := prefixCall(t, base, "k-prod-1", newConversation("sticky", "spread-"+strconv.Itoa(i)).turn(1))
				require.Zero(t, a.matched)
				used[a.instance] = true
			}
			require.Greater(t, len(used), 1, "conversations sharing a system prompt spread over the backends")
			require.Positive(t, metricValue(t, admin, `sluice_prefix_affinity_selections_total{model="sticky",outcome="shared"}`))

			// Without affinity, round robin spreads the same conversation's turns.
			c = newConversation("plain", "B")
			plain := map[string]bool{}
			var plainID string
			for n := 1; n <= turns; n++ {
				r := call(t, "POST", base+"/v1/chat/completions", "k-prod-1", c.turn(n))
				require.Equal(t, 200, r.status, r.raw)
				plainID = r.header.Get("X-Request-Id")
				require.Empty(t, r.header.Get("X-Sluice-Prefix-Matched-Bytes"), "an alias without prefix affinity")
				plain[r.header.Get(llmsim.InstanceHeader)] = true
			}
			require.Greater(t, len(plain), 1)

			lines := logLines(t, logPath, turns+12+turns)
			for n, id := range ids {
				l := lines[id]
				require.NotNil(t, l, "turn %d has a log line", n+1)
				require.Equal(t, "sticky", l["model"])
				require.Contains(t, l, "prefix_estimated_ms")
				if n == 0 {
					require.Equal(t, "miss", l["prefix_outcome"])
					require.Equal(t, float64(0), l["prefix_matched_bytes"])
				} else {
					require.Equal(t, "hit", l["prefix_outcome"])
					require.Positive(t, l["prefix_matched_bytes"])
				}
			}
			require.NotContains(t, lines[plainID], "prefix_matched_bytes", "the plain alias is not routed by affinity")
		})
	}
}

// Hints are scoped: a caller of the same environment and credential generation reuses
// another's hint, while another environment, another generation or another alias does not
// see it.
func TestPrefixAffinityDomainsIsolate(t *testing.T) {
	f := prefixFleet(t, 4)
	base, _, _ := startPrefixGateway(t, "gnet", f)
	c := newConversation("sticky", "D")
	_ = prefixCall(t, base, "k-prod-1", c.turn(1))
	second := c.turn(2)
	owner := prefixCall(t, base, "k-prod-1", second)
	require.Positive(t, owner.matched)

	same := prefixCall(t, base, "k-prod-1b", second)
	require.GreaterOrEqual(t, same.matched, owner.matched, "same environment and generation: same domain")
	require.Equal(t, owner.instance, same.instance)
	for _, key := range []string{"k-prod-2", "k-staging-1"} {
		require.Zero(t, prefixCall(t, base, key, second).matched, "%s is in another domain", key)
	}
	other := strings.Replace(second, `"model":"sticky"`, `"model":"other"`, 1)
	require.Zero(t, prefixCall(t, base, "k-prod-1", other).matched, "another alias is another domain")
}

// When the backend a hint chose answers with a full cache miss (it restarted and lost its
// cache), the hint is dropped: the response's log line says so and the invalidation is
// counted. The backend computed that turn and holds it now: the next turn goes back to it by
// the hint learned from that turn.
func TestPrefixAffinityFullMissInvalidates(t *testing.T) {
	f := prefixFleet(t, 2)
	// The servers are not observed, as servers that report no epoch: the full miss is the
	// only sign of the restart. Observed, the restart is also seen in the server's next
	// observation, whenever that comes (TestPrefixAffinityForgetsARestartedWorker).
	base, admin, logPath := startPrefixGatewayAt(t, "gnet", f.Addrs(), "[services.fleet.workers]\nobserve = false\n")
	inv0 := metricValue(t, admin, `sluice_prefix_affinity_invalidations_total{model="sticky"}`)
	c := newConversation("sticky", "E")
	a1 := prefixCall(t, base, "k-prod-1", c.turn(1))
	a2 := prefixCall(t, base, "k-prod-1", c.turn(2))
	require.Equal(t, a1.instance, a2.instance)
	require.Positive(t, a2.matched)

	idx := -1
	for i := range f.Len() {
		if f.Instance(i).WorkerID == a1.instance || "llmsim-"+strings.Split(f.Addrs()[i], ":")[1] == a1.instance {
			idx = i
		}
	}
	require.GreaterOrEqual(t, idx, 0, "instance %s is in the fleet", a1.instance)
	require.NoError(t, f.Crash(idx, 0))
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + f.Addrs()[idx] + "/llmsim/stats")
		if err != nil {
			return false // not listening again yet
		}
		defer resp.Body.Close()
		var st llmsim.Stats
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&st) == nil && st.Epoch == 1
	})

	// The restarted backend has an empty cache: the hint is stale. A request may meet the
	// connection the crash closed first; it is retried on a new one.
	a3 := prefixCall(t, base, "k-prod-1", c.turn(3))
	require.Equal(t, a1.instance, a3.instance, "the hint still chose the restarted backend")
	require.Positive(t, a3.matched)
	require.Equal(t, "miss", a3.cache)
	waitMetric(t, admin+"/metrics", `sluice_prefix_affinity_invalidations_total{model="sticky"}`, func(v float64) bool { return v >= inv0+1 })

	a4 := prefixCall(t, base, "k-prod-1", c.turn(4))
	lines := logLines(t, logPath, 4)
	turns := fmt.Sprintf("turn 3: %v\nturn 4: %v", lines[a3.id], lines[a4.id])
	require.Equal(t, a1.instance, a4.instance, "the backend that computed turn 3 serves turn 4\n%s", turns)
	require.Greater(t, a4.matched, a3.matched, "turn 3 was learned\n%s", turns)
	require.NotEqual(t, "miss", a4.cache, "the restarted backend holds turn 3")
	require.Equal(t, true, lines[a3.id]["prefix_invalidated"], turns)
	require.Equal(t, false, lines[a4.id]["prefix_invalidated"], turns)
	require.Equal(t, "hit", lines[a4.id]["prefix_outcome"], turns)
}

// usageServer answers chat completions with a usage whose prompt_tokens_details holds
// cachedTokens, or none when cachedTokens is negative (a server that does not report them),
// naming itself in X-Llmsim-Instance and sending no cache-state field.
func usageServer(t *testing.T, name string, cachedTokens int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		details := ""
		if cachedTokens >= 0 {
			details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, cachedTokens)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(llmsim.InstanceHeader, name)
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":900,"completion_tokens":1,"total_tokens":901%s}}`, details)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// The usage's cached_tokens is the full-miss signal of servers without a cache-state field
// (vLLM, SGLang): a count of 0 drops the hint that chose the server, and the answer is learned
// again; a usage without the count says nothing, and the hint stays.
func TestPrefixAffinityFullMissInUsage(t *testing.T) {
	for _, c := range []struct {
		name        string
		cached      int
		invalidated bool
	}{{"zero cached tokens", 0, true}, {"no count", -1, false}, {"some cached tokens", 512, false}} {
		t.Run(c.name, func(t *testing.T) {
			base, _, logPath := startPrefixGatewayAt(t, "gnet", []string{usageServer(t, "only", c.cached)}, "")
			conv := newConversation("sticky", "U-"+c.name)
			_ = prefixCall(t, base, "k-prod-1", conv.turn(1))
			a2 := prefixCall(t, base, "k-prod-1", conv.turn(2))
			require.Positive(t, a2.matched, "the first turn's hint chose the server")
			a3 := prefixCall(t, base, "k-prod-1", conv.turn(3))
			lines := logLines(t, logPath, 3)
			turns := fmt.Sprintf("turn 2: %v\nturn 3: %v", lines[a2.id], lines[a3.id])
			require.Equal(t, c.invalidated, lines[a2.id]["prefix_invalidated"], turns)
			require.Greater(t, a3.matched, a2.matched, "the second turn was learned\n%s", turns)
			require.Equal(t, "hit", lines[a3.id]["prefix_outcome"], turns)
		})
	}
}
