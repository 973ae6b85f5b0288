package pd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/pd"
)

// workerKeyEnv holds the workers' key in the tests' environment.
const (
	workerKeyEnv = "SLUICE_TEST_PD_KEY"
	workerKey    = "pd-test-worker-key-0123"
)

// fleet is an llmsim P/D fleet: prefill-a, prefill-b, decode-a, decode-b (in this order),
// then any extra instances, all of generation 3 and digest sha256:good unless changed.
type fleet struct {
	sim *llmsim.Fleet
	ids []string
}

// Instance indices of the standard fleet.
const (
	prefillA = iota
	prefillB
	decodeA
	decodeB
)

func startFleet(t *testing.T, mod func(i int, ic *llmsim.InstanceConfig), extra ...llmsim.InstanceConfig) *fleet {
	t.Helper()
	cfg := llmsim.Config{Seed: 7, APIKey: workerKey}
	roles := []llmsim.Role{llmsim.RolePrefill, llmsim.RolePrefill, llmsim.RoleDecode, llmsim.RoleDecode}
	names := []string{"prefill-a", "prefill-b", "decode-a", "decode-b"}
	for i, r := range roles {
		ic := fastInstance()
		ic.Role, ic.WorkerID = r, names[i]
		if mod != nil {
			mod(i, &ic)
		}
		cfg.Instance = append(cfg.Instance, ic)
	}
	cfg.Instance = append(cfg.Instance, extra...)
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	f := &fleet{sim: sim}
	for _, ic := range cfg.Instance {
		f.ids = append(f.ids, ic.WorkerID)
	}
	return f
}

// fastInstance is a worker with short modelled times, generation 3, digest sha256:good.
func fastInstance() llmsim.InstanceConfig {
	ic := llmsim.DefaultInstance()
	ic.Listen = "127.0.0.1:0"
	ic.Generation, ic.Digest = 3, "sha256:good"
	ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(5*time.Millisecond), llmsim.Duration(time.Millisecond), 8
	ic.KVTransfer, ic.KVTransferPerToken = llmsim.Duration(time.Millisecond), 0
	return ic
}

// gatewayTOML is a model router whose alias "chat" runs phase "decode" on the fleet; extra
// goes into its distributed_serving table, sched into its scheduling table.
func (f *fleet) gatewayTOML(sched, extra string) string {
	var servers []string
	for _, a := range f.sim.Addrs() {
		servers = append(servers, fmt.Sprintf(`{ url = "http://%s" }`, a))
	}
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.fleet.load_balancer]
servers = [%s]
[services.fleet.workers]
observe_interval = "20ms"
observation_ttl = "2s"
api_key_env = %q
[models.chat.targets.t]
service = "fleet"
deployment_generation = 3
execution_config_digest = "sha256:good"
[models.chat.scheduling]
phase = "decode"
%s
[models.chat.scheduling.distributed_serving]
api_key_env = %q
%s
`, strings.Join(servers, ", "), workerKeyEnv, sched, workerKeyEnv, extra)
}

// startGateway runs a gateway on toml and returns it once a request has been served (the
// workers were observed).
func startGateway(t testing.TB, toml string) *gateway.Gateway {
	t.Helper()
	// Warnings and errors only: the tests read what the workers saw, not the gateway's log.
	return startGatewayLog(t, toml, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// startGatewayLog is startGateway logging to log.
func startGatewayLog(t testing.TB, toml string, log *slog.Logger) *gateway.Gateway {
	t.Helper()
	t.Setenv(workerKeyEnv, workerKey)
	cfg, err := config.LoadBytes("pd.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", log)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	waitObserved(t, g)
	return g
}

// waitObserved polls the admin API until every worker of the gateway has an observation.
func waitObserved(t testing.TB, g *gateway.Gateway) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + g.AdminAddr() + "/api/gateway/workers")
		require.NoError(t, err)
		var rows []struct {
			Kind string `json:"kind"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rows)
		resp.Body.Close()
		require.NoError(t, err)
		all := len(rows) > 0
		for _, r := range rows {
			all = all && r.Kind == "worker"
		}
		if all {
			return
		}
		require.True(t, time.Now().Before(deadline), "workers not observed within 10s")
		time.Sleep(10 * time.Millisecond) // polling for the condition, not asserting on time
	}
}

// chatBody is a streamed chat request for alias chat with the given user message.
func chatBody(msg string) string {
	return fmt.Sprintf(`{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, msg)
}

// stream sends body to the gateway and returns the status and the SSE data lines (the body
// of an answer other than 200).
func stream(t *testing.T, g *gateway.Gateway, body string) (int, []string) {
	t.Helper()
	return streamTo(t, g.Addr("web"), body)
}

// streamTo is stream to the entrypoint at addr.
func streamTo(t *testing.T, addr, body string) (int, []string) {
	t.Helper()
	status, data, err := streamErr(addr, body)
	require.NoError(t, err)
	return status, data
}

// streamErr is stream for goroutines other than the test's: it returns the failure.
func streamErr(addr, body string) (int, []string, error) {
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, []string{string(b)}, nil
	}
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	return resp.StatusCode, data, sc.Err()
}

// calls returns every protocol call of the fleet for execution id, by worker id.
func (f *fleet) calls(id string) map[string][]llmsim.Call {
	out := map[string][]llmsim.Call{}
	for i, w := range f.ids {
		for _, c := range f.sim.Calls(i) {
			if c.ExecutionID == id {
				out[w] = append(out[w], c)
			}
		}
	}
	return out
}

// executions returns the execution ids worker i got a call of kind for, in order.
func (f *fleet) executions(i int, kind string) []string {
	var ids []string
	for _, c := range f.sim.Calls(i) {
		if c.Call == kind {
			ids = append(ids, c.ExecutionID)
		}
	}
	return ids
}

// waitCall polls worker i's call log until a call of kind for execution id is there.
func (f *fleet) waitCall(t *testing.T, i int, kind, id string) llmsim.Call {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, c := range f.sim.Calls(i) {
			if c.Call == kind && (id == "" || c.ExecutionID == id) {
				return c
			}
		}
		require.True(t, time.Now().Before(deadline), "no %s call for %q on %s within 5s", kind, id, f.ids[i])
		time.Sleep(2 * time.Millisecond) // polling for the event, not asserting on time
	}
}

// promptRankedFirst returns a user message whose request ranks worker first among the
// workers ids for rendezvous (so that, all loads equal, the gateway picks it).
func promptRankedFirst(t *testing.T, first string, ids ...string) string {
	t.Helper()
	for n := 0; n < 1000; n++ {
		msg := fmt.Sprintf("hello %d", n)
		key := pd.RequestKey([]byte(chatBody(msg)))
		best, bestRank := "", uint64(0)
		for _, id := range append([]string{first}, ids...) {
			if r := pd.Rank(key, id); best == "" || r > bestRank {
				best, bestRank = id, r
			}
		}
		if best == first {
			return msg
		}
	}
	t.Fatal("no prompt ranks " + first + " first")
	return ""
}

// twoTargetsTOML returns a gateway config whose model chat has two P/D targets: first's fleet
// at priority 0, then second's at priority 1.
func twoTargetsTOML(first, second *fleet) string {
	servers := func(f *fleet) string {
		var s []string
		for _, a := range f.sim.Addrs() {
			s = append(s, `{ url = "http://`+a+`" }`)
		}
		return strings.Join(s, ", ")
	}
	return `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(` + "`/v1`" + `)"
models = true
[services.first.load_balancer]
servers = [` + servers(first) + `]
[services.first.workers]
observe_interval = "20ms"
api_key_env = "` + workerKeyEnv + `"
[services.second.load_balancer]
servers = [` + servers(second) + `]
[services.second.workers]
observe_interval = "20ms"
api_key_env = "` + workerKeyEnv + `"
[models.chat.targets.first]
service = "first"
[models.chat.targets.second]
service = "second"
priority = 1
[models.chat.scheduling]
phase = "decode"
[models.chat.scheduling.distributed_serving]
api_key_env = "` + workerKeyEnv + `"
`
}
