package gateway_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdminNeverShowsEnvValues: a value read from the environment may be a secret (an API key
// in a rule, a private host in a URL, a middleware option); no admin endpoint shows it, and
// each shows the ${NAME} reference as written instead.
func TestAdminNeverShowsEnvValues(t *testing.T) {
	secrets := map[string]string{
		"SLUICE_TEST_GATE_KEY":  "gk-5e1f0c9a77",
		"SLUICE_TEST_UP_HOST":   "upstream-7b2d.invalid",
		"SLUICE_TEST_MW_SECRET": "jwt-secret-6a0b-6a0b-6a0b-6a0b-6a0b",
		"SLUICE_TEST_MW_ISSUER": "issuer-3c4e",
		"SLUICE_TEST_MW_AUD":    "audience-9d8f21",
		"SLUICE_TEST_IDLE":      "4321ms",
		"SLUICE_TEST_BIND":      "localhost",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	_, admin, _ := runAdmin(t, `
[entrypoints.web]
address = "${SLUICE_TEST_BIND}:0"
idle_timeout = "${SLUICE_TEST_IDLE}"
[routers.api]
rule = "PathPrefix(`+"`/v1`"+`) && Header(`+"`X-Api-Key`, `${SLUICE_TEST_GATE_KEY}`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://${SLUICE_TEST_UP_HOST}:8000" }]
[middlewares.tenant]
type = "jwt"
value = "${SLUICE_TEST_MW_SECRET}"
issuer = "https://${SLUICE_TEST_MW_ISSUER}"
audience = ["${SLUICE_TEST_MW_AUD}"]
[admin]
address = "127.0.0.1:0"
`)
	outputs := map[string]string{}
	for _, path := range adminGETs {
		a := adminDo(t, "GET", admin+path, nil)
		require.Equal(t, 200, a.status, "%s: %s", path, a.body)
		outputs["GET "+path] = a.body
	}
	a := adminDo(t, "POST", admin+"/api/gateway/reload", map[string]string{"Content-Type": "application/json"})
	require.Equal(t, 200, a.status, "%s", a.body)
	outputs["POST /api/gateway/reload"] = a.body
	for what, body := range outputs {
		for name, v := range secrets {
			require.NotContains(t, body, v, "%s shows the value of %s", what, name)
		}
		require.NotContains(t, body, "4.321s", "%s shows the value of SLUICE_TEST_IDLE", what)
	}
	require.Contains(t, outputs["GET /api/gateway/routes"], "${SLUICE_TEST_GATE_KEY}")
	require.Contains(t, outputs["GET /api/gateway/services"], "http://${SLUICE_TEST_UP_HOST}:8000")
	require.Contains(t, outputs["GET /api/gateway/backends"], "http://${SLUICE_TEST_UP_HOST}:8000")
	require.Contains(t, outputs["GET /metrics"], `backend="http://${SLUICE_TEST_UP_HOST}:8000"`)
	require.Contains(t, outputs["GET /api/gateway/health"], "${SLUICE_TEST_BIND}:0")
	for _, ref := range []string{"${SLUICE_TEST_GATE_KEY}", "${SLUICE_TEST_UP_HOST}", "${SLUICE_TEST_MW_ISSUER}", "${SLUICE_TEST_MW_AUD}", "${SLUICE_TEST_IDLE}"} {
		require.Contains(t, outputs["GET /api/gateway/config"], ref)
	}
}

// TestAdminReloadErrorNeverShowsEnvValues: the errors of a failed reload quote the values
// they are about; a value read from the environment is quoted as written.
func TestAdminReloadErrorNeverShowsEnvValues(t *testing.T) {
	t.Setenv("SLUICE_TEST_BAD_URL", "ftp://leak-4a7e.invalid")
	t.Setenv("SLUICE_TEST_BAD_PATH", "leak-path-1f2e")
	t.Setenv("SLUICE_TEST_BAD_STRATEGY", "leak-strategy-8c")
	_, admin, path := runAdmin(t, adminTOML(""))
	bad := strings.Replace(adminTOML(""), "rule = \"PathPrefix(`/v1`)\"", "rule = \"Path(`${SLUICE_TEST_BAD_PATH}`)\"", 1)
	bad = strings.Replace(bad, `servers = [{ url = "http://127.0.0.1:1" }]`, `servers = [{ url = "${SLUICE_TEST_BAD_URL}" }]`+"\nstrategy = \"${SLUICE_TEST_BAD_STRATEGY}\"", 1)
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o644))
	a := adminDo(t, "POST", admin+"/api/gateway/reload", map[string]string{"Content-Type": "application/json"})
	requireAdminError(t, a, 400, "reload_failed")
	require.NotContains(t, a.body, "leak-")
	for _, ref := range []string{"${SLUICE_TEST_BAD_URL}", "${SLUICE_TEST_BAD_PATH}", "${SLUICE_TEST_BAD_STRATEGY}"} {
		require.Contains(t, a.body, ref)
	}
}
