package gateway_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The reload log line names what the reload added, removed and changed.
func TestReloadLogSaysWhatChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(body string) {
		require.NoError(t, os.WriteFile(path, []byte("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"\"\n"+body), 0o644))
	}
	router := func(name, rule, svc string) string {
		return fmt.Sprintf("[routers.%s]\nrule = \"%s\"\nservice = %q\n", name, rule, svc)
	}
	service := func(name, extra string) string {
		return fmt.Sprintf("[services.%s.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n%s\n", name, extra)
	}
	write(router("a", "PathPrefix(`/a`)", "up") + router("b", "PathPrefix(`/b`)", "gone") + service("up", "") + service("gone", "") + service("same", ""))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	var logs syncBuffer
	g, err := gateway.New(cfg, path, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Drain(t.Context()) })

	write(router("a", "PathPrefix(`/a2`)", "up") + router("c", "PathPrefix(`/c`)", "new") +
		service("up", `dial_timeout = "1s"`) + service("new", "") + service("same", "") +
		"[models.m.targets.t]\nservice = \"up\"\n")
	require.NoError(t, g.Reload())
	require.Contains(t, logs.String(), `msg="configuration reloaded" generation=2 added="routers.c, services.new, models.m" removed="routers.b, services.gone" changed="routers.a, services.up"`+"\n")

	// The same entries spelt otherwise (1000ms for 1s) are no change.
	require.NoError(t, os.WriteFile(path, bytes.Replace(mustRead(t, path), []byte(`"1s"`), []byte(`"1000ms"`), 1), 0o644))
	require.NoError(t, g.Reload())
	require.Contains(t, logs.String(), `msg="configuration reloaded" generation=3 changes=none`+"\n")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
