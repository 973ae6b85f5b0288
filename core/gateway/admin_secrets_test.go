package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// secretsTOML writes a credential in every place the configuration can hold one, each as a
// distinct "s3kr1t-…" string, literally or through the environment; the keys they are given under
// must still be listed.
const secretsTOML = `
[entrypoints.web]
address = "127.0.0.1:0"

[admin]
address = "127.0.0.1:0"
token_env = "SEC_ADMIN_TOKEN"

[routers.api]
rule = "PathPrefix(` + "`/v1`" + `) && Header(` + "`X-Api-Key`, `s3kr1t-rule-header`" + `) && Query(` + "`api_key`, `s3kr1t-rule-query`" + `)"
service = "llm"
middlewares = ["upstream-auth", "sso"]

[routers.cold]
rule = "PathPrefix(` + "`/cold`" + `)"
service = "cold"

[services.llm.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }]

[services.cold.scaling]
executor = "exec"
[services.cold.scaling.exec]
command = ["/opt/llm/server", "--port", "{port}", "--api-key", "s3kr1t-cmd-apikey", "--hf-token=s3kr1t-cmd-hftoken"]
env = ["HF_TOKEN=s3kr1t-env-hftoken", "OPENAI_API_KEY=${SEC_ENV_KEY}", "CUDA_VISIBLE_DEVICES=0"]

[middlewares.upstream-auth]
type = "headers"
request_set = { Authorization = "Bearer s3kr1t-authorization", Proxy-Authorization = "Basic s3kr1t-proxy-auth", Cookie = "sid=s3kr1t-cookie", X-Api-Key = "s3kr1t-x-api-key", Api-Key = "s3kr1t-api-key", X-Auth-Token = "s3kr1t-auth-token", X-Upstream = "Bearer s3kr1t-bearer-any-name", X-Env-Secret = "${SEC_ENV_SECRET}", X-Tenant = "acme" }
request_remove = ["Cookie"]
response_set = { Set-Cookie = "session=s3kr1t-set-cookie", Cache-Control = "no-store" }

[middlewares.sso]
type = "jwt"
value = "s3kr1t-jwt-secret-of-at-least-32-bytes-long"
issuer = "https://issuer.example"
`

// GET /api/gateway/config shows no credential of the configuration, however it was given:
// a literal one is redacted, its key still listed, and one read from the environment is shown
// as its ${NAME} reference; the other values stay as written. GET /api/gateway/routes shows
// the rule without its secrets too.
func TestAdminConfigShowsNoCredential(t *testing.T) {
	t.Setenv("SEC_ADMIN_TOKEN", "s3kr1t-admin-token")
	t.Setenv("SEC_ENV_KEY", "s3kr1t-env-openai-key")
	t.Setenv("SEC_ENV_SECRET", "s3kr1t-env-header-secret")
	_, admin, _ := runAdmin(t, secretsTOML)
	auth := map[string]string{"Authorization": "Bearer s3kr1t-admin-token"}

	a := adminDo(t, "GET", admin+"/api/gateway/config", auth)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	requireNoLiteralSecret(t, "/api/gateway/config", a.body)

	var answer struct {
		Config map[string]any `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &answer))
	at := func(path ...string) any {
		var v any = answer.Config
		for _, k := range path {
			m, ok := v.(map[string]any)
			require.True(t, ok, "%v: not a table at %s in %s", path, k, a.body)
			v, ok = m[k]
			require.True(t, ok, "%v: no key %s in %s", path, k, a.body)
		}
		return v
	}
	const r = "<redacted>"
	set := at("middlewares", "upstream-auth", "request_set")
	require.Equal(t, map[string]any{"Authorization": r, "Proxy-Authorization": r, "Cookie": r, "X-Api-Key": r, "Api-Key": r,
		"X-Auth-Token": r, "X-Upstream": r, "X-Env-Secret": "${SEC_ENV_SECRET}", "X-Tenant": "acme"}, set)
	require.Equal(t, []any{"Cookie"}, at("middlewares", "upstream-auth", "request_remove"))
	require.Equal(t, map[string]any{"Set-Cookie": r, "Cache-Control": "no-store"}, at("middlewares", "upstream-auth", "response_set"))
	require.Equal(t, r, at("middlewares", "sso", "value"))
	require.Equal(t, "https://issuer.example", at("middlewares", "sso", "issuer"))
	require.Equal(t, "PathPrefix(`/v1`) && Header(`X-Api-Key`, `<redacted>`) && Query(`api_key`, `<redacted>`)", at("routers", "api", "rule"))
	require.Equal(t, []any{"/opt/llm/server", "--port", "{port}", "--api-key", r, "--hf-token=" + r}, at("services", "cold", "scaling", "exec", "command"))
	require.Equal(t, []any{"HF_TOKEN=" + r, "OPENAI_API_KEY=${SEC_ENV_KEY}", "CUDA_VISIBLE_DEVICES=0"}, at("services", "cold", "scaling", "exec", "env"))
	require.Equal(t, "SEC_ADMIN_TOKEN", at("admin", "token_env"), "the variable's name is no secret")

	a = adminDo(t, "GET", admin+"/api/gateway/routes", auth)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	requireNoLiteralSecret(t, "/api/gateway/routes", a.body)
	require.Contains(t, a.body, "Header(`X-Api-Key`, `<redacted>`)")
}

// requireNoLiteralSecret fails when body holds a "s3kr1t-…" secret of secretsTOML, in any case.
func requireNoLiteralSecret(t *testing.T, what, body string) {
	t.Helper()
	if i := strings.Index(strings.ToLower(body), "s3kr1t"); i >= 0 {
		from, to := max(0, i-80), min(len(body), i+80)
		require.Fail(t, fmt.Sprintf("%s shows a secret", what), "…%s…\n\nwhole body:\n%s", body[from:to], body)
	}
}
