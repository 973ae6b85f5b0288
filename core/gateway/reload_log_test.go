package gateway_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// A reload that changes what only a restart can apply ([admin]) is refused with an error that
// names the key, at its position in the new file.
func TestReloadNeedingRestartNamesTheKey(t *testing.T) {
	t.Setenv("SLUICE_TEST_RESTART_TOKEN", "one")
	path := filepath.Join(t.TempDir(), "sluice.toml")
	base := "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n%s\n[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n" +
		"[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n[admin]\naddress = \"\"\ntoken_env = \"SLUICE_TEST_RESTART_TOKEN\"\n%s"
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(base, "", "")), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, slog.New(slog.NewTextHandler(&syncBuffer{}, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Drain(t.Context()) })

	for _, c := range []struct {
		ep, admin, want string
	}{
		{"", "allowed_hosts = [\"gw.internal\"]\n", path + `:12:1: admin.allowed_hosts changed: restart sluice to change [admin] (a reload does not rebind the admin listener)`},
		{`drain_timeout = "5s"`, "allowed_hosts = [\"gw.internal\"]\n", path + `:12:1: admin.allowed_hosts changed: restart sluice to change [admin] (a reload does not rebind the admin listener)`},
	} {
		require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(base, c.ep, c.admin)), 0o644))
		err := g.Reload()
		require.ErrorIs(t, err, gateway.ErrRestartRequired)
		require.EqualError(t, err, c.want)
	}
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(base, "", "")), 0o644))
	t.Setenv("SLUICE_TEST_RESTART_TOKEN", "two")
	require.EqualError(t, g.Reload(), path+`:11:1: admin.token_env changed (its variable holds another token): restart sluice to change [admin] (a reload does not rebind the admin listener)`)
}

// A refused reload is logged the same way whatever asked for it: the admin API answers the
// caller and the log gets the refusal too, with every problem on the one line.
func TestReloadRefusalIsLoggedOnEveryPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(path, []byte(adminTOML("")), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	var logs syncBuffer
	g, err := gateway.New(cfg, path, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })

	bad := strings.Replace(adminTOML(""), `service = "up"`, `service = "missing"`, 1)
	bad = strings.Replace(bad, `[services.up.load_balancer]`, "[services.up.load_balancer]\nstrategy = \"nope\"", 1)
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o644))
	a := adminDo(t, "POST", "http://"+g.AdminAddr()+"/api/gateway/reload", map[string]string{"Content-Type": "application/json"})
	requireAdminError(t, a, 400, "reload_failed")
	line := `level=ERROR msg="reload refused; the running config stays in force" error="` + path + `:5:11: routers.api.service: no service named `
	require.Contains(t, logs.String(), line, "the admin path logs the refusal")
	refusal := logs.String()[strings.Index(logs.String(), line):]
	refusal = refusal[:strings.IndexByte(refusal, '\n')]
	require.Contains(t, refusal, "; "+path+":7:12: services.up.load_balancer.strategy", "both problems, joined on one line: %s", refusal)
	require.NotContains(t, refusal, `\n`)

	// The direct call (SIGHUP's path) logs the same line.
	require.Error(t, g.Reload())
	require.Equal(t, 2, strings.Count(logs.String(), refusal+"\n"), logs.String())
}

// Every top-level table's change is named, those that are not tables of named entries too.
func TestReloadLogNamesEveryTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(body string) {
		require.NoError(t, os.WriteFile(path, []byte("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"\"\n"+body), 0o644))
	}
	write("[providers.file]\ndebounce = \"1s\"\n")
	cfg, err := config.Load(path)
	require.NoError(t, err)
	var logs syncBuffer
	g, err := gateway.New(cfg, path, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Drain(t.Context()) })

	write("[providers.file]\ndebounce = \"2s\"\n")
	require.NoError(t, g.Reload())
	require.Contains(t, logs.String(), `msg="configuration reloaded" generation=2 changed=providers.file`+"\n")
	write("[providers.file]\ndebounce = \"2s\"\n[log]\naccess_log_sample = 0.5\n")
	require.NoError(t, g.Reload())
	require.Contains(t, logs.String(), `msg="configuration reloaded" generation=3 changed=log`+"\n")
}
