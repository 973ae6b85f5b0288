package gateway_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

const (
	teamAKey = "sk-team-a-0123456789"
	teamBKey = "sk-team-b-0123456789"
	// teamCKey may call every OpenAI endpoint for chat-model and narrow-model.
	teamCKey = "sk-team-c-0123456789"
	// chatOnlyKey may call /v1/chat/completions only, for chat-model.
	chatOnlyKey = "sk-chat-only-0123456789"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// startModelGateway runs a gateway with one model router in front of the simulator sim:
// chat-model (rewritten to internal/model-v1), secret-model (granted to team-b only),
// fallback-model (a dead first target, the simulator second), narrow-model (one request
// at a time, no queue), queued-model (2 at a time, 4 queued for up to 30 s) and brief-model
// (1 at a time, 2 queued for up to 2 s). The consumers: team-a (chat, models and messages for chat-model,
// fallback-model and narrow-model), team-b (everything), team-c (every OpenAI endpoint for
// chat-model and narrow-model) and chat-only (chat completions of chat-model).
func startModelGateway(t *testing.T, engine, sim string) string {
	t.Helper()
	base, _ := startModelGatewayAdmin(t, engine, sim)
	return base
}

// startModelGatewayAdmin is startModelGateway that also returns the admin API's base URL.
func startModelGatewayAdmin(t *testing.T, engine, sim string) (string, string) {
	t.Helper()
	_, addr, admin := startConfigGateway(t, modelGatewayTOML(t, engine, sim))
	return "http://" + addr, admin
}

// modelGatewayTOML is the configuration of startModelGateway.
func modelGatewayTOML(t *testing.T, engine, sim string) string {
	deadAddr := deadUpstream(t)
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
middlewares = ["keys"]
[middlewares.keys]
type = "api-key"
[services.sim.load_balancer]
servers = [{ url = "http://%s" }]
[services.dead.load_balancer]
servers = [{ url = "http://%s" }]
[models.chat-model.targets.primary]
service = "sim"
upstream_model = "internal/model-v1"
[models.secret-model.targets.t]
service = "sim"
[models.fallback-model.targets.first]
service = "dead"
priority = 0
[models.fallback-model.targets.second]
service = "sim"
priority = 1
upstream_model = "second-choice"
[models.dead-model.targets.t]
service = "dead"
[models.narrow-model.targets.t]
service = "sim"
[models.narrow-model.scheduling]
max_concurrent_requests = 1
[models.queued-model.targets.t]
service = "sim"
[models.queued-model.scheduling]
max_concurrent_requests = 2
max_queued_requests = 4
queue_timeout_ms = 30000
[models.brief-model.targets.t]
service = "sim"
[models.brief-model.scheduling]
max_concurrent_requests = 1
max_queued_requests = 2
queue_timeout_ms = 2000
[consumers.team-a]
api_key_sha256 = [%q]
[consumers.team-a.grants]
models = ["chat-model", "fallback-model", "narrow-model"]
endpoints = ["/v1/chat/completions", "/v1/models", "/v1/messages"]
[consumers.team-b]
api_key_sha256 = [%q]
[consumers.team-b.grants]
models = ["*"]
endpoints = ["*"]
[consumers.team-c]
api_key_sha256 = [%q]
[consumers.team-c.grants]
models = ["chat-model", "narrow-model"]
endpoints = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses"]
[consumers.chat-only]
api_key_sha256 = [%q]
[consumers.chat-only.grants]
models = ["chat-model"]
endpoints = ["/v1/chat/completions"]
`, engineTOML(engine), sim, deadAddr, sha(teamAKey), sha(teamBKey), sha(teamCKey), sha(chatOnlyKey))
}

type apiResult struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// call sends one request and returns its answer, failing the test when it gets none; on the
// test's goroutine only (tryCall elsewhere).
func call(t *testing.T, method, url, key, body string, hdr ...string) apiResult {
	t.Helper()
	r, err := tryCall(method, url, key, body, hdr...)
	require.NoError(t, err)
	return r
}

// tryCall is call returning the error that left the request without an answer, for goroutines
// other than the test's, which must not fail the test themselves.
func tryCall(method, url, key, body string, hdr ...string) (apiResult, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return apiResult{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return apiResult{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResult{}, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	r := apiResult{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r, nil
}

// callOutcome is what tryCall returned, sent by the goroutine that made the call to the test's.
type callOutcome struct {
	r   apiResult
	err error
}

// goCall makes tryCall on a goroutine of its own; the channel gets its outcome.
func goCall(method, url, key, body string, hdr ...string) <-chan callOutcome {
	ch := make(chan callOutcome, 1)
	go func() {
		r, err := tryCall(method, url, key, body, hdr...)
		ch <- callOutcome{r, err}
	}()
	return ch
}

func errField(r apiResult, k string) any {
	e, _ := r.body["error"].(map[string]any)
	return e[k]
}

const chatBody = `{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`

func TestModelRouterAuthorisesValidatesAndRoutes(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startModelGateway(t, engine, sim)
			chat := base + "/v1/chat/completions"

			r := call(t, "POST", chat, "", fmt.Sprintf(chatBody, "chat-model"))
			require.Equal(t, 401, r.status, r.raw)
			require.Equal(t, "missing_api_key", errField(r, "code"))
			require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
			r = call(t, "POST", chat, "sk-wrong", fmt.Sprintf(chatBody, "chat-model"))
			require.Equal(t, 401, r.status, r.raw)
			require.Equal(t, "invalid_api_key", errField(r, "code"))

			r = call(t, "POST", base+"/v1/embeddings", teamAKey, `{"model":"chat-model","input":"x"}`)
			require.Equal(t, 403, r.status, "endpoint not granted: %s", r.raw)

			r = call(t, "GET", base+"/v1/models", teamAKey, "")
			require.Equal(t, 200, r.status, r.raw)
			require.Contains(t, r.raw, `"chat-model"`)
			require.NotContains(t, r.raw, "secret-model", "only granted aliases are listed")
			r = call(t, "GET", base+"/v1/models", teamBKey, "")
			require.Contains(t, r.raw, `"secret-model"`)
			r = call(t, "GET", base+"/v1/models/chat-model", teamAKey, "")
			require.Equal(t, 200, r.status, r.raw)
			require.Equal(t, "chat-model", r.body["id"])
			r = call(t, "GET", base+"/v1/models/secret-model", teamAKey, "")
			require.Equal(t, 404, r.status, "an alias the caller may not use is not disclosed: %s", r.raw)

			for _, m := range []string{"no-such-model", "secret-model"} {
				r = call(t, "POST", chat, teamAKey, fmt.Sprintf(chatBody, m))
				require.Equal(t, 404, r.status, r.raw)
				require.Equal(t, "model_not_found", errField(r, "code"))
			}

			r = call(t, "POST", chat, teamAKey, `{"model":"chat-model","max_tokens":4}`)
			require.Equal(t, 400, r.status, r.raw)
			require.Equal(t, "messages", errField(r, "param"))
			r = call(t, "POST", chat, teamAKey, `{"model":"chat-model","messages":[{"role":"user","content":"hi"}],"temperature":7}`)
			require.Equal(t, 400, r.status, r.raw)
			require.Equal(t, "temperature", errField(r, "param"))

			r = call(t, "POST", chat, teamAKey, fmt.Sprintf(chatBody, "chat-model"))
			require.Equal(t, 200, r.status, r.raw)
			require.Equal(t, "internal/model-v1", r.body["model"], "the upstream got the target's model")

			r = call(t, "POST", chat, teamAKey, fmt.Sprintf(chatBody, "fallback-model"))
			require.Equal(t, 200, r.status, "the dead first target falls back to the second: %s", r.raw)
			require.Equal(t, "second-choice", r.body["model"])

			r = call(t, "POST", base+"/v1/messages", "", `{"model":"chat-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, 401, r.status)
			require.Equal(t, "error", r.body["type"], "Anthropic's error shape on /v1/messages: %s", r.raw)
			r = call(t, "POST", base+"/v1/messages", "", `{"model":"chat-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, "X-Api-Key", teamAKey)
			require.Equal(t, 200, r.status, "Anthropic clients send X-Api-Key: %s", r.raw)

			// A key field sent twice is refused, whichever of its values is valid: a reader
			// that takes the other one would see another caller.
			for _, keys := range [][2]string{{teamAKey, "sk-wrong"}, {"sk-wrong", teamAKey}, {teamAKey, teamAKey}} {
				req, err := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(`{"model":"chat-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Add("X-Api-Key", keys[0])
				req.Header.Add("X-Api-Key", keys[1])
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, 401, resp.StatusCode, "two X-Api-Key fields: %s", body)
				require.Contains(t, string(body), "more than one API key field")
			}
		})
	}
}

// holdSlot starts a streamed chat completion of model through the gateway at base that the
// simulator stalls before its first token, so that the request keeps its admission slot until
// the returned connection closes (at the latest in t.Cleanup). It returns once the stream's
// 200 status line arrived: the slot is taken by then.
func holdSlot(t *testing.T, base, key, model string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n%s: stall-after=0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		key, llmsim.FaultHeader, len(body), body)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, " 200 ", "the holding stream was admitted")
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	return c
}

// A pool at its limit with no queue refuses at once with 429 and Retry-After; the slot comes
// back when the client of the stream holding it leaves.
func TestModelPoolAtCapacityAnswers429(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base, admin := startModelGatewayAdmin(t, engine, sim)
			// The first stream holds the only slot: the simulator stalls it until its
			// client leaves, so nothing frees the slot before the checks below are done.
			c := holdSlot(t, base, teamAKey, "narrow-model")

			r := call(t, "POST", base+"/v1/chat/completions", teamAKey, fmt.Sprintf(chatBody, "narrow-model"))
			require.Equal(t, 429, r.status, r.raw)
			require.Equal(t, "1", r.header.Get("Retry-After"))

			// The admin API and the metrics show the alias's pool and the refusal.
			a := call(t, "GET", admin+"/api/gateway/models", "", "")
			require.Equal(t, 200, a.status, a.raw)
			var models []map[string]any
			require.NoError(t, json.Unmarshal([]byte(a.raw), &models))
			var narrow map[string]any
			for _, m := range models {
				if m["alias"] == "narrow-model" {
					narrow = m
				}
			}
			require.NotNil(t, narrow, a.raw)
			adm := narrow["admission"].(map[string]any)
			require.EqualValues(t, 1, adm["active"])
			require.EqualValues(t, 1, adm["max_concurrent_requests"])
			require.GreaterOrEqual(t, adm["rejected_queue_full"].(float64), 1.0)
			mt := call(t, "GET", admin+"/metrics", "", "")
			require.Contains(t, mt.raw, `sluice_model_active_requests{model="narrow-model"} 1`)
			require.Regexp(t, `sluice_model_rejected_total\{model="narrow-model",reason="queue_full"\} [1-9]`, mt.raw)

			require.NoError(t, c.Close()) // the stream's client leaves: its slot is released
			deadline := time.Now().Add(5 * time.Second)
			for {
				r = call(t, "POST", base+"/v1/chat/completions", teamAKey, fmt.Sprintf(chatBody, "narrow-model"))
				if r.status == 200 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the slot never came back: %d %s", r.status, r.raw)
				time.Sleep(10 * time.Millisecond) // polling for the release, not asserting on time
			}
		})
	}
}

// A reload keeps an alias's pool: the request in flight keeps its slot, and a newcomer is
// refused as before the reload. Changed limits apply to the same pool: a larger limit admits
// one more beside the request in flight, and a smaller one counts the requests admitted
// before it.
func TestReloadKeepsAnAliasAdmissionPool(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sluice.toml")
			toml := modelGatewayTOML(t, engine, sim)
			g, addr, admin := startFileGateway(t, path, toml)
			base := "http://" + addr
			holdSlot(t, base, teamAKey, "narrow-model")

			require.NoError(t, g.Reload())
			r := call(t, "POST", base+"/v1/chat/completions", teamAKey, fmt.Sprintf(chatBody, "narrow-model"))
			require.Equal(t, 429, r.status, "a reload that changed nothing freed the slot: %s", r.raw)
			mt := call(t, "GET", admin+"/metrics", "", "")
			require.Contains(t, mt.raw, `sluice_model_active_requests{model="narrow-model"} 1`)

			wider := strings.Replace(toml, "[models.narrow-model.scheduling]\nmax_concurrent_requests = 1",
				"[models.narrow-model.scheduling]\nmax_concurrent_requests = 2", 1)
			require.NotEqual(t, toml, wider)
			require.NoError(t, os.WriteFile(path, []byte(wider), 0o644))
			require.NoError(t, g.Reload())
			r = call(t, "POST", base+"/v1/chat/completions", teamAKey, fmt.Sprintf(chatBody, "narrow-model"))
			require.Equal(t, 200, r.status, r.raw)
			// Its slot comes back once the response is complete, just after the client has it.
			waitMetric(t, admin+"/metrics", `sluice_model_active_requests{model="narrow-model"}`, func(v float64) bool { return v == 1 })
			holdSlot(t, base, teamAKey, "narrow-model") // two held now, at the limit of two

			require.NoError(t, os.WriteFile(path, []byte(toml), 0o644)) // back to a limit of one
			require.NoError(t, g.Reload())
			r = call(t, "POST", base+"/v1/chat/completions", teamAKey, fmt.Sprintf(chatBody, "narrow-model"))
			require.Equal(t, 429, r.status, "the smaller limit counts the requests admitted before it: %s", r.raw)
			mt = call(t, "GET", admin+"/metrics", "", "")
			require.Contains(t, mt.raw, `sluice_model_active_requests{model="narrow-model"} 2`)
		})
	}
}

// Token usage is read from plain answers and from the usage chunk of streams that asked for
// it, counted per alias, target and consumer; a stream cut before its usage chunk is counted
// as missing, never as zero tokens.
func TestModelUsageAccounting(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base, admin := startModelGatewayAdmin(t, engine, sim)
			chat := base + "/v1/chat/completions"
			series := func(kind string) float64 {
				t.Helper()
				m := call(t, "GET", admin+"/metrics", "", "")
				re := regexp.MustCompile(`sluice_model_tokens_total\{model="chat-model",target="primary",consumer="team-a",kind="` + kind + `"\} (\d+)`)
				if s := re.FindStringSubmatch(m.raw); s != nil {
					v, _ := strconv.ParseFloat(s[1], 64)
					return v
				}
				return 0
			}
			missing := func() float64 {
				m := call(t, "GET", admin+"/metrics", "", "")
				re := regexp.MustCompile(`sluice_model_usage_missing_total\{model="chat-model"\} (\d+)`)
				if s := re.FindStringSubmatch(m.raw); s != nil {
					v, _ := strconv.ParseFloat(s[1], 64)
					return v
				}
				return 0
			}
			p0, c0, m0 := series("prompt"), series("completion"), missing()

			r := call(t, "POST", chat, teamAKey, fmt.Sprintf(chatBody, "chat-model"))
			require.Equal(t, 200, r.status, r.raw)
			usage := r.body["usage"].(map[string]any)
			waitFor(t, func() bool { return series("completion") == c0+usage["completion_tokens"].(float64) })
			require.Equal(t, p0+usage["prompt_tokens"].(float64), series("prompt"))

			r = call(t, "POST", chat, teamAKey, `{"model":"chat-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, 200, r.status)
			waitFor(t, func() bool { return series("completion") == c0+usage["completion_tokens"].(float64)+3 })

			r = call(t, "POST", chat, teamAKey, `{"model":"chat-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, "X-Llmsim-Fault", "reset-after=2")
			require.Equal(t, 200, r.status)
			waitFor(t, func() bool { return missing() == m0+1 })
			c1 := c0 + usage["completion_tokens"].(float64) + 3
			require.Equal(t, c1, series("completion"), "a cut stream adds no tokens")

			// The Responses and Messages APIs report usage in their own shapes, plain and
			// streamed.
			teamB := func() float64 {
				m := call(t, "GET", admin+"/metrics", "", "")
				re := regexp.MustCompile(`sluice_model_tokens_total\{model="chat-model",target="primary",consumer="team-b",kind="completion"\} (\d+)`)
				if s := re.FindStringSubmatch(m.raw); s != nil {
					v, _ := strconv.ParseFloat(s[1], 64)
					return v
				}
				return 0
			}
			b0 := teamB()
			r = call(t, "POST", base+"/v1/responses", teamBKey, `{"model":"chat-model","input":"hi","max_output_tokens":4}`)
			require.Equal(t, 200, r.status, r.raw)
			out := r.body["usage"].(map[string]any)["output_tokens"].(float64)
			r = call(t, "POST", base+"/v1/responses", teamBKey, `{"model":"chat-model","input":"hi","max_output_tokens":2,"stream":true}`)
			require.Equal(t, 200, r.status)
			r = call(t, "POST", base+"/v1/messages", teamBKey, `{"model":"chat-model","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, 200, r.status, r.raw)
			mout := r.body["usage"].(map[string]any)["output_tokens"].(float64)
			r = call(t, "POST", base+"/v1/messages", teamBKey, `{"model":"chat-model","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, 200, r.status)
			waitFor(t, func() bool { return teamB() >= b0+out+2+mout+2 })
			require.Equal(t, b0+out+2+mout+2, teamB(), "each API's usage counted once")
			require.Equal(t, m0+1, missing(), "no usage missing on the Responses and Messages answers")
		})
	}
}

// waitFor polls cond until it holds, failing after 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within 5s")
		time.Sleep(10 * time.Millisecond) // polling an observable state, not asserting on time
	}
}

// An upstream that refuses with 429 or 503 and a Retry-After did not act on the request: the
// model router sends it to another backend and keeps the refusing one out for the time it
// asked; when every backend refuses, the caller gets the shortest Retry-After of them, and
// the next callers get it from the gateway until that time is up, without the refusing
// backends being asked again.
func TestModelRouterMovesOverloadRefusals(t *testing.T) {
	var refusals atomic.Int32
	refuse := func(status, after int) *upstream {
		return serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
			if strings.HasPrefix(head, "POST ") { // not the worker observation polls
				refusals.Add(1)
			}
			_, err := fmt.Fprintf(c, "HTTP/1.1 %d Busy\r\nRetry-After: %d\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", status, after)
			return err == nil
		})
	}
	var okHits atomic.Int32
	ok := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		if strings.HasPrefix(head, "POST /v1/chat/completions ") { // not the worker observation polls
			okHits.Add(1)
		}
		return echo(c, r, head, body)
	})
	// Refusals that outlast the test's requests on a loaded machine: it checks that the
	// refusing backends are not asked again before their time is up.
	busy429, busy503 := refuse(429, 70), refuse(503, 30)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[routers.plain]
rule = "PathPrefix(`+"`/plain`"+`)"
service = "busy"
[services.mixed.load_balancer]
servers = [{ url = "http://%s" }, { url = "http://%s" }]
[services.busy.load_balancer]
servers = [{ url = "http://%s" }, { url = "http://%s" }]
[models.m.targets.t]
service = "mixed"
[models.b.targets.t]
service = "busy"
`, engineTOML(engine), busy429.addr(), ok.addr(), busy429.addr(), busy503.addr())
			cfg, err := config.LoadBytes("overload.toml", []byte(toml))
			require.NoError(t, err)
			g, err := gateway.New(cfg, "", nil)
			require.NoError(t, err)
			require.NoError(t, g.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = g.Drain(ctx)
			})
			base := "http://" + g.Addr("web") + "/v1/chat/completions"
			before := okHits.Load()
			for i := 0; i < 4; i++ {
				r := call(t, "POST", base, "", fmt.Sprintf(chatBody, "m"))
				require.Equal(t, 200, r.status, "the refusal moved to the other backend: %s", r.raw)
			}
			require.EqualValues(t, 4, okHits.Load()-before)
			require.True(t, g.Snapshot().Services["mixed"].Backends[0].LB.Down(), "the refusing backend is out for its Retry-After")

			refused := refusals.Load()
			r := call(t, "POST", base, "", fmt.Sprintf(chatBody, "b"))
			require.Equal(t, 503, r.status, r.raw)
			require.Equal(t, "30", r.header.Get("Retry-After"), "the shortest Retry-After of the refusals")
			require.Equal(t, "upstream_overloaded", errField(r, "code"))
			require.EqualValues(t, 2, refusals.Load()-refused, "both busy backends were asked once")

			for i := 0; i < 3; i++ {
				r := call(t, "POST", base, "", fmt.Sprintf(chatBody, "b"))
				require.Equal(t, 503, r.status, "the refusal that ends first: %s", r.raw)
				left, err := strconv.Atoi(r.header.Get("Retry-After"))
				require.NoError(t, err)
				require.True(t, left >= 1 && left <= 30, "the time left of the shortest Retry-After: %d", left)
				require.Equal(t, "upstream_overloaded", errField(r, "code"))
			}
			require.EqualValues(t, 2, refusals.Load()-refused, "a backend waiting out its Retry-After is not asked")

			// A plain route does not answer for the upstreams: with every server out, it sends
			// the request to one anyway (panic mode), and relays what that one says.
			r = call(t, "POST", "http://"+g.Addr("web")+"/plain/v1/chat/completions", "", fmt.Sprintf(chatBody, "b"))
			require.Contains(t, []int{429, 503}, r.status, r.raw)
			require.NotEqual(t, "upstream_overloaded", errField(r, "code"), "the upstream's own answer: %s", r.raw)
			require.EqualValues(t, 3, refusals.Load()-refused, "the plain route asked a refusing backend")
		})
	}
}

// postChatHeaders posts a chat-model completion to url as team A with exactly the header
// fields hdr (and the key), and returns the answer, whose body must be JSON.
func postChatHeaders(t *testing.T, url string, hdr http.Header) apiResult {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(fmt.Sprintf(chatBody, "chat-model")))
	require.NoError(t, err)
	req.Header = hdr
	req.Header.Set("Authorization", "Bearer "+teamAKey)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := apiResult{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	require.NoError(t, json.Unmarshal(raw, &r.body), "a JSON body: %s", raw)
	return r
}

// TestModelRouterRefusesNonJSONContentType: a browser may POST text/plain, a form type or a
// typeless body to any origin without a CORS preflight, so a model router refuses every body
// not typed JSON with 415 (in the endpoint's error shape) and never forwards it.
func TestModelRouterRefusesNonJSONContentType(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startModelGateway(t, engine, sim)
			post := func(path, ct string) apiResult {
				t.Helper()
				hdr := http.Header{}
				if ct != "" {
					hdr.Set("Content-Type", ct)
				}
				return postChatHeaders(t, base+path, hdr)
			}
			for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
				"multipart/form-data; boundary=x", "", "application/jsonx", "json", "application/+json"} {
				r := post("/v1/chat/completions", ct)
				require.Equal(t, 415, r.status, "%q: %s", ct, r.raw)
				require.Equal(t, "unsupported_media_type", errField(r, "code"))
				require.Contains(t, errField(r, "message"), "application/json")
				r = post("/v1/messages", ct)
				require.Equal(t, 415, r.status, "%q: %s", ct, r.raw)
				require.Equal(t, "error", r.body["type"], "Anthropic's error shape on /v1/messages: %s", r.raw)
			}
			for _, ct := range []string{"application/json", "Application/JSON; charset=utf-8", " application/json ;charset=utf-8", "application/vnd.example+json"} {
				r := post("/v1/chat/completions", ct)
				require.Equal(t, 200, r.status, "%q: %s", ct, r.raw)
			}
		})
	}
}

// TestModelRouterRefusesBodiesItCannotRead: a content coding the router does not decode gets
// 415 (it would otherwise fail as bad JSON, or pass plain JSON mislabelled upstream), and a
// Content-Type given twice gets 400 (which one the upstream reads is anyone's guess).
func TestModelRouterRefusesBodiesItCannotRead(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startModelGateway(t, engine, sim)
			post := func(hdr http.Header) apiResult {
				t.Helper()
				return postChatHeaders(t, base+"/v1/chat/completions", hdr)
			}
			for _, ce := range []string{"gzip", "br", "deflate"} {
				r := post(http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {ce}})
				require.Equal(t, 415, r.status, "%s: %s", ce, r.raw)
				require.Contains(t, errField(r, "message"), "Content-Encoding")
			}
			r := post(http.Header{"Content-Type": {"application/json", "text/plain"}})
			require.Equal(t, 400, r.status, r.raw)
			require.Contains(t, errField(r, "message"), "Content-Type")
			r = post(http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"identity"}})
			require.Equal(t, 200, r.status, r.raw)
		})
	}
}

// TestModelsEndpointTakesGETAndHEAD: /v1/models and /v1/models/{alias} answer GET and HEAD;
// any other method (methods are case-sensitive, RFC 9110 §9.1) gets 405 with Allow.
func TestModelsEndpointTakesGETAndHEAD(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startModelGateway(t, engine, sim)
			for _, path := range []string{"/v1/models", "/v1/models/chat-model"} {
				for _, m := range []string{"POST", "DELETE", "PUT", "GeT"} {
					r := call(t, m, base+path, teamAKey, "")
					require.Equal(t, 405, r.status, "%s %s: %s", m, path, r.raw)
					require.Equal(t, "GET, HEAD", r.header.Get("Allow"))
					require.Equal(t, "method_not_allowed", errField(r, "code"))
				}
				require.Equal(t, 200, call(t, "GET", base+path, teamAKey, "").status)
				require.Equal(t, 200, call(t, "HEAD", base+path, teamAKey, "").status)
			}
		})
	}
}

// TestMessagesErrorsInAnthropicShape: on /v1/messages the errors the gateway writes after
// routing (no backend, an upstream that fails, the SSE event that ends a cut stream) are in
// Anthropic's shape, as the router's own refusals are, so that Anthropic's SDKs read them;
// the same failures on /v1/chat/completions stay in OpenAI's.
func TestMessagesErrorsInAnthropicShape(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startModelGateway(t, engine, sim)
			msg := `{"model":%q,"max_tokens":16,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`

			r := call(t, "POST", base+"/v1/messages", teamBKey, fmt.Sprintf(msg, "dead-model", false))
			require.GreaterOrEqual(t, r.status, 500, r.raw)
			require.Equal(t, "error", r.body["type"], "Anthropic's shape: %s", r.raw)
			e, _ := r.body["error"].(map[string]any)
			require.NotEmpty(t, e["type"], r.raw)
			require.NotEmpty(t, e["message"], r.raw)
			r = call(t, "POST", base+"/v1/chat/completions", teamBKey, fmt.Sprintf(chatBody, "dead-model"))
			require.GreaterOrEqual(t, r.status, 500, r.raw)
			require.NotEmpty(t, errField(r, "code"), "OpenAI's shape: %s", r.raw)

			cut := call(t, "POST", base+"/v1/messages", teamBKey, fmt.Sprintf(msg, "chat-model", true), "X-Llmsim-Fault", "reset-after=3")
			require.Equal(t, 200, cut.status, cut.raw)
			require.Contains(t, cut.raw, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"", "Anthropic's stream error event")
			cut = call(t, "POST", base+"/v1/chat/completions", teamBKey, `{"model":"chat-model","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, "X-Llmsim-Fault", "reset-after=3")
			require.Equal(t, 200, cut.status, cut.raw)
			require.Contains(t, cut.raw, "event: error\ndata: {\"error\":", "OpenAI's stream error event")
		})
	}
}

// The paths under /v1/messages that the gateway does not serve (Anthropic's SDKs call
// /v1/messages/count_tokens and /v1/messages/batches) get the gateway's 401 and 404 in
// Anthropic's shape, which those SDKs read; a path that only starts with the same letters
// stays OpenAI's.
func TestPathsUnderMessagesGetAnthropicErrors(t *testing.T) {
	sim := startSimulator(t)
	base := startModelGateway(t, "gnet", sim)
	const body = `{"model":"chat-model","messages":[{"role":"user","content":"hi"}]}`
	for _, path := range []string{"/v1/messages/count_tokens", "/v1/messages/batches"} {
		r := call(t, "POST", base+path, "", body)
		require.Equal(t, 401, r.status, r.raw)
		require.Equal(t, "error", r.body["type"], "Anthropic's shape on %s: %s", path, r.raw)
		r = call(t, "POST", base+path, teamBKey, body)
		require.Equal(t, 404, r.status, r.raw)
		require.Equal(t, "error", r.body["type"], "Anthropic's shape on %s: %s", path, r.raw)
		require.Equal(t, "not_found_error", errField(r, "type"), r.raw)
	}
	r := call(t, "POST", base+"/v1/messagesx", teamBKey, body)
	require.Equal(t, 404, r.status, r.raw)
	require.NotEmpty(t, errField(r, "code"), "OpenAI's shape: %s", r.raw)
}
