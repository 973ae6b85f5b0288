package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// policyReloadConfig is the scaled service of the policy reload tests: one replica slot, the
// replicas ready startup after their start, and the policy keys in policy.
func policyReloadConfig(t *testing.T, startup, policy string) string {
	return scaledConfig(t, startup, "max_replicas = 1\ncontainer_concurrency = 2\n"+policy)
}

// A reload that changes only policy keys (buffer_timeout, scale_down_delay) keeps the
// replica: a stream it serves ends with [DONE], and the same process serves after.
func TestPolicyReloadKeepsReplicasAndTheirStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := policyReloadConfig(t, "0s", `
min_replicas = 1
buffer_timeout = "30s"
scale_down_delay = "10s"
`)
	g, addr, admin := startFileGateway(t, path, base)
	before := waitScaling(t, admin, 10*time.Second, "min_replicas running", func(s scalingView) bool { return s.Ready == 1 })

	done := make(chan streamResult, 1)
	go func() { done <- slowStream(addr, "slow=1s") }()
	waitActive(t, admin, 1)

	changed := strings.NewReplacer(`buffer_timeout = "30s"`, `buffer_timeout = "20s"`, `scale_down_delay = "10s"`, `scale_down_delay = "5s"`).Replace(base)
	require.NotEqual(t, base, changed)
	require.NoError(t, os.WriteFile(path, []byte(changed), 0o644))
	require.NoError(t, g.Reload())
	select {
	case r := <-done:
		t.Fatalf("the stream ended before the reload took effect: the test proves nothing: %+v", r)
	default:
	}

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 200, r.status)
	require.True(t, strings.HasSuffix(r.body, "data: [DONE]\n\n"), "the stream finished: %q", r.body)
	after := scalingOf(t, admin)
	require.Equal(t, 1, after.Ready)
	require.Len(t, after.Replicas, 1)
	require.Equal(t, before.Replicas[0].PID, after.Replicas[0].PID, "the same replica process")
	require.Equal(t, before.Replicas[0].URL, after.Replicas[0].URL, "on the same port")
}

// A policy key changed by a reload takes effect on the scaler that keeps running: a larger
// min_replicas starts a replica with no request, shown by the admin API and the metrics; a
// shorter buffer_timeout is the deadline of a request queued after the reload.
func TestPolicyReloadTakesEffect(t *testing.T) {
	t.Run("min_replicas", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.toml")
		base := policyReloadConfig(t, "0s", "min_replicas = 0\n")
		g, _, admin := startFileGateway(t, path, base)
		s := scalingOf(t, admin)
		require.Equal(t, 0, s.Desired+s.Ready+s.Starting, "nothing runs before the reload")

		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(base, "min_replicas = 0", "min_replicas = 1", 1)), 0o644))
		require.NoError(t, g.Reload())
		s = waitScaling(t, admin, 10*time.Second, "min_replicas running", func(s scalingView) bool { return s.Ready == 1 })
		require.Equal(t, 1, s.Desired)
		require.Equal(t, 1, s.Target)
		waitMetric(t, admin+"/metrics", `sluice_scaling_replicas{service="llm",state="ready"}`, func(v float64) bool { return v == 1 })
		waitMetric(t, admin+"/metrics", `sluice_scaling_desired_replicas{service="llm"}`, func(v float64) bool { return v == 1 })
	})
	t.Run("buffer_timeout", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.toml")
		base := policyReloadConfig(t, "30s", `buffer_timeout = "60s"`+"\n")
		g, addr, admin := startFileGateway(t, path, base)
		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(base, `buffer_timeout = "60s"`, `buffer_timeout = "300ms"`, 1)), 0o644))
		require.NoError(t, g.Reload())

		start := time.Now()
		r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
		require.Equal(t, 504, r.status, r.raw)
		require.Equal(t, "cold_start_timeout", errField(r, "code"))
		require.Less(t, time.Since(start), 10*time.Second, "the new buffer_timeout, not the old one")
		waitScaling(t, admin, 5*time.Second, "the queue emptied", func(s scalingView) bool { return s.Queued == 0 })
	})
}

// A reload that changes what defines the replicas (here the exec command) replaces them: a new
// process serves.
func TestReplicaReloadReplacesReplicas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := policyReloadConfig(t, "0s", "min_replicas = 1\n")
	g, addr, admin := startFileGateway(t, path, base)
	before := waitScaling(t, admin, 10*time.Second, "min_replicas running", func(s scalingView) bool { return s.Ready == 1 })

	changed := strings.Replace(base, `"--tokens", "4"`, `"--tokens", "5"`, 1)
	require.NotEqual(t, base, changed)
	require.NoError(t, os.WriteFile(path, []byte(changed), 0o644))
	require.NoError(t, g.Reload())
	waitScaling(t, admin, 10*time.Second, "a new replica ready", func(s scalingView) bool {
		return s.Ready == 1 && len(s.Replicas) == 1 && s.Replicas[0].PID != 0 && s.Replicas[0].PID != before.Replicas[0].PID
	})
	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	require.Equal(t, 200, r.status, r.raw)
}
