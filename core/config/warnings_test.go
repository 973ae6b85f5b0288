package config

import (
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
	// The same rule spaced otherwise, tried first by name at equal priority.
	require.Equal(t, []string{
		"w.toml:7:8: warning: routers.b serves on no entrypoint: on web, routers.a is tried first and matches every request it would (give routers.b a higher priority, or narrow the other rule)",
	}, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"Path(`/x`) && Method(`GET`)\"\nservice = \"up\"\n[routers.b]\nrule = \"Path(`/x`)&&Method(`GET`)\"\nservice = \"up\"\n"+warnServices))

	// Reached on one entrypoint of two: no warning.
	require.Empty(t, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[entrypoints.api]\naddress = \":2\"\n"+
		"[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\npriority = 99\nentrypoints = [\"web\"]\n"+
		"[routers.v1]\nrule = \"PathPrefix(`/v1`)\"\nservice = \"up\"\n"+warnServices))

	// A longer rule is tried before the catch-all, whatever the names: no warning.
	require.Empty(t, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[routers.b]\nrule = \"PathPrefix(`/v1`)\"\nservice = \"up\"\n"+warnServices))

	// A backquoted argument keeps its spaces: these rules differ.
	require.Empty(t, warningLines(t, "[entrypoints.web]\naddress = \":1\"\n[routers.a]\nrule = \"Header(`X`, `a b`)\"\nservice = \"up\"\n[routers.b]\nrule = \"Header(`X`, `ab`)\"\nservice = \"up\"\n"+warnServices))
}
