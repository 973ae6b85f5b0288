package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
)

const unitPath = "deploy/systemd/sluice.service"

// unitSettings returns the unit file's settings by "Section.Key", in order of appearance.
func unitSettings(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(rootPath(t, unitPath))
	require.NoError(t, err)
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "not a setting: %q", line)
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

// The settings sluice's behaviour depends on: how it is started, reloaded and stopped.
func TestSystemdUnitSettings(t *testing.T) {
	s := unitSettings(t)
	one := func(key string) string {
		t.Helper()
		require.Len(t, s[key], 1, key)
		return s[key][0]
	}
	require.Equal(t, "/usr/local/bin/sluice serve --config /etc/sluice/", one("Service.ExecStart"))
	require.Contains(t, s["Service.ExecReload"], "/bin/kill -HUP $MAINPID", "SIGHUP reloads")
	require.Equal(t, "SIGTERM", one("Service.KillSignal"), "SIGTERM drains")
	stop, err := time.ParseDuration(one("Service.TimeoutStopSec"))
	require.NoError(t, err)
	require.Greater(t, stop, config.DefaultDrainTimeout, "systemd must wait longer than a default drain before it kills")
	require.Equal(t, "on-failure", one("Service.Restart"))
	require.ElementsMatch(t, []string{"130", "143"}, strings.Fields(one("Service.SuccessExitStatus")),
		"a drain cut short by a second signal is a stop, not a failure to restart after")
	require.Equal(t, "yes", one("Service.DynamicUser"))
	require.Equal(t, "CAP_NET_BIND_SERVICE", one("Service.AmbientCapabilities"))
	require.Equal(t, one("Service.AmbientCapabilities"), one("Service.CapabilityBoundingSet"))
	require.ElementsMatch(t, []string{"AF_INET", "AF_INET6", "AF_UNIX"}, strings.Fields(one("Service.RestrictAddressFamilies")))
	for _, k := range []string{"NoNewPrivileges", "ProtectHome", "PrivateTmp", "MemoryDenyWriteExecute"} {
		require.Equal(t, "yes", one("Service."+k), k)
	}
	require.Equal(t, "strict", one("Service.ProtectSystem"))
	require.Contains(t, s["Service.SystemCallFilter"], "@system-service")
	require.Equal(t, "1048576", one("Service.LimitNOFILE"))
}

// systemd-analyze verify checks the unit as systemd would load it: its keys and values,
// and that the programs it runs exist. The unit names /usr/local/bin/sluice; a copy names
// a freshly built binary instead.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not on PATH (Debian: apt-get install systemd)")
	}
	bin := buildSluice(t)
	data, err := os.ReadFile(rootPath(t, unitPath))
	require.NoError(t, err)
	unit := filepath.Join(t.TempDir(), "sluice.service")
	require.NoError(t, os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/sluice", bin)), 0o644))

	stdout, stderr, code := run(t, nil, analyze, "verify", unit)
	// verify reports a bad line on stderr and still exits 0; it may also talk about the
	// machine it runs on, so what counts is what it says about this unit.
	for _, line := range strings.Split(stdout+stderr, "\n") {
		require.NotContains(t, line, "sluice.service", "systemd-analyze verify")
	}
	require.Equal(t, 0, code, "systemd-analyze verify:\n%s%s", stdout, stderr)
}
