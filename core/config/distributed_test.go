package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pdModel is a phase "decode" alias over service s (lines 7.. of a withMinimal document).
func pdModel(extra ...string) []byte {
	return withMinimal(append([]string{
		`[models.chat.targets.t]`,                      // 7
		`service = "s"`,                                // 8
		`[models.chat.scheduling]`,                     // 9
		`phase = "decode"`,                             // 10
		`[models.chat.scheduling.distributed_serving]`, // 11
		`api_key_env = "SLUICE_TEST_PD_WORKERS_KEY"`,   // 12
	}, extra...)...)
}

func TestDistributedServingIsActivatedWithItsKey(t *testing.T) {
	t.Setenv("SLUICE_TEST_PD_WORKERS_KEY", "k-123")
	c, err := LoadBytes("t.toml", pdModel())
	require.NoError(t, err)
	ds := c.Models["chat"].Scheduling.DistributedServing
	require.Equal(t, "k-123", ds.APIKey)
	require.Equal(t, DefaultExecutionTimeoutMs, ds.ExecutionTimeoutMs)
	require.Equal(t, DefaultPrepareBatchSize, ds.PrepareBatchSize)
	require.NotContains(t, strings.Join(flatten(c.Document()), " "), "k-123", "the key is not part of the configuration document")
}

// flatten lists the string values of a configuration document.
func flatten(v any) []string {
	switch t := v.(type) {
	case map[string]any:
		var out []string
		for k, x := range t {
			out = append(append(out, k), flatten(x)...)
		}
		return out
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, flatten(x)...)
		}
		return out
	case string:
		return []string{t}
	}
	return nil
}

func TestDistributedServingRefusals(t *testing.T) {
	t.Setenv("SLUICE_TEST_PD_WORKERS_KEY", "k-123")
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"unset credential", withMinimal(`[models.chat.targets.t]`, `service = "s"`, `[models.chat.scheduling]`, `phase = "decode"`,
			`[models.chat.scheduling.distributed_serving]`, `api_key_env = "SLUICE_TEST_PD_UNSET"`),
			`t.toml:12:15: models.chat.scheduling.distributed_serving.api_key_env: environment variable SLUICE_TEST_PD_UNSET is not set or empty (it must hold the workers' bearer key)`},
		{"a key, not a name", withMinimal(`[models.chat.targets.t]`, `service = "s"`, `[models.chat.scheduling]`, `phase = "decode"`,
			`[models.chat.scheduling.distributed_serving]`, `api_key_env = "sk-live 123"`),
			`t.toml:12:15: models.chat.scheduling.distributed_serving.api_key_env "sk-live 123" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*); it names the variable, never holds the key`},
		{"no distributed_serving", withMinimal(`[models.chat.targets.t]`, `service = "s"`, `[models.chat.scheduling]`, `phase = "decode"`),
			`t.toml:10:9: models.chat.scheduling.phase = "decode" needs [models.chat.scheduling.distributed_serving] with api_key_env (the workers' key)`},
		{"timeout out of range", pdModel(`execution_timeout_ms = 0`),
			`t.toml:13:24: models.chat.scheduling.distributed_serving.execution_timeout_ms 0: want 1..600000 (ms)`},
		{"batch out of range", pdModel(`prepare_batch_size = 2000`),
			`t.toml:13:22: models.chat.scheduling.distributed_serving.prepare_batch_size 2000: want 1 (no batching) to 1024`},
		{"unobserved workers", pdModel(`[services.s.workers]`, `observe = false`),
			`t.toml:8:11: models.chat.targets.t: phase = "decode" needs worker observations (roles prefill and decode), but services.s.workers.observe is false`},
		{"cache affinity without decode", withMinimal(`[models.chat.targets.t]`, `service = "s"`, `[models.chat.scheduling]`, `prompt_cache_affinity = true`),
			`t.toml:10:25: models.chat.scheduling.prompt_cache_affinity chooses prefill workers: it needs phase = "decode" (use prefix_affinity for phase "aggregated")`},
		{"prefix affinity with decode", withMinimal(`[models.chat.targets.t]`, `service = "s"`, `[models.chat.scheduling]`, `phase = "decode"`, `prefix_affinity = true`,
			`[models.chat.scheduling.distributed_serving]`, `api_key_env = "SLUICE_TEST_PD_WORKERS_KEY"`),
			`t.toml:11:19: models.chat.scheduling.prefix_affinity chooses among the servers of aggregated targets: with phase = "decode" use prompt_cache_affinity`},
		{"distributed_serving on aggregated", withMinimal(`[models.chat.targets.t]`, `service = "s"`, `[models.chat.scheduling.distributed_serving]`, `api_key_env = "SLUICE_TEST_PD_WORKERS_KEY"`),
			`t.toml:9:25: models.chat.scheduling.distributed_serving is only for phase = "decode"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBytes("t.toml", tc.data)
			require.Error(t, err)
			require.Equal(t, tc.want, err.Error())
			require.NotContains(t, err.Error(), "k-123")
		})
	}
}
