package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unsetVar is an environment variable the tests reference and never set.
const unsetVar = "SLUICE_TEST_UNSET_SECRET"

// validate reports every problem of a config in one run, in the order of their positions: the
// files the config names (certificates, keys) are checked also when a key has a problem of its
// own, such as an unset ${VAR}, except where that key decides the file's name; each file that
// cannot be read is reported where it is named.
func TestValidateReportsEveryProblemInOneRun(t *testing.T) {
	_, set := os.LookupEnv(unsetVar)
	require.False(t, set, "%s is set", unsetVar)
	for _, c := range []struct {
		name string
		tls  string // the entrypoint's tls table, on line 4
		mw   string // the middleware's options, on line 13
		want []string
	}{
		{
			"an unset variable and a missing certificate",
			`tls = { cert_file = "/nonexistent/cert.pem", key_file = "/nonexistent/key.pem" }`,
			`value = "${` + unsetVar + `}"`,
			[]string{
				":4:21: entrypoints.web.tls.cert_file: open /nonexistent/cert.pem: no such file or directory",
				":4:57: entrypoints.web.tls.key_file: open /nonexistent/key.pem: no such file or directory",
				":13:9: middlewares.auth.value: environment variable " + unsetVar + " is not set (referenced as ${" + unsetVar + "})",
			},
		},
		{
			// A part with a problem of its own has its files left unchecked: its key may be
			// the one misspelt.
			"a misspelt key and a missing certificate",
			`tls = { cert_file = "/nonexistent/cert.pem", key_file = "/nonexistent/key.pem" }`,
			`public_key_fle = "/nonexistent/jwt.pem"`,
			[]string{
				":4:21: entrypoints.web.tls.cert_file: open /nonexistent/cert.pem: no such file or directory",
				":4:57: entrypoints.web.tls.key_file: open /nonexistent/key.pem: no such file or directory",
				`:11:14: middlewares.auth: a jwt middleware needs value = "${JWT_SECRET}" (the HMAC secret of HS256 tokens), public_key_file = "<PEM file>" (RS256, ES256), jwks_file or jwks_url (a JWK Set)`,
				`:13:1: middlewares.auth: unknown key "public_key_fle" for a jwt middleware (did you mean "public_key_file"? known keys: audience, claim, forward_claims, issuer, jwks_file, jwks_refresh, jwks_url, leeway, public_key_file, value)`,
			},
		},
		{
			// Each file of tls.certificates that cannot be read, where it is named.
			"missing files of a certificate in the list",
			`tls = { certificates = [{ cert_file = "/nonexistent/a.pem", key_file = "/nonexistent/b.pem" }] }`,
			`public_key_file = "/nonexistent/jwt.pem"`,
			[]string{
				":4:39: entrypoints.web.tls.certificates[0].cert_file: open /nonexistent/a.pem: no such file or directory",
				":4:72: entrypoints.web.tls.certificates[0].key_file: open /nonexistent/b.pem: no such file or directory",
				":13:19: middlewares.auth.public_key_file: open /nonexistent/jwt.pem: no such file or directory",
			},
		},
		{
			// The certificate's name is not known: no guess at it is checked.
			"a certificate named by an unset variable",
			`tls = { cert_file = "${` + unsetVar + `}/cert.pem", key_file = "/nonexistent/key.pem" }`,
			`public_key_file = "/nonexistent/jwt.pem"`,
			[]string{
				":4:21: entrypoints.web.tls.cert_file: environment variable " + unsetVar + " is not set (referenced as ${" + unsetVar + "})",
				":13:19: middlewares.auth.public_key_file: open /nonexistent/jwt.pem: no such file or directory",
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "gateway.toml")
			require.NoError(t, os.WriteFile(f, []byte(`[entrypoints.web]
address = "127.0.0.1:8443"
engine = "fasthttp"
`+c.tls+`

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["auth"]

[middlewares.auth]
type = "jwt"
`+c.mw+`

[services.up.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }]
`), 0o644))
			var out, errb bytes.Buffer
			require.Equal(t, 1, run([]string{"validate", f}, &out, &errb), errb.String())
			want := make([]string, len(c.want))
			for i, w := range c.want {
				want[i] = f + w
			}
			require.Equal(t, want, strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"))
			require.Empty(t, out.String())
		})
	}
}

// A file of a directory that does not parse is reported with the problems the other files have
// of their own, in the order of their positions; a reference into it (routers.api.service names
// a service of b.toml) is not checked, since what it defines is unknown.
func TestValidateReportsEveryFileOfADirectoryWithASyntaxError(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.toml"), filepath.Join(dir, "b.toml")
	require.NoError(t, os.WriteFile(a, []byte(`[entrypoints.web]
address = "127.0.0.1:8080"
bogus = 1
drain_timeout = "5x"

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
`), 0o644))
	require.NoError(t, os.WriteFile(b, []byte(`[services.up.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }
`), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", dir}, &out, &errb), errb.String())
	require.Equal(t, []string{
		a + `:3:1: unknown key "bogus" in [entrypoints.web] (known keys: address, allow_encoded_slash, client_stall_timeout, drain_timeout, engine, event_loops, idle_timeout, max_body_bytes, max_connections, max_header_bytes, multicore, read_header_timeout, send_buffer_bytes, tls, trusted_ips, upstream_connect, upstream_io)`,
		a + `:4:17: entrypoints.web.drain_timeout: invalid duration "5x" (want a positive duration such as "500ms", "15s" or "5m")`,
		b + `:3:1: expected character ] but the document ended here`,
	}, strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"))
	require.Empty(t, out.String())
}

// The problems found when the configuration is compiled (files it names that cannot be read)
// come in the order of their positions too, whichever part of the configuration names them:
// an entrypoint's certificate before a service's CA file written after it.
func TestValidateReportsFileProblemsInTheOrderOfTheirPositions(t *testing.T) {
	f := filepath.Join(t.TempDir(), "gateway.toml")
	require.NoError(t, os.WriteFile(f, []byte(`[entrypoints.web]
address = "127.0.0.1:8443"
engine = "fasthttp"
tls = { cert_file = "/nonexistent/cert.pem", key_file = "/nonexistent/key.pem" }

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"

[services.up.load_balancer]
servers = [{ url = "https://127.0.0.1:9" }]
tls = { ca_file = "/nonexistent/ca.pem" }
`), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", f}, &out, &errb), errb.String())
	require.Equal(t, []string{
		f + ":4:21: entrypoints.web.tls.cert_file: open /nonexistent/cert.pem: no such file or directory",
		f + ":4:57: entrypoints.web.tls.key_file: open /nonexistent/key.pem: no such file or directory",
		f + ":12:19: services.up.load_balancer.tls.ca_file: open /nonexistent/ca.pem: no such file or directory",
	}, strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"))
	require.Empty(t, out.String())
}

// A service's CA file is a file the configuration names like a certificate: it is reported in
// the same run as a problem of another part (an unset ${VAR}), and left unchecked when the
// service's tls table has a problem of its own (a misspelt key beside it).
func TestValidateReportsAServiceCAFileBesideAnotherProblem(t *testing.T) {
	_, set := os.LookupEnv(unsetVar)
	require.False(t, set, "%s is set", unsetVar)
	for _, c := range []struct {
		name string
		tls  string // the service's tls table, on line 15
		want []string
	}{
		{
			"an unset variable and a missing CA file",
			`tls = { ca_file = "/nonexistent/ca.pem" }`,
			[]string{
				":11:9: middlewares.auth.value: environment variable " + unsetVar + " is not set (referenced as ${" + unsetVar + "})",
				":15:19: services.up.load_balancer.tls.ca_file: open /nonexistent/ca.pem: no such file or directory",
			},
		},
		{
			"a CA file of a tls table with a problem of its own",
			`tls = { ca_file = "/nonexistent/ca.pem", server_nam = "x" }`,
			[]string{
				":11:9: middlewares.auth.value: environment variable " + unsetVar + " is not set (referenced as ${" + unsetVar + "})",
				`:15:42: unknown key "server_nam" in [services.up.load_balancer.tls] (did you mean "server_name"?)`,
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "gateway.toml")
			require.NoError(t, os.WriteFile(f, []byte(`[entrypoints.web]
address = "127.0.0.1:8080"

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["auth"]

[middlewares.auth]
type = "jwt"
value = "${`+unsetVar+`}"

[services.up.load_balancer]
servers = [{ url = "https://127.0.0.1:9" }]
`+c.tls+`
`), 0o644))
			var out, errb bytes.Buffer
			require.Equal(t, 1, run([]string{"validate", f}, &out, &errb), errb.String())
			want := make([]string, len(c.want))
			for i, w := range c.want {
				want[i] = f + w
			}
			require.Equal(t, want, strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"))
			require.Empty(t, out.String())
		})
	}
}
