package gateway_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// GET /api/gateway/routes says which routers are model routers: they name no service, the
// body's "model" chooses one (their metrics carry service="models").
func TestAdminRoutesShowModelRouters(t *testing.T) {
	_, _, admin := startConfigGateway(t, `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[routers.plain]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }]
[models.m.targets.t]
service = "up"
`)
	st, body := adminGet(t, admin+"/api/gateway/routes")
	require.Equal(t, 200, st, body)
	var routes []map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &routes))
	require.Len(t, routes, 2)
	require.Equal(t, "openai", routes[0]["name"])
	require.Equal(t, true, routes[0]["models"], body)
	require.Equal(t, "plain", routes[1]["name"])
	require.NotContains(t, routes[1], "models", "a router with a service is not a model router")
	require.Equal(t, "up", routes[1]["service"])
}

// Go's profiling handlers are served with SLUICE_PPROF=1 only, and, like every endpoint but
// reload, to GET and HEAD only: another method gets the admin API's 405 with Allow.
func TestAdminServesProfilingOnlyWhenAskedFor(t *testing.T) {
	const toml = "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"127.0.0.1:0\"\n"
	for _, on := range []bool{false, true} {
		if on {
			t.Setenv("SLUICE_PPROF", "1")
		}
		_, _, admin := startConfigGateway(t, toml)
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/trace?seconds=0"} {
			a := adminDo(t, "GET", admin+path, nil)
			if !on {
				requireAdminError(t, a, 404, "not_found")
				continue
			}
			require.Equal(t, 200, a.status, "%s: %s", path, a.body)
		}
		if on {
			a := adminDo(t, "POST", admin+"/debug/pprof/", map[string]string{"Content-Type": "application/json"})
			requireAdminError(t, a, 405, "method_not_allowed")
			require.Equal(t, "GET, HEAD", a.header.Get("Allow"))
		}
	}
}
