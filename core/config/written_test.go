package config

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrittenGivesBackEnvReferences(t *testing.T) {
	t.Setenv("SLUICE_T_KEY", "k-9f3a")
	t.Setenv("SLUICE_T_HOST", "10.9.8.7")
	c := mustLoad(t, doc(
		`[entrypoints.web]`,
		`address = "127.0.0.1:8080"`,
		`[routers.r]`,
		"rule = \"Header(`X-Api-Key`, `${SLUICE_T_KEY}`)\"",
		`service = "s"`,
		`[services.s.load_balancer]`,
		`servers = [{ url = "http://127.0.0.1:1" }, { url = "http://${SLUICE_T_HOST}:8000" }]`,
		`[middlewares.m]`,
		`type = "jwt"`,
		`value = "${SLUICE_T_KEY}${SLUICE_T_KEY}${SLUICE_T_KEY}${SLUICE_T_KEY}${SLUICE_T_KEY}${SLUICE_T_KEY}"`,
		`issuer = "$${literal}"`,
		`audience = ["x", "${SLUICE_T_KEY}"]`,
	))
	for _, tc := range []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"routers", "r", "rule"}, "Header(`X-Api-Key`, `${SLUICE_T_KEY}`)", true},
		{[]string{"services", "s", "load_balancer", "servers", "1", "url"}, "http://${SLUICE_T_HOST}:8000", true},
		{[]string{"services", "s", "load_balancer", "servers", "0", "url"}, "", false},
		{[]string{"middlewares", "m", "issuer"}, "$${literal}", true},
		{[]string{"middlewares", "m", "audience", "1"}, "${SLUICE_T_KEY}", true},
		{[]string{"middlewares", "m", "audience", "0"}, "", false},
		{[]string{"routers", "r", "service"}, "", false},
	} {
		got, ok := c.Written(tc.path...)
		require.Equal(t, tc.ok, ok, "%v", tc.path)
		require.Equal(t, tc.want, got, "%v", tc.path)
	}
	// The decoded values are expanded as before.
	require.Equal(t, "Header(`X-Api-Key`, `k-9f3a`)", c.Routers["r"].Rule)
	require.Equal(t, "http://10.9.8.7:8000", c.Services["s"].LoadBalancer.Servers[1].URL)
}

func TestDocumentHoldsNoEnvValue(t *testing.T) {
	t.Setenv("SLUICE_T_KEY", "k-9f3a")
	t.Setenv("SLUICE_T_HOST", "10.9.8.7")
	t.Setenv("SLUICE_T_IDLE", "4321ms")
	t.Setenv("SLUICE_T_TOKEN", "tok-77c1")
	c := mustLoad(t, doc(
		`[entrypoints.web]`,
		`address = "127.0.0.1:8080"`,
		`idle_timeout = "${SLUICE_T_IDLE}"`,
		`[routers.r]`,
		"rule = \"Header(`X-Api-Key`, `${SLUICE_T_KEY}`)\"",
		`service = "s"`,
		`[services.s.load_balancer]`,
		`servers = [{ url = "http://${SLUICE_T_HOST}:8000", weight = 2 }]`,
		`[middlewares.m]`,
		`type = "jwt"`,
		`value = "${SLUICE_T_TOKEN}${SLUICE_T_TOKEN}${SLUICE_T_TOKEN}${SLUICE_T_TOKEN}"`,
		`issuer = "${SLUICE_T_KEY}"`,
		`audience = ["${SLUICE_T_HOST}"]`,
		`[admin]`,
		`token_env = "SLUICE_T_TOKEN"`,
	))
	d := c.Document()
	b, err := json.Marshal(d)
	require.NoError(t, err)
	for _, secret := range []string{"k-9f3a", "10.9.8.7", "4321ms", "4.321s", "tok-77c1"} {
		require.NotContains(t, string(b), secret)
	}
	ep := d["entrypoints"].(map[string]any)["web"].(map[string]any)
	require.Equal(t, "${SLUICE_T_IDLE}", ep["idle_timeout"])
	require.Equal(t, "10s", ep["read_header_timeout"], "defaults are filled in")
	require.Equal(t, "gnet", ep["engine"], "computed defaults are filled in")
	require.NotContains(t, ep, "tls", "an absent table stays absent")
	r := d["routers"].(map[string]any)["r"].(map[string]any)
	require.Equal(t, "Header(`X-Api-Key`, `${SLUICE_T_KEY}`)", r["rule"])
	require.Equal(t, []any{"web"}, r["entrypoints"])
	require.Equal(t, []any{}, r["middlewares"])
	srv := d["services"].(map[string]any)["s"].(map[string]any)["load_balancer"].(map[string]any)["servers"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"url": "http://${SLUICE_T_HOST}:8000", "weight": int64(2)}, srv)
	m := d["middlewares"].(map[string]any)["m"].(map[string]any)
	require.Equal(t, map[string]any{"type": "jwt", "value": "${SLUICE_T_TOKEN}${SLUICE_T_TOKEN}${SLUICE_T_TOKEN}${SLUICE_T_TOKEN}", "issuer": "${SLUICE_T_KEY}", "audience": []any{"${SLUICE_T_HOST}"}}, m)
	require.Equal(t, map[string]any{"address": "127.0.0.1:9090", "token_env": "SLUICE_T_TOKEN", "allowed_hosts": []any{}}, d["admin"])
}

func TestErrorsQuoteEnvValuesAsWritten(t *testing.T) {
	t.Setenv("SLUICE_T_URL", "ftp://secret-host.example")
	t.Setenv("SLUICE_T_PORT", "s3cretport")
	t.Setenv("SLUICE_T_PATH", "s3cret-path")
	t.Setenv("SLUICE_T_DUR", "s3cret-dur")
	t.Setenv("SLUICE_T_SVC", "s3cret-svc")
	_, err := LoadBytes("t.toml", doc(
		`[entrypoints.web]`,
		`address = "127.0.0.1:${SLUICE_T_PORT}"`,
		`idle_timeout = "${SLUICE_T_DUR}"`,
		`[routers.r]`,
		"rule = \"Path(`${SLUICE_T_PATH}`)\"",
		`service = "${SLUICE_T_SVC}"`,
		`[services.s.load_balancer]`,
		`servers = [{ url = "${SLUICE_T_URL}" }]`,
	))
	var list ErrorList
	require.True(t, errors.As(err, &list), "%v", err)
	require.Equal(t, []string{
		`t.toml:2:11: entrypoints.web.address "127.0.0.1:${SLUICE_T_PORT}": port "${SLUICE_T_PORT}" is not a number in 0..65535`,
		`t.toml:3:16: entrypoints.web.idle_timeout: invalid duration "${SLUICE_T_DUR}" (want a positive duration such as "500ms", "15s" or "5m")`,
		`t.toml:5:8: routers.r.rule: Path: path must start with '/', got "${SLUICE_T_PATH}"`,
		`t.toml:6:11: routers.r.service: no service named "${SLUICE_T_SVC}" (defined: "s")`,
		`t.toml:8:20: services.s.load_balancer.servers[0].url "${SLUICE_T_URL}": URL scheme must be http or https, e.g. "http://127.0.0.1:8000"`,
	}, lines(list))
}

func TestMaskEnvIsScopedToTheKeyPath(t *testing.T) {
	t.Setenv("SLUICE_T_A", "alpha-value")
	t.Setenv("SLUICE_T_B", "beta-value")
	t.Setenv("SLUICE_T_EMPTY", "")
	c := mustLoad(t, withMinimal(
		`[middlewares.a]`,
		`type = "rate-limit"`,
		`rate = 60`,
		`key = "header:${SLUICE_T_A}${SLUICE_T_EMPTY}"`,
		`[middlewares.b]`,
		`type = "rate-limit"`,
		`rate = 60`,
		`key = "header:${SLUICE_T_B}"`,
	))
	msg := "alpha-value and beta-value"
	require.Equal(t, "${SLUICE_T_A} and beta-value", c.MaskEnv(msg, "middlewares", "a"))
	require.Equal(t, "${SLUICE_T_A} and beta-value", c.MaskEnv(msg, "middlewares", "a", "key"))
	require.Equal(t, "alpha-value and ${SLUICE_T_B}", c.MaskEnv(msg, "middlewares", "b"))
	require.Equal(t, "${SLUICE_T_A} and ${SLUICE_T_B}", c.MaskEnv(msg))
	require.Equal(t, msg, c.MaskEnv(msg, "middlewares", "ab"), "a sibling whose name has the prefix is not under it")
}

// A server URL read whole from the environment is masked in the parts that errors about
// reaching it quote apart: the host and port dialled, and the host looked up.
func TestMaskEnvMasksAnEnvURLsAddress(t *testing.T) {
	t.Setenv("SLUICE_T_URL", "http://vllm.internal:8123")
	t.Setenv("SLUICE_T_URL6", "https://[fd00::7]")
	c := mustLoad(t, withMinimal(
		`[services.t.load_balancer]`,
		`servers = [{ url = "${SLUICE_T_URL}" }, { url = "${SLUICE_T_URL6}" }]`,
	))
	for msg, want := range map[string]string{
		`Get "http://vllm.internal:8123/health": dial tcp vllm.internal:8123: connect: connection refused`: `Get "${SLUICE_T_URL}/health": dial tcp ${SLUICE_T_URL}: connect: connection refused`,
		`dial tcp: lookup vllm.internal on 127.0.0.53:53: no such host`:                                    `dial tcp: lookup ${SLUICE_T_URL} on 127.0.0.53:53: no such host`,
		`Get "https://[fd00::7]/health": dial tcp [fd00::7]:443: i/o timeout`:                              `Get "${SLUICE_T_URL6}/health": dial tcp ${SLUICE_T_URL6}:443: i/o timeout`,
	} {
		require.Equal(t, want, c.MaskEnv(msg, "services", "t"))
	}
}

func lines(l ErrorList) []string {
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.Error()
	}
	return out
}

// A value read from the environment is masked where it stands as a whole token of the text,
// not inside a longer word or number: a short value (a port, a letter) would otherwise garble
// unrelated text and so point at itself. The string it was substituted into is masked whole
// wherever it occurs, so a value written glued to other text is masked there too.
func TestMaskEnvMasksShortValuesAsWholeTokensOnly(t *testing.T) {
	t.Setenv("SLUICE_T_PORT", "80")
	t.Setenv("SLUICE_T_D", "o")
	t.Setenv("SLUICE_T_HOST", "gpu")
	t.Setenv("SLUICE_T_N", "7")
	t.Setenv("SLUICE_T_KEY", "sk-0123456789abcdef0123456789abcdef")
	c := mustLoad(t, withMinimal(
		`[services.t.load_balancer]`,
		`servers = [{ url = "http://127.0.0.1:${SLUICE_T_PORT}" }, { url = "http://${SLUICE_T_HOST}${SLUICE_T_N}.internal:8000" }]`,
		`[middlewares.m]`,
		`type = "rate-limit"`,
		`rate = 60`,
		`key = "header:X-${SLUICE_T_D}"`,
		`[middlewares.k]`,
		`type = "jwt"`,
		`value = "${SLUICE_T_KEY}"`,
	))
	for msg, want := range map[string]string{
		// The port masked where it is the port, not in 8080, 10.0.0.80 or 800.
		`dial tcp 127.0.0.1:80: connect: connection refused (also tried 127.0.0.1:8080, 10.0.0.80, port 800)`: `dial tcp 127.0.0.1:${SLUICE_T_PORT}: connect: connection refused (also tried 127.0.0.1:8080, 10.0.0.80, port 800)`,
		`Get "http://127.0.0.1:80/health": EOF`: `Get "http://127.0.0.1:${SLUICE_T_PORT}/health": EOF`,
		`port 80 of 80`:                         `port ${SLUICE_T_PORT} of ${SLUICE_T_PORT}`,
		// A value glued to literal text is masked where its string is quoted.
		`dial tcp: lookup gpu7.internal on 127.0.0.53:53: no such host`:        `dial tcp: lookup ${SLUICE_T_HOST}${SLUICE_T_N}.internal on 127.0.0.53:53: no such host`,
		`dial tcp gpu7.internal:8000: i/o timeout (gpu, gpu7b, gpu-7, my.gpu)`: `dial tcp ${SLUICE_T_HOST}${SLUICE_T_N}.internal:8000: i/o timeout (${SLUICE_T_HOST}, gpu7b, gpu-7, my.gpu)`,
	} {
		require.Equal(t, want, c.MaskEnv(msg, "services", "t"), "%s", msg)
	}
	for msg, want := range map[string]string{
		`key "header:X-o": o is not a header`: `key "header:X-${SLUICE_T_D}": ${SLUICE_T_D} is not a header`,
		`o.`:                                  `${SLUICE_T_D}.`,
		`connection refused, no such host o.example, foo-o`: `connection refused, no such host o.example, foo-o`,
		`GET /x?key=X-o&h=header%3Ao`:                       `GET /x?key=X-o&h=header%3A${SLUICE_T_D}`,
	} {
		require.Equal(t, want, c.MaskEnv(msg, "middlewares", "m"), "%s", msg)
	}
	// A value of a secret's length is masked wherever it occurs.
	require.Equal(t, "Bearer${SLUICE_T_KEY}x and ${SLUICE_T_KEY}", c.MaskEnv("Bearersk-0123456789abcdef0123456789abcdefx and sk-0123456789abcdef0123456789abcdef", "middlewares", "k"))
}
