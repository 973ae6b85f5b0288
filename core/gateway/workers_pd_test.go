package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// The workers of a prefill/decode fleet are listed as what they are, while a phase "decode"
// alias serves through them: each is judged for the role it reports, so the prefill and
// decode workers are eligible, for a target that binds nothing and for the alias's target.
// Only a worker that cannot take part is left out, with its reason: one without state
// transfer, one of another generation than the target's, one that serves whole requests
// (which an aggregated alias of the same service takes, and whose target leaves the prefill
// and decode workers out for their role).
func TestWorkersListingJudgesPDWorkersForTheirRole(t *testing.T) {
	const keyEnv, key = "SLUICE_TEST_PD_LIST_KEY", "pd-list-worker-key"
	t.Setenv(keyEnv, key)
	cfg := llmsim.Config{Seed: 3, APIKey: key}
	for _, w := range []struct {
		id   string
		role llmsim.Role
		gen  int64
	}{
		{"prefill", llmsim.RolePrefill, 3},
		{"decode", llmsim.RoleDecode, 3},
		{"oldprefill", llmsim.RolePrefill, 2},
		{"whole", llmsim.RoleAggregated, 3},
	} {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.WorkerID, ic.Role, ic.Generation = "127.0.0.1:0", w.id, w.role, w.gen
		ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(2*time.Millisecond), llmsim.Duration(time.Millisecond), 4
		ic.KVTransfer, ic.KVTransferPerToken = llmsim.Duration(time.Millisecond), 0
		cfg.Instance = append(cfg.Instance, ic)
	}
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	nostate := startStub(t, func() string {
		return `{"worker_id":"nostate","role":"prefill","ready":true,"healthy":true,"active":0,"max_active":8,"waiting":0,"state_transfer":false,"deployment_generation":3,"epoch":0}`
	})
	var servers []string
	for _, a := range sim.Addrs() {
		servers = append(servers, fmt.Sprintf(`{ url = "http://%s" }`, a))
	}
	servers = append(servers, fmt.Sprintf(`{ url = %q }`, nostate.URL))

	toml := fmt.Sprintf(`
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
observation_ttl = "3s"
api_key_env = %q
[models.chat.targets.t]
service = "fleet"
deployment_generation = 3
[models.chat.scheduling]
phase = "decode"
[models.chat.scheduling.distributed_serving]
api_key_env = %q
[models.whole.targets.t]
service = "fleet"
`, strings.Join(servers, ", "), keyEnv, keyEnv)
	c, err := config.LoadBytes("pd-workers.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(c, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	admin := "http://" + g.AdminAddr()
	waitWorkers(t, admin, func(rows []workerRow) bool {
		for _, r := range rows {
			if r.Kind != "worker" {
				return false
			}
		}
		return true
	})

	for _, model := range []string{"chat", "whole"} {
		r := call(t, "POST", "http://"+g.Addr("web")+"/v1/chat/completions", "", fmt.Sprintf(chatBody, model))
		require.Equal(t, 200, r.status, "%s: %s", model, r.raw)
	}
	require.NotEmpty(t, sim.Calls(0), "the prefill worker served the chat request")
	require.NotEmpty(t, sim.Calls(1), "the decode worker served the chat request")

	reason := func(r workerRow) string {
		if r.Reason == nil {
			return ""
		}
		return *r.Reason
	}
	want := []struct {
		id                   string
		unbound, chat, whole string // "" eligible
	}{
		{"prefill", "", "", "wrong_role"},
		{"decode", "", "", "wrong_role"},
		{"oldprefill", "", "deployment_generation", "wrong_role"},
		{"whole", "", "wrong_role", ""},
		{"nostate", "state_transfer", "state_transfer", "wrong_role"},
	}
	rows := adminWorkers(t, admin)
	require.Len(t, rows, len(want))
	for i, w := range want {
		r := rows[i]
		require.Equal(t, w.id, r.Observation.WorkerID)
		require.Equal(t, w.unbound, reason(r), "%s for a target that binds nothing", w.id)
		require.Equal(t, w.unbound == "", r.Eligible, w.id)
		require.Equal(t, w.chat, r.verdict("chat"), "%s for the P/D target", w.id)
		require.Equal(t, w.whole, r.verdict("whole"), "%s for the aggregated target", w.id)
	}
}
