package gateway_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// connCountingServer is a health endpoint (200 to every request) that counts the
// connections open to it, as the server sees them.
type connCountingServer struct {
	url    string
	open   atomic.Int64
	probed chan struct{}
}

func startConnCountingServer(t *testing.T) *connCountingServer {
	t.Helper()
	return startConnCountingServerAt(t, "127.0.0.1:0")
}

// startConnCountingServerAt is startConnCountingServer listening on addr ("host:port"): a
// port the gateway chose for a replica, say.
func startConnCountingServerAt(t *testing.T, addr string) *connCountingServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	return serveConnCounting(t, ln)
}

// serveConnCounting is startConnCountingServer serving ln.
func serveConnCounting(t *testing.T, ln net.Listener) *connCountingServer {
	s := &connCountingServer{url: "http://" + ln.Addr().String(), probed: make(chan struct{}, 4096)}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			select {
			case s.probed <- struct{}{}:
			default:
			}
			w.WriteHeader(200)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.open.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.open.Add(-1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// Reloads leave no health check connection behind: after many reloads that change nothing,
// the probed server has as many connections open from the gateway as before them, and a
// reload that drops the check closes its connection.
func TestReloadsReleaseHealthCheckConnections(t *testing.T) {
	s := startConnCountingServer(t)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	const hc = `health_check = { path = "/health", interval = "200ms" }`
	withCheck := healthConfig("gnet", hc, &healthServer{url: s.url})
	g, _ := startHealthGateway(t, path, withCheck)
	<-s.probed
	require.Eventually(t, func() bool { return s.open.Load() == 1 }, 5*time.Second, time.Millisecond, "one probe connection")

	const reloads = 30
	for range reloads {
		require.NoError(t, g.Reload())
		<-s.probed // the new checker's first probe, at once
	}
	require.Eventually(t, func() bool { return s.open.Load() <= 1 }, 5*time.Second, 10*time.Millisecond,
		"connections open after %d reloads: %d", reloads, s.open.Load())

	require.NoError(t, os.WriteFile(path, []byte(healthConfig("gnet", "", &healthServer{url: s.url})), 0o644))
	require.NoError(t, g.Reload())
	require.Eventually(t, func() bool { return s.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond,
		"a dropped check's connection stays open: %d", s.open.Load())
}

// A reload that replaces a checked service's server closes the probe connection to the old
// server at once, as one that drops the check does: the new checker probes other servers, so
// it does not take over the old checker's client, whose idle connection would otherwise stay
// open until the client's idle timeout (90 s).
func TestReloadThatReplacesAServerReleasesItsProbeConnection(t *testing.T) {
	old, cur := startConnCountingServer(t), startConnCountingServer(t)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	const hc = `health_check = { path = "/health", interval = "200ms" }`
	g, _ := startHealthGateway(t, path, healthConfig("gnet", hc, &healthServer{url: old.url}))
	<-old.probed
	require.Eventually(t, func() bool { return old.open.Load() == 1 }, 5*time.Second, time.Millisecond, "one probe connection")

	require.NoError(t, os.WriteFile(path, []byte(healthConfig("gnet", hc, &healthServer{url: cur.url})), 0o644))
	require.NoError(t, g.Reload())
	<-cur.probed
	require.Eventually(t, func() bool { return old.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond,
		"the replaced server's probe connection stays open: %d", old.open.Load())
}
