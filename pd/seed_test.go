package pd_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
)

// The shipped configs/seed-000-pd.toml serves an llmsim fleet as its comment says (two
// prefill and two decode workers of generation 3 and digest sha256:0123), moved to free
// ports, and the official OpenAI Node SDK streams a chat completion through it.
func TestSeedPDConfigServesTheNodeSDK(t *testing.T) {
	raw, err := os.ReadFile("../configs/seed-000-pd.toml")
	require.NoError(t, err)
	const key = "seed-test-workers-key"
	t.Setenv("ASTER_POWER_DISTRIBUTED_API_KEY", key)
	cfg := llmsim.Config{Seed: 1, APIKey: key}
	for _, r := range []llmsim.Role{llmsim.RolePrefill, llmsim.RolePrefill, llmsim.RoleDecode, llmsim.RoleDecode} {
		ic := fastInstance()
		ic.Role, ic.Digest = r, "sha256:0123"
		cfg.Instance = append(cfg.Instance, ic)
	}
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	toml := string(raw)
	for i, a := range sim.Addrs() {
		from := "127.0.0.1:" + itoa(8101+i)
		require.Contains(t, toml, from)
		toml = strings.Replace(toml, from, a, 1)
	}
	toml = strings.Replace(toml, `address = "127.0.0.1:8080"`, `address = "127.0.0.1:0"`, 1)
	toml = strings.Replace(toml, `address = "127.0.0.1:9090"`, `address = "127.0.0.1:0"`, 1)
	f := &fleet{sim: sim}
	for i := range sim.Addrs() {
		f.ids = append(f.ids, sim.Instance(i).WorkerID)
	}
	g := startGateway(t, toml)
	res := testenv.RunOpenAINodeCheck(t, "http://"+g.Addr("web")+"/v1", "chat-model", testenv.NodeAPIKey("sk-sluice-demo"))
	require.True(t, res.OK)
	decodes := 0
	for i := range f.ids {
		decodes += len(f.executions(i, "decode"))
		for _, c := range f.sim.Calls(i) {
			if c.Call == "prefill" {
				require.Less(t, i, 2, "prefills on the prefill workers")
			}
		}
	}
	require.Equal(t, 2, decodes, "the SDK's two chat completions (one streamed) each ran one decode")
}
