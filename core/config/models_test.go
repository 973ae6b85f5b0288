package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modelsTOML = `
[entrypoints.web]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(` + "`/v1`" + `)"
models = true
middlewares = ["keys"]
[middlewares.keys]
type = "api-key"
[services.pool.load_balancer]
servers = [{ url = "http://127.0.0.1:8000" }]
[models.chat-model]
model_id = "55555555-5555-4555-8555-555555555555"
[models.chat-model.targets.primary]
service = "pool"
upstream_model = "internal/model-v1"
weight = 100
[models.chat-model.scheduling]
max_concurrent_requests = 32
max_queued_requests = 64
queue_timeout_ms = 500
[consumers.team-a]
api_key_sha256 = ["%s"]
api_key_env = "SLUICE_TEST_TEAM_KEY"
environment = "prod"
generation = 1
[consumers.team-a.grants]
models = ["chat-model"]
endpoints = ["/v1/chat/completions", "/v1/models"]
`

func TestModelGatewayConfigLoads(t *testing.T) {
	t.Setenv("SLUICE_TEST_TEAM_KEY", "sk-env")
	sum := sha256.Sum256([]byte("sk-file"))
	c, err := LoadBytes("t.toml", []byte(strings.Replace(modelsTOML, "%s", hex.EncodeToString(sum[:]), 1)))
	require.NoError(t, err)
	require.True(t, c.Routers["openai"].Models)
	m := c.Models["chat-model"]
	require.Equal(t, "internal/model-v1", m.Targets["primary"].UpstreamModel)
	require.Equal(t, 100, m.Targets["primary"].Weight)
	require.Equal(t, Scheduling{Phase: PhaseAggregated, MaxConcurrentRequests: 32, MaxQueuedRequests: 64, QueueTimeoutMs: 500, PrefixPrefillUsPerToken: DefaultPrefixPrefillUsPerToken}, m.Scheduling)
	cs := c.Consumers["team-a"]
	require.Equal(t, [][32]byte{sum, sha256.Sum256([]byte("sk-env"))}, cs.KeyDigests)
	require.Equal(t, "prod", cs.Environment)
}

func TestModelGatewayConfigErrors(t *testing.T) {
	data := withMinimal(
		`[routers.m]`, "rule = \"PathPrefix(`/v1`)\"", `models = true`, `service = "s"`,
		`[models.bad]`,
		`[models.m2.targets.t]`, `service = "nope"`, `weight = 0`,
		`[models.m2.scheduling]`, `max_queued_requests = 5`, `queue_timeout_ms = 0`, `prefix_affinity_headers = true`, `prefix_prefill_us_per_token = 0`,
		`[consumers.c]`, `api_key_sha256 = ["sk-live-123"]`, `api_key_env = "SLUICE_TEST_UNSET_KEY"`,
		`[consumers.c.grants]`, `models = ["m3"]`, `endpoints = ["/v1/audio"]`,
		`[consumers.d]`,
	)
	_, err := LoadBytes("t.toml", data)
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`routers.m: models = true and service are exclusive`,
		`models.bad: a model needs at least one target`,
		`models.m2.targets.t.service: no service named "nope"`,
		`models.m2.targets.t.weight 0: want 1..1000000`,
		`models.m2.scheduling.max_queued_requests needs max_concurrent_requests`,
		`models.m2.scheduling.queue_timeout_ms 0: want 1..600000 (ms)`,
		`models.m2.scheduling.prefix_affinity_headers needs prefix_affinity = true`,
		`models.m2.scheduling.prefix_prefill_us_per_token 0: want 1..100000 (µs)`,
		`consumers.c.api_key_sha256[0]: want 64 hex digits`,
		`consumers.c.api_key_env: environment variable SLUICE_TEST_UNSET_KEY is not set`,
		`consumers.c.grants.models: no model alias "m3"`,
		`consumers.c.grants.endpoints: "/v1/audio" is not a model endpoint`,
		`consumers.d: a consumer needs a credential`,
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "sk-live-123", "a key written by mistake is never echoed")
}

func TestOneKeyIdentifiesOneConsumer(t *testing.T) {
	t.Setenv("SLUICE_TEST_SHARED_KEY", "sk-shared")
	sum := sha256.Sum256([]byte("sk-shared"))
	data := withMinimal(
		`[consumers.a]`, `api_key_sha256 = ["`+hex.EncodeToString(sum[:])+`"]`,
		`[consumers.b]`, `api_key_env = "SLUICE_TEST_SHARED_KEY"`,
	)
	_, err := LoadBytes("t.toml", data)
	require.ErrorContains(t, err, "consumers.b: one of its keys is also a key of consumers.a")
	require.NotContains(t, err.Error(), "sk-shared")
}

// A grant's endpoint that misspells a model endpoint, or leaves out its "/v1", is answered with
// the endpoint it means; one that means none gets the list alone.
func TestGrantEndpointSuggestsTheOneMeant(t *testing.T) {
	for ep, want := range map[string]string{
		"/v1/chat/completion": ` (did you mean "/v1/chat/completions"?)`,
		"/V1/Models":          ` (did you mean "/v1/models"?)`,
		"/chat/completions":   ` (did you mean "/v1/chat/completions"?)`,
		"v1/messages":         ` (did you mean "/v1/messages"?)`,
		"embeddings":          ` (did you mean "/v1/embeddings"?)`,
		"/v1/audio":           ``,
	} {
		data := withMinimal(
			`[routers.m]`, "rule = \"PathPrefix(`/v1`)\"", `models = true`,
			`[models.m.targets.t]`, `service = "s"`,
			`[consumers.c]`, `api_key_sha256 = ["`+strings.Repeat("ab", 32)+`"]`,
			`[consumers.c.grants]`, `models = ["m"]`, `endpoints = ["`+ep+`"]`,
		)
		_, err := LoadBytes("t.toml", data)
		require.Error(t, err, ep)
		line := fmt.Sprintf(`consumers.c.grants.endpoints: %q is not a model endpoint (want "*" or one of %s)%s`, ep, quoteAll(Endpoints), want)
		require.Contains(t, err.Error(), line, ep)
		if want == "" {
			require.NotContains(t, err.Error(), "did you mean", ep)
		}
	}
}
