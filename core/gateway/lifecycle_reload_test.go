package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// startFileGateway runs a gateway on the configuration in file path (so that Reload reads it
// again) and returns it with its entrypoint address and admin base URL.
func startFileGateway(t *testing.T, path, toml string) (*gateway.Gateway, string, string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })
	return g, g.Addr("web"), "http://" + g.AdminAddr()
}

// A reload that leaves a scaled service's keys as they were keeps its replicas running (the
// same process answers), and one that leaves a rollout's keys as they were keeps the rollout
// where it was; a reload that changes the rollout starts it again.
func TestReloadKeepsReplicasAndRolloutsInProgress(t *testing.T) {
	v1, v2 := startRevisionSim(t, 0), startRevisionSim(t, 0)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := scaledConfig(t, "0s", `
min_replicas = 1
max_replicas = 1
`) + fmt.Sprintf(`
[routers.rev]
rule = "PathPrefix(`+"`/rev`"+`)"
service = "rev"
[services.rev]
revisions = [
  { name = "v1", traffic_percent = 90, servers = [{ url = "http://%s" }] },
  { name = "v2", traffic_percent = 10, servers = [{ url = "http://%s" }] },
]
[services.rev.rollout]
from = "v1"
to = "v2"
step_percent = 10
step_interval_secs = 3600
min_samples = 1
`, v1.Addrs()[0], v2.Addrs()[0])
	g, _, admin := startFileGateway(t, path, base)
	before := waitScaling(t, admin, 10*time.Second, "min_replicas running", func(s scalingView) bool { return s.Ready == 1 })

	// An unrelated change (a new router) keeps both.
	require.NoError(t, os.WriteFile(path, []byte(base+"\n[routers.other]\nrule = \"PathPrefix(`/other`)\"\nservice = \"rev\"\n"), 0o644))
	require.NoError(t, g.Reload())
	after := scalingOf(t, admin)
	require.Equal(t, 1, after.Ready)
	require.Equal(t, before.Replicas[0].PID, after.Replicas[0].PID, "the same replica process")

	// The rollout went on where it was: its step began before the reload.
	rolloutStart := func() string {
		st, body := adminGet(t, admin+"/api/gateway/services")
		require.Equal(t, 200, st)
		var all []struct {
			Name    string `json:"name"`
			Rollout *struct {
				StepStarted string `json:"step_started"`
			} `json:"rollout"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &all))
		for _, s := range all {
			if s.Name == "rev" {
				return s.Rollout.StepStarted
			}
		}
		t.Fatalf("no service rev: %s", body)
		return ""
	}
	started := rolloutStart()
	require.NoError(t, g.Reload())
	require.Equal(t, started, rolloutStart(), "the same rollout, in the same step")

	// A changed rollout starts over.
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(base, "step_percent = 10", "step_percent = 20", 1)), 0o644))
	require.NoError(t, g.Reload())
	require.NotEqual(t, started, rolloutStart(), "a new rollout")
}

// A streaming caller that leaves while it is held with keep-alives is taken out of the
// queue at once.
func TestHeldStreamThatLeavesIsDropped(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr, admin := startConfigGateway(t, scaledConfigEngine(t, engine, "30s", `
max_replicas = 1
keepalive_interval = "50ms"
`))
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			require.NoError(t, err)
			// The head and a keep-alive arrive while it waits.
			buf := make([]byte, 4096)
			got := ""
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			for !strings.Contains(got, "200 OK") || !strings.Contains(got, ": keep-alive") {
				n, err := c.Read(buf)
				require.NoError(t, err)
				got += string(buf[:n])
			}
			require.Equal(t, 1, scalingOf(t, admin).Queued)
			require.NoError(t, c.Close())
			waitScaling(t, admin, 5*time.Second, "the caller left the queue", func(s scalingView) bool { return s.Queued == 0 })
		})
	}
}

// A reload during a cold start loses none of the requests the buffer holds: they were queued
// under the snapshot the reload replaced, are admitted once a replica is ready, and go to that
// snapshot's backends, which follow the replicas' state as the new snapshot's do.
func TestReloadDuringAColdStartServesTheBufferedRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := scaledConfig(t, "2s", `
min_replicas = 0
max_replicas = 1
container_concurrency = 4
scale_to_zero_after = "30s"
buffer_timeout = "30s"
`)
	g, addr, admin := startFileGateway(t, path, base)
	const n = 4
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r apiResult
			r, errs[i] = tryCall("POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
			statuses[i] = r.status
		}()
	}
	waitScaling(t, admin, 10*time.Second, "the requests queued", func(s scalingView) bool { return s.Queued == n })
	// A change that leaves the scaling keys alone: the scaler, and its queue, carry over.
	require.NoError(t, os.WriteFile(path, []byte(base+"\n# touched\n"), 0o644))
	require.NoError(t, g.Reload())
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i, st := range statuses {
		require.Equal(t, 200, st, "request %d, queued before the reload", i)
	}
}

// The same through a model router, whose target's servers are observed: the requests queued
// before the reload are served by the replica once its observation says ready.
func TestReloadDuringAColdStartServesAModelRoutersBufferedRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := scaledModelConfig(t, "2s", `buffer_timeout = "30s"`)
	g, addr, admin := startFileGateway(t, path, base)
	const n = 4
	results := make([]apiResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = tryCall("POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
		}()
	}
	waitScaling(t, admin, 10*time.Second, "the requests queued", func(s scalingView) bool { return s.Queued == n })
	require.NoError(t, os.WriteFile(path, []byte(base+"\n# touched\n"), 0o644))
	require.NoError(t, g.Reload())
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i, r := range results {
		require.Equal(t, 200, r.status, "request %d, queued before the reload: %s", i, r.body)
	}
}

// A reload that Compile refuses leaves a scaled service as it was: the scaler, which the
// refused configuration would have taken over, still marks its replicas' readiness on the
// backends in force, also once buffer_timeout has passed, so that a cold start then serves the
// request.
func TestRefusedReloadLeavesTheScalerOnTheBackendsInForce(t *testing.T) {
	const bufferTimeout = 2 * time.Second
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := scaledConfig(t, "0s", fmt.Sprintf(`
min_replicas = 0
max_replicas = 1
scale_to_zero_after = "30s"
buffer_timeout = "%s"
`, bufferTimeout))
	g, addr, admin := startFileGateway(t, path, base)
	s := scalingOf(t, admin)
	require.Equal(t, 0, s.Ready+s.Starting, "nothing runs before the first request")

	// The scaling keys are as they were; the jwt middleware's key file, read after the
	// services are compiled, refuses the reload.
	refused := base + "\n[middlewares.sso]\ntype = \"jwt\"\npublic_key_file = \"/nonexistent/idp.pem\"\n"
	require.NoError(t, os.WriteFile(path, []byte(refused), 0o644))
	refusedAt := time.Now()
	require.ErrorContains(t, g.Reload(), "middlewares.sso.public_key_file")

	// Nothing announces the end of buffer_timeout after a reload (the scaler keeps no clock a
	// test can drive), so the test lets that time pass.
	time.Sleep(time.Until(refusedAt.Add(bufferTimeout + 200*time.Millisecond)))
	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, 1, scalingOf(t, admin).Ready)
}
