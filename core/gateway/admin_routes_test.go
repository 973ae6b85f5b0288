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
