package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWorkersDefaultsAndKeys(t *testing.T) {
	c, err := LoadBytes("t.toml", withMinimal())
	require.NoError(t, err)
	require.Equal(t, Workers{Observe: true, ObserveInterval: DefaultObserveInterval, ObservationTTL: DefaultObservationTTL}, c.Services["s"].Workers)

	t.Setenv("SLUICE_TEST_POWER_KEY", "pk-secret")
	c, err = LoadBytes("t.toml", withMinimal(
		`[services.s.workers]`, `observe_interval = "250ms"`, `observation_ttl = "2s"`, `api_key_env = "SLUICE_TEST_POWER_KEY"`,
	))
	require.NoError(t, err)
	w := c.Services["s"].Workers
	require.Equal(t, 250*time.Millisecond, w.ObserveInterval)
	require.Equal(t, 2*time.Second, w.ObservationTTL)
	require.Equal(t, "pk-secret", w.APIKey)
	require.NotContains(t, c.Document()["services"].(map[string]any)["s"].(map[string]any)["workers"], "api_key", "the key itself is not a key of the document")
}

func TestWorkersConfigErrors(t *testing.T) {
	data := withMinimal(
		`[services.s.workers]`, `observe_interval = "1ms"`, `observation_ttl = "1ms"`, `api_key_env = "SLUICE_TEST_UNSET_POWER_KEY"`,
		`[services.off.load_balancer]`, `servers = [{ url = "http://127.0.0.1:9" }]`,
		`[services.off.workers]`, `observe = false`,
		`[models.m.targets.gen]`, `service = "off"`, `deployment_generation = 3`,
		`[models.m.targets.dig]`, `service = "off"`, `execution_config_digest = "sha256:x"`,
		`[models.m.targets.free]`, `service = "off"`,
	)
	_, err := LoadBytes("t.toml", data)
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`services.s.workers.observe_interval 1ms: want 10ms..1h0m0s`,
		`services.s.workers.observation_ttl 1ms: want more than observe_interval (1ms)`,
		`services.s.workers.api_key_env: environment variable SLUICE_TEST_UNSET_POWER_KEY is not set`,
		`models.m.targets.gen.deployment_generation needs worker observations, but services.off.workers.observe is false`,
		`models.m.targets.dig.execution_config_digest needs worker observations`,
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "targets.free", "a target that binds nothing may use an unobserved service")
}
