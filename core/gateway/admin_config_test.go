package gateway_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// roundTripTOML writes every key of the configuration format, each in a way the round trip
// could lose: durations spelt otherwise than Go prints them, strings from the environment and
// a "$${" escape, computed defaults left out, a float option that is integral, an integer
// beyond a float's precision, HTML-special characters, a name that needs quoting, nested
// option tables and arrays of tables.
const roundTripTOML = `
[entrypoints.web]
address = "127.0.0.1:0"
engine = "gnet"
read_header_timeout = "90s"
idle_timeout = "${RT_IDLE}"
client_stall_timeout = "1m"
max_header_bytes = 32768
max_body_bytes = 1_048_576
max_connections = 100
allow_encoded_slash = true
multicore = false
event_loops = 2
drain_timeout = "5000ms"
trusted_ips = ["10.0.0.0/8", "::ffff:192.0.2.0/120", "2001:db8::1"]

[entrypoints.secure]
address = "127.0.0.1:0"
tls = { cert_file = "@CERT@", key_file = "@KEY@" }

[routers.api]
rule = "PathPrefix(` + "`/v1`" + `) && !Header(` + "`X-Tag`, `<b>&amp;`" + `)"
service = "llm"
entrypoints = ["web"]
middlewares = ["keys"]
priority = 5
forward_credentials = true

[routers.openai]
rule = "PathPrefix(` + "`/openai`" + `)"
models = true
middlewares = ["keys"]

[services.llm.load_balancer]
strategy = "least-connections"
servers = [{ url = "http://127.0.0.1:9", weight = 3 }, { url = "http://${RT_HOST}:10" }]
pass_host_header = true
dial_timeout = "250ms"
response_header_timeout = "600s"
stream_idle_timeout = "2m"
idle_conn_timeout = "30s"
max_idle_conns = 0

[middlewares.keys]
type = "api-key"
header = "X-Api-Key"

[middlewares.sso]
type = "jwt"
value = "s3cret-value-of-at-least-32-bytes-long"
issuer = "https://issuer.example/$${LITERAL} <&>"
leeway = "45s"

[middlewares.limit]
type = "rate-limit"
rate = 2.0
burst = 1_000

[models."chat-3.1"]
model_id = "0d6a4c1e-7f41-4a55-9a5e-1f3a7c2b9e10"
[models."chat-3.1".targets.main]
service = "llm"
upstream_model = "llama-3.1-8b"
weight = 2
[models."chat-3.1".targets.backup]
service = "llm"
priority = 1
[models."chat-3.1".scheduling]
max_concurrent_requests = 4
max_queued_requests = 8
queue_timeout_ms = 500

[consumers.alice]
api_key_sha256 = ["@DIGEST@"]
api_key_env = "RT_ALICE_KEY"
environment = "prod"
generation = 2
grants = { models = ["chat-3.1"], endpoints = ["/v1/chat/completions", "/v1/models"] }

[consumers.bob]
api_key_sha256 = ["@DIGEST2@"]
grants = { models = ["*"], endpoints = ["*"] }

[admin]
address = "127.0.0.1:0"
token_env = "RT_ADMIN_TOKEN"
allowed_hosts = ["admin.internal"]

[log]
level = "debug"
format = "json"
access_log_sample = 0.25
`

// GET /api/gateway/config, turned back into TOML, loads and compiles to the configuration in
// force: the admin API shows the whole configuration, in a form that can be written back.
func TestAdminConfigRoundTrips(t *testing.T) {
	t.Setenv("RT_IDLE", "45s")
	t.Setenv("RT_HOST", "127.0.0.2")
	t.Setenv("RT_ALICE_KEY", "alice-key-1")
	t.Setenv("RT_ADMIN_TOKEN", "tok-rt")
	cert, key, _ := selfSigned(t, t.TempDir())
	digest := func(k string) string { d := sha256.Sum256([]byte(k)); return hex.EncodeToString(d[:]) }
	src := strings.NewReplacer("@CERT@", cert, "@KEY@", key, "@DIGEST@", digest("alice-key-2"), "@DIGEST2@", digest("bob-key")).Replace(roundTripTOML)
	g, admin, _ := runAdmin(t, src)
	auth := map[string]string{"Authorization": "Bearer tok-rt"}

	a := adminDo(t, "GET", admin+"/api/gateway/config", auth)
	require.Equal(t, 200, a.status, "%s", a.body)
	// Written as is, not as JSON's HTML-safe escapes (\u0026, \u003c).
	require.Contains(t, a.body, "`/v1`) && !Header(`X-Tag`, `<b>&amp;`)")
	require.Contains(t, a.body, `"<redacted>"`)
	require.Contains(t, a.body, `"https://issuer.example/$${LITERAL} <&>"`)
	require.NotContains(t, a.body, `\u00`)
	require.NotContains(t, a.body, "s3cret-value")
	require.NotContains(t, a.body, "tok-rt")

	var answer struct {
		Files  []string       `json:"files"`
		Config map[string]any `json:"config"`
	}
	dec := json.NewDecoder(strings.NewReader(a.body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&answer))
	written, err := toml.Marshal(tomlValue(t, answer.Config))
	require.NoError(t, err)
	// The one secret is shown redacted; an operator writing the configuration back puts it in.
	written = bytes.ReplaceAll(written, []byte(`'<redacted>'`), []byte(`'s3cret-value-of-at-least-32-bytes-long'`))

	back, err := config.LoadBytes("roundtrip.toml", written)
	require.NoError(t, err, "the shown configuration does not load:\n%s", written)
	snap, err := snapshot.Compile(back, nil, 1)
	require.NoError(t, err, "the shown configuration does not compile:\n%s", written)
	snap.Retire(nil)

	// The redacted secret was written back as it is, so the two are the same configuration.
	want := g.Snapshot().Config
	require.Equal(t, "s3cret-value-of-at-least-32-bytes-long", want.Middlewares["sso"].Options["value"])
	requireEquivalent(t, want, back)
}

// The config endpoint answers only GET (and HEAD): another method gets 405 with Allow.
func TestAdminConfigWrongMethod(t *testing.T) {
	_, admin, _ := runAdmin(t, adminTOML(""))
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		a := adminDo(t, m, admin+"/api/gateway/config", map[string]string{"Content-Type": "application/json"})
		requireAdminError(t, a, 405, "method_not_allowed")
		require.Equal(t, "GET, HEAD", a.header.Get("Allow"), m)
	}
	require.Equal(t, 200, adminDo(t, "HEAD", admin+"/api/gateway/config", nil).status)
}

// tomlValue converts a JSON value decoded with UseNumber into what go-toml writes as the same
// TOML: a number with a fraction or an exponent is a float, any other an integer.
func tomlValue(t *testing.T, v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = tomlValue(t, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tomlValue(t, e)
		}
		return out
	case json.Number:
		if strings.ContainsAny(x.String(), ".eE") {
			f, err := x.Float64()
			require.NoError(t, err)
			return f
		}
		n, err := x.Int64()
		require.NoError(t, err)
		return n
	default:
		return v
	}
}

// requireEquivalent fails unless want and got hold the same configuration: every exported
// field equal, an empty slice or map the same as none. Unexported fields (the files and
// positions the configuration was loaded from) are not compared.
func requireEquivalent(t *testing.T, want, got *config.Config) {
	t.Helper()
	if diff := equivalent(reflect.ValueOf(want).Elem(), reflect.ValueOf(got).Elem(), "config"); diff != "" {
		t.Fatalf("the round trip changed the configuration: %s", diff)
	}
}

func equivalent(a, b reflect.Value, path string) string {
	if a.Type() != b.Type() {
		return fmt.Sprintf("%s: %s, then %s", path, a.Type(), b.Type())
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Sprintf("%s: nil in one only", path)
			}
			return ""
		}
		return equivalent(a.Elem(), b.Elem(), path)
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Sprintf("%s: nil in one only", path)
			}
			return ""
		}
		return equivalent(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if d := equivalent(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: %d elements, then %d", path, a.Len(), b.Len())
		}
		for i := 0; i < a.Len(); i++ {
			if d := equivalent(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: keys %v, then %v", path, a.MapKeys(), b.MapKeys())
		}
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() {
				return fmt.Sprintf("%s[%v]: missing after the round trip", path, it.Key())
			}
			if d := equivalent(it.Value(), bv, fmt.Sprintf("%s[%v]", path, it.Key())); d != "" {
				return d
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			return fmt.Sprintf("%s: %#v, then %#v", path, a.Interface(), b.Interface())
		}
		return ""
	}
}
