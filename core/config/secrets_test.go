package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSecretName(t *testing.T) {
	for _, n := range []string{"value", "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key",
		"Api-Key", "Ocp-Apim-Subscription-Key", "X-Auth-Token", "X-Session-Id", "client_secret", "password", "PGPASSWORD",
		"db_passwd", "HF_TOKEN", "OPENAI_API_KEY", "--api-key", "-token", "private_key", "credentials", "tls_passphrase"} {
		require.True(t, SecretName(n), n)
	}
	for _, n := range []string{"token_env", "api_key_env", "key_file", "public_key_file", "token_file", "api_key_sha256",
		"X-Tenant", "Cache-Control", "issuer", "url", "header", "rule", "keepalive_interval", "pass_host_header",
		"CUDA_VISIBLE_DEVICES", "--port", "X-Values"} {
		require.False(t, SecretName(n), n)
	}
}

// RedactedDocument shows no credential wherever the configuration holds one, keeps its key,
// and shows what is no secret as Document does: a rate limit's key, the paths of key files,
// the names of variables, digests, numbers and booleans.
func TestRedactedDocumentHoldsNoCredential(t *testing.T) {
	t.Setenv("SLUICE_T_HDR", "s3kr1t-env")
	c := mustLoad(t, doc(
		`[entrypoints.web]`,
		`address = "127.0.0.1:8080"`,
		`[routers.r]`,
		"rule = \"Header(`Authorization`, \\\"Bearer s3kr1t-rule\\\") || HeaderRegexp(`X-Custom`, `Basic s3kr1t-scheme`) || Header(`X-Tenant`, `acme`) || Query(`token`)\"",
		`service = "s"`,
		`middlewares = ["limit", "hdrs"]`,
		`forward_credentials = true`,
		`[services.s.load_balancer]`,
		`servers = [{ url = "http://127.0.0.1:8000" }]`,
		`[services.s.load_balancer.health_check]`,
		`path = "/health?probe=1&token=s3kr1t-hc"`,
		`[services.k.scaling]`,
		`executor = "kube"`,
		`[services.k.scaling.kube]`,
		`deployment = "vllm"`,
		`service = "vllm"`,
		`url = "http://vllm.models.svc:8000"`,
		`api_server = "https://admin:s3kr1t-userinfo@10.0.0.1:6443"`,
		`token_file = "/var/run/secrets/token"`,
		`[middlewares.limit]`,
		`type = "rate-limit"`,
		`rate = 60`,
		`key = "header:X-Api-Key"`,
		`max_keys = 1024`,
		`[middlewares.hdrs]`,
		`type = "headers"`,
		`request_set = { Authorization = "Bearer ${SLUICE_T_HDR}", X-Goog-Api-Key = "s3kr1t-goog", X-Plain = "Token s3kr1t-token-scheme", X-Tenant = "acme", X-Empty-Token = "" }`,
		`[middlewares.idp]`,
		`type = "jwt"`,
		`jwks_url = "https://idp.example/jwks?tenant=a&access_token=s3kr1t-query"`,
		`forward_claims = { sub = "X-User-Id" }`,
	))
	plain, err := json.Marshal(c.Document())
	require.NoError(t, err)
	require.Contains(t, string(plain), "s3kr1t-goog", "Document shows the configuration as written")

	d := c.RedactedDocument()
	b, err := json.Marshal(d)
	require.NoError(t, err)
	require.NotContains(t, strings.ToLower(string(b)), "s3kr1t", "%s", b)

	r := d["routers"].(map[string]any)["r"].(map[string]any)
	require.Equal(t, "Header(`Authorization`, `<redacted>`) || HeaderRegexp(`X-Custom`, `<redacted>`) || Header(`X-Tenant`, `acme`) || Query(`token`)", r["rule"])
	require.Equal(t, true, r["forward_credentials"])
	mws := d["middlewares"].(map[string]any)
	require.Equal(t, map[string]any{"type": "rate-limit", "rate": int64(60), "key": "header:X-Api-Key", "max_keys": int64(1024)}, mws["limit"])
	require.Equal(t, map[string]any{"Authorization": "Bearer ${SLUICE_T_HDR}", "X-Goog-Api-Key": Redacted, "X-Plain": Redacted, "X-Tenant": "acme", "X-Empty-Token": ""},
		mws["hdrs"].(map[string]any)["request_set"])
	idp := mws["idp"].(map[string]any)
	require.Equal(t, "https://idp.example/jwks?tenant=a&access_token=<redacted>", idp["jwks_url"])
	require.Equal(t, map[string]any{"sub": "X-User-Id"}, idp["forward_claims"])
	hc := d["services"].(map[string]any)["s"].(map[string]any)["load_balancer"].(map[string]any)["health_check"].(map[string]any)
	require.Equal(t, "/health?probe=1&token=<redacted>", hc["path"])
	kube := d["services"].(map[string]any)["k"].(map[string]any)["scaling"].(map[string]any)["kube"].(map[string]any)
	require.Equal(t, "https://<redacted>@10.0.0.1:6443", kube["api_server"])
	require.Equal(t, "/var/run/secrets/token", kube["token_file"])
}

// A URL's credentials are masked after either query separator, and nothing else changes.
func TestRedactURLMasksEveryQueryCredential(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/chat?x=1&api_key=sk-1":                   "/v1/chat?x=1&api_key=<redacted>",
		"/v1/chat?x=1;api_key=sk-1":                   "/v1/chat?x=1;api_key=<redacted>",
		"/v1/chat?token=a;x=2&key=b&":                 "/v1/chat?token=<redacted>;x=2&key=<redacted>&",
		"/v1/chat?x=1;y=2":                            "/v1/chat?x=1;y=2",
		"https://u:pw@h.example/p?q=1;access_token=t": "https://<redacted>@h.example/p?q=1;access_token=<redacted>",
	} {
		require.Equal(t, want, RedactURL(in), in)
	}
}

// An error about a URL quotes it with its credentials masked, as the admin API shows it: the
// errors of a refused reload go to the log and to the caller of POST /api/gateway/reload,
// who is not shown the configuration's credentials otherwise. The position says where the
// URL is; the message says what is wrong with it.
func TestURLErrorsMaskCredentials(t *testing.T) {
	const secret = "pw-LEAK"
	_, err := LoadBytes("t.toml", []byte(`
[entrypoints.web]
address = "127.0.0.1:0"

[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"

[services.s.load_balancer]
servers = [{ url = "http://u:`+secret+`@127.0.0.1:1" }, { url = "http://u:`+secret+`@{host}:1" }]

[services.rev]
revisions = [{ name = "a", traffic_percent = 100, servers = [{ url = "ftp://`+secret+`@127.0.0.1:1" }] }]

[services.k.scaling]
executor = "kube"
[services.k.scaling.kube]
api_server = "https://u:`+secret+`@10.0.0.1:443/?x=1"
namespace = "n"
deployment = "d"
service = "s"
url = "http://u:`+secret+`@{pod_ip}:8000"
`))
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	_, jerr := LoadBytes("j.toml", []byte(`
[entrypoints.web]
address = "127.0.0.1:0"

[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"
middlewares = ["sso"]

[middlewares.sso]
type = "jwt"
jwks_url = "ftp://u:`+secret+`@idp.example/jwks?access_token=`+secret+`"

[services.s.load_balancer]
servers = [{ url = "http://127.0.0.1:1" }]
`))
	if jerr == nil {
		t.Fatal("loaded")
	}
	msg += "\n" + jerr.Error()
	if strings.Contains(msg, secret) {
		t.Errorf("an error shows a credential:\n%s", msg)
	}
	for _, want := range []string{
		`j.toml:12:12: middlewares.sso.jwks_url "ftp://<redacted>@idp.example/jwks?access_token=<redacted>": want an https:// URL (or http:// to a provider on a trusted network)`,
		`t.toml:10:20: services.s.load_balancer.servers[0].url "http://<redacted>@127.0.0.1:1": URL must not carry user info`,
		`services.s.load_balancer.servers[1].url "http://<redacted>@{host}:1": `,
		`services.rev.revisions[0].servers[0].url "ftp://<redacted>@127.0.0.1:1": URL scheme must be http or https`,
		`services.k.scaling.kube.api_server "https://<redacted>@10.0.0.1:443/?x=1": URL must be`,
		`services.k.scaling.kube.url "http://<redacted>@{pod_ip}:8000": `,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("no %q in:\n%s", want, msg)
		}
	}
}

// A password holding a character that ends a URL's authority unless percent-encoded ('#',
// '?' or '/', as people write them) makes the URL not parse, and the parser's error reads the
// password's start as a host and the rest as a port: neither the URL quoted nor the message
// about it shows any of the password.
func TestURLErrorsMaskCredentialsCutByADelimiter(t *testing.T) {
	for _, pw := range []string{"LEAK#pw", "LEAK?pw", "LEAK/pw", "LEAK#a/b?c"} {
		_, err := LoadBytes("t.toml", []byte(`
[entrypoints.web]
address = "127.0.0.1:0"

[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"

[services.s.load_balancer]
servers = [{ url = "http://admin:`+pw+`@10.0.0.1:8000" }]

[services.k.scaling]
executor = "kube"
[services.k.scaling.kube]
api_server = "https://admin:`+pw+`@10.0.0.1:443"
namespace = "n"
deployment = "d"
service = "s"
`))
		require.Error(t, err, pw)
		msg := err.Error()
		require.NotContains(t, msg, "LEAK", pw)
		require.NotContains(t, msg, "pw", pw)
		require.Contains(t, msg, `services.s.load_balancer.servers[0].url "http://<redacted>@10.0.0.1:8000": URL must not carry user info`, pw)
		require.Contains(t, msg, `services.k.scaling.kube.api_server "https://<redacted>@10.0.0.1:443": cannot parse URL: `, pw)
		require.Equal(t, "http://<redacted>@10.0.0.1:8000", RedactURL("http://admin:"+pw+"@10.0.0.1:8000"), pw)
	}
	// Text that does not parse for another reason keeps what is not user information.
	require.Equal(t, "http://<redacted>@{pod_ip}:8000/v1", RedactURL("http://u:p#w@{pod_ip}:8000/v1"))
	require.Equal(t, "http://{pod_ip}:8000/v1?x=a", RedactURL("http://{pod_ip}:8000/v1?x=a"))
}

// The messages that suggest what to write instead quote the suggested URL with its
// credentials masked too, and a URL written without its scheme is quoted masked as well.
func TestURLSuggestionsMaskCredentials(t *testing.T) {
	for _, v := range []string{"admin:LEAKpw@10.0.0.1:443", " https://admin:LEAKpw@10.0.0.1:443 "} {
		_, err := LoadBytes("t.toml", []byte(`
[entrypoints.web]
address = "127.0.0.1:0"

[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"

[services.s.load_balancer]
servers = [{ url = "http://127.0.0.1:1" }, { url = "admin:LEAKpw@10.0.0.1:8000" }]

[services.k.scaling]
executor = "kube"
[services.k.scaling.kube]
api_server = "`+v+`"
namespace = "n"
deployment = "d"
service = "s"
`))
		require.Error(t, err, v)
		require.NotContains(t, err.Error(), "LEAK", v)
		require.Contains(t, err.Error(), `: write "https://<redacted>@10.0.0.1:443"`, v)
		require.Contains(t, err.Error(), `services.s.load_balancer.servers[1].url "<redacted>@10.0.0.1:8000": URL has no scheme`, v)
	}
}

// A token written as a URL's user name with an unencoded '#' or '?' makes a URL that parses
// (the token's start as the host, the rest as a fragment or query): the text up to the '@'
// is masked all the same, a '/' after the delimiter being the token's too, while an '@' after
// a path's '/' is the path's.
func TestRedactURLMasksATokenCutByADelimiter(t *testing.T) {
	for in, want := range map[string]string{
		"https://LEAK#pw@idp.example/jwks":    "https://<redacted>@idp.example/jwks",
		"https://LEAK?pw@idp.example/jwks":    "https://<redacted>@idp.example/jwks",
		"https://LEAK#a?b@idp.example:8443/x": "https://<redacted>@idp.example:8443/x",
		"https://LEAK#pw/x@idp.example/jwks":  "https://<redacted>@idp.example/jwks",
		"https://LEAK?a/b@idp.example":        "https://<redacted>@idp.example",
		"https://user:8443?p/w@idp.example/x": "https://<redacted>@idp.example/x",
		"https://h.example/users/@me":         "https://h.example/users/@me",
		"https://h.example/a?b=c#d@e":         "https://h.example/a?b=c#d@e",
		"https://h.example#top":               "https://h.example#top",
	} {
		require.Equal(t, want, RedactURL(in), in)
	}
}

// A JWK Set URL's scheme is read in any letter case (RFC 3986 §3.1), as the HTTP client that
// fetches it reads it.
func TestJWKSURLSchemeInAnyCase(t *testing.T) {
	for _, u := range []string{"HTTPS://idp.example/jwks", "Http://idp.internal/jwks", "https://idp.example/jwks"} {
		_, err := LoadBytes("t.toml", []byte(`
[entrypoints.web]
address = "127.0.0.1:0"

[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"
middlewares = ["sso"]

[services.s.load_balancer]
servers = [{ url = "http://10.0.0.1:8000" }]

[middlewares.sso]
type = "jwt"
jwks_url = "`+u+`"
`))
		require.NoError(t, err, u)
	}
}
