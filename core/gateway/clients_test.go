package gateway_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
)

// startSimulator runs one llmsim instance on a free loopback port with fast timings.
func startSimulator(t testing.TB) string {
	t.Helper()
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(20 * time.Millisecond)
	cfg.Defaults.ITL = llmsim.Duration(2 * time.Millisecond)
	cfg.Defaults.Tokens = 16
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f.Addrs()[0]
}

// The official OpenAI SDKs (Node and Go) run chat completions, streaming and not, through
// both engines against the simulator.
func TestOpenAISDKsThroughBothEngines(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, sim, "")
			base := "http://" + addr + "/v1"
			testenv.RunOpenAINodeCheck(t, base, "sim-model")
			testenv.RunOpenAIGoCheck(t, base, "sim-model")
		})
	}
}

// A real inference engine (llama.cpp through node-llama-cpp, on the fixture model) streams
// through the gateway to both SDKs.
func TestRealEngineStreamsThroughGateway(t *testing.T) {
	origin := testenv.StartLlamaServer(t)
	u, err := url.Parse(origin)
	require.NoError(t, err)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, u.Host, "")
			base := "http://" + addr + "/v1"
			testenv.RunOpenAIGoCheck(t, base, testenv.LlamaModel)
			testenv.RunOpenAINodeCheck(t, base, testenv.LlamaModel)
		})
	}
}
