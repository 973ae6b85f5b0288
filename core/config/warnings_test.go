package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func warningLines(t *testing.T, data string) []string {
	t.Helper()
	c, err := LoadBytes("w.toml", []byte(data))
	require.NoError(t, err)
	var out []string
	for _, w := range c.Warnings() {
		out = append(out, w.String())
	}
	return out
}

const warnServices = "[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"

// A router is warned about only when no entrypoint of its own lets a request reach it.
func TestWarningsShadowedRouters(t *testing.T) {
	// The same rule spaced otherwise: the longer spelling is tried first (priority 0 is the
	// length of the rule as written).
	require.Equal(t, []string{
		"w.toml:7:8: warning: routers.b serves on no entrypoint: on web, routers.a (priority 27, the length of its rule) is tried first and matches every request it would (routers.b has priority 25, the length of its rule: give it a priority above 27, or narrow the other rule)",
	}, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"Path(`/x`) && Method(`GET`)\"\nservice = \"up\"\n[routers.b]\nrule = \"Path(`/x`)&&Method(`GET`)\"\nservice = \"up\"\n"+warnServices))

	// A priority that seems high (5) but is below a catch-all rule's length (15): the warning
	// gives both numbers, and the one to pass.
	require.Equal(t, []string{
		"w.toml:7:8: warning: routers.x serves on no entrypoint: on web, routers.all (priority 15, the length of its rule) is tried first and matches every request it would (routers.x has priority 5: give it a priority above 15, or narrow the other rule)",
	}, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[routers.x]\nrule = \"Path(`/x`)\"\nservice = \"up\"\npriority = 5\n"+warnServices))

	// The same rule at the same priority: the name decides.
	require.Equal(t, []string{
		"w.toml:8:8: warning: routers.b serves on no entrypoint: on web, routers.a (priority 10) is tried first, its name sorting first at equal priority, and matches every request it would (routers.b has priority 10: give it a priority above 10, or narrow the other rule)",
	}, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"Path(`/x`)\"\nservice = \"up\"\npriority = 10\n[routers.b]\nrule = \"Path(`/x`)\"\nservice = \"up\"\npriority = 10\n"+warnServices))

	// Of several routers tried first, the one of the highest priority is named: passing a
	// lower one would not be enough.
	require.Equal(t, []string{
		"w.toml:12:8: warning: routers.x serves on no entrypoint: on web, routers.dup (priority 30) is tried first and matches every request it would (routers.x has priority 10: give it a priority above 30, or narrow the other rule)",
	}, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\npriority = 20\n"+
		"[routers.dup]\nrule = \"Path(`/x`)\"\nservice = \"up\"\npriority = 30\n[routers.x]\nrule = \"Path(`/x`)\"\nservice = \"up\"\npriority = 10\n"+warnServices))

	// Reached on one entrypoint of two: no warning.
	require.Empty(t, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[entrypoints.api]\naddress = \":2\"\n"+
		"[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\npriority = 99\nentrypoints = [\"web\"]\n"+
		"[routers.v1]\nrule = \"PathPrefix(`/v1`)\"\nservice = \"up\"\n"+warnServices))

	// A longer rule is tried before the catch-all, whatever the names: no warning.
	require.Empty(t, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[routers.b]\nrule = \"PathPrefix(`/v1`)\"\nservice = \"up\"\n"+warnServices))

	// A backquoted argument keeps its spaces: these rules differ.
	require.Empty(t, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"Header(`X`, `a b`)\"\nservice = \"up\"\n[routers.b]\nrule = \"Header(`X`, `ab`)\"\nservice = \"up\"\n"+warnServices))
}

// A service scaled by the exec executor whose program is not found starts no replica: its
// requests would wait in the buffer until they time out, with the reason only in the log.
// validate warns at the program's position; a program found (on PATH, or at its path) is no
// warning.
func TestWarningsExecCommandNotFound(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "model-server")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", dir)
	scaled := func(command string) string {
		return "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"PathPrefix(`/`)\"\nservice = \"llm\"\n" +
			"[services.llm.scaling]\nexecutor = \"exec\"\n[services.llm.scaling.exec]\ncommand = [" + command + ", \"--port\", \"{port}\"]\n"
	}
	require.Equal(t, []string{
		`w.toml:9:12: warning: services.llm.scaling.exec.command[0] "llmsim": executable file not found in $PATH: no replica of the service can start (install it, give its absolute path, or put its directory on sluice's PATH)`,
	}, warningLines(t, scaled(`"llmsim"`)))
	missing := filepath.Join(dir, "missing")
	require.Equal(t, []string{
		fmt.Sprintf(`w.toml:9:12: warning: services.llm.scaling.exec.command[0] %q: stat %s: no such file or directory: no replica of the service can start (install it, give its absolute path, or put its directory on sluice's PATH)`, missing, missing),
	}, warningLines(t, scaled(strconv.Quote(missing))))
	require.Empty(t, warningLines(t, scaled(`"model-server"`)))
	require.Empty(t, warningLines(t, scaled(strconv.Quote(prog))))

	// A program named by the environment is shown as written, in the reason too.
	t.Setenv("SLUICE_TEST_MODEL_SERVER", filepath.Join(dir, "private-server"))
	require.Equal(t, []string{
		`w.toml:9:12: warning: services.llm.scaling.exec.command[0] "${SLUICE_TEST_MODEL_SERVER}": stat ${SLUICE_TEST_MODEL_SERVER}: no such file or directory: no replica of the service can start (install it, give its absolute path, or put its directory on sluice's PATH)`,
	}, warningLines(t, scaled(`"${SLUICE_TEST_MODEL_SERVER}"`)))
}
