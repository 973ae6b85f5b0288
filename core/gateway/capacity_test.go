package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// TestWorkersAtCapacityAnswer429: when every server a model's targets may use is left out
// because its worker reports max_active sequences running, the request is answered 429
// model_at_capacity with Retry-After (the model is busy), with prefix affinity too; a model
// whose servers are left out for other reasons (unhealthy) still gets 503 no_backend.
func TestWorkersAtCapacityAnswer429(t *testing.T) {
	ic := llmsim.DefaultInstance()
	ic.Listen, ic.WorkerID, ic.MaxRunning = "127.0.0.1:0", "full", 1
	ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(2*time.Millisecond), llmsim.Duration(time.Millisecond), 4
	sim, err := llmsim.Start(llmsim.Config{Seed: 1, Instance: []llmsim.InstanceConfig{ic}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	holdStream(t, sim.Addrs()[0])
	sick := startStub(t, func() string {
		return `{"worker_id":"sick","role":"aggregated","ready":true,"healthy":false,"active":0,"max_active":8,"waiting":0,"epoch":0}`
	})

	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.full.load_balancer]
servers = [{ url = "http://%s" }]
[services.full.workers]
observe_interval = "100ms"
[services.sick.load_balancer]
servers = [{ url = %q }]
[services.sick.workers]
observe_interval = "100ms"
[models.busy.targets.t]
service = "full"
[models.busy-affinity.targets.t]
service = "full"
[models.busy-affinity.scheduling]
prefix_affinity = true
[models.broken.targets.t]
service = "sick"
[models.busy-then-broken.targets.first]
service = "full"
[models.busy-then-broken.targets.second]
service = "sick"
priority = 1
`, engineTOML(engine), sim.Addrs()[0], sick.URL)
			g := runGateway(t, "capacity.toml", toml)
			base, admin := "http://"+g.Addr("web"), "http://"+g.AdminAddr()
			waitWorkers(t, admin, func(rows []workerRow) bool {
				return len(rows) == 2 && rows[0].Reason != nil && *rows[0].Reason == "at_capacity" &&
					rows[1].Reason != nil && *rows[1].Reason == "unhealthy"
			})

			chat := base + "/v1/chat/completions"
			for _, model := range []string{"busy", "busy-affinity", "busy-then-broken"} {
				r := call(t, "POST", chat, "", fmt.Sprintf(chatBody, model))
				require.Equal(t, 429, r.status, "%s: %s", model, r.raw)
				require.Equal(t, "model_at_capacity", errField(r, "code"), model)
				require.Equal(t, "1", r.header.Get("Retry-After"), model)
			}
			r := call(t, "POST", chat, "", fmt.Sprintf(chatBody, "broken"))
			require.Equal(t, 503, r.status, r.raw)
			require.Equal(t, "no_backend", errField(r, "code"))
		})
	}
}
