package gateway_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/gateway"
)

// probedScalingConfig is a gateway whose service "llm" scales from zero to one replica
// through the exec executor, probed every readyInterval; lb holds load_balancer keys. The
// replica's process only sleeps: the test serves its port itself, so that the listener
// outlives the process and sees every connection the gateway leaves open to it.
func probedScalingConfig(scaleDownDelay, readyInterval, lb string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = "gnet"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "exec"
min_replicas = 0
max_replicas = 1
scale_down_delay = %q
scale_to_zero_after = "1h"
ready_path = "/health"
ready_interval = %q
[services.llm.scaling.exec]
command = ["sh", "-c", "exec sleep 600", "replica-{port}"]
stop_timeout = "2s"
[services.llm.load_balancer]
%s
`, scaleDownDelay, readyInterval, lb)
}

// serveReplica sends one request through base, which starts the replica of the snapshot in
// force and goes to it once its probe passed, and serves the replica's port meanwhile: the
// scaler holds the port while no replica runs, and lets it go as it starts the replica.
func serveReplica(t *testing.T, g *gateway.Gateway, base string) *connCountingServer {
	t.Helper()
	u, err := url.Parse(g.Snapshot().Services["llm"].Backends[0].URL)
	require.NoError(t, err)
	answered := make(chan error, 1)
	go func() {
		resp, err := tryGet(base + "/v1/models")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	var ln net.Listener
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		ln, err = net.Listen("tcp", u.Host)
		assert.NoError(c, err)
	}, 10*time.Second, 5*time.Millisecond, "the replica's port, let go when the replica starts")
	s := serveConnCounting(t, ln)
	require.NoError(t, <-answered, "served by the replica once ready")
	require.Positive(t, s.open.Load(), "the gateway holds connections to the replica")
	return s
}

// waitAllClosed waits for s to see every connection to it closed, failing after 5 s with
// what and the number still open.
func waitAllClosed(t *testing.T, s *connCountingServer, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return s.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond, what)
}

// A scaler that a reload replaces, or one whose service no longer scales, leaves no readiness
// probe connection open to its replicas once it is closed: the replica's listener, still
// there after the replica's process stopped, sees every connection from the gateway closed.
// A replica is probed every 4 s (then 5 s), so an idle probe connection would stay open for
// 8 s (10 s), past the test's wait, unless the scaler closed it. Its first probe comes as it
// starts, before the test serves the port the scaler has just let go, and the second passes.
func TestReloadsReleaseReadinessProbeConnections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, base := startHealthGateway(t, path, probedScalingConfig("10s", "4s", ""))
	first := serveReplica(t, g, base)

	// A changed key that defines the replicas (ready_interval): a new scaler, on new ports; the
	// old one stops its replica.
	require.NoError(t, os.WriteFile(path, []byte(probedScalingConfig("10s", "5s", "")), 0o644))
	require.NoError(t, g.Reload())
	waitAllClosed(t, first, "connections open to the replaced scaler's replica")

	second := serveReplica(t, g, base)
	unscaled := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = "gnet"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.load_balancer]
servers = [{ url = %q }]
`, first.url)
	require.NoError(t, os.WriteFile(path, []byte(unscaled), 0o644))
	require.NoError(t, g.Reload())
	waitAllClosed(t, second, "connections open to the replica of a service that no longer scales")
}

// A replica that passed its readiness probe is probed no more, and its probe connection does
// not stay open while the replica runs: it closes within a second or two, as the requests'
// connections do with max_idle_conns = 0.
func TestReadyReplicaKeepsNoProbeConnection(t *testing.T) {
	g, base := startHealthGateway(t, "", probedScalingConfig("10s", "50ms", "max_idle_conns = 0"))
	s := serveReplica(t, g, base)
	waitAllClosed(t, s, "connections open to a ready replica")
	require.Equal(t, "ready", g.Snapshot().Scaler("llm").Status().Replicas[0].State, "the replica still runs")
}
