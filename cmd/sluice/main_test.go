package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateReportsFileLineColAndExits1(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte(`[entrypoints.web]
address = "127.0.0.1:8080"

[routers.api]
rule = "PathPrefix(`+"`/v1`"+`) &&"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }]
`), 0o644))
	var out, errb bytes.Buffer
	code := run([]string{"validate", bad}, &out, &errb)
	require.Equal(t, 1, code)
	line := strings.TrimSpace(errb.String())
	require.True(t, strings.HasPrefix(line, bad+":5:"), "got %q", line)
	require.Contains(t, line, "rule")
}

func TestValidateUnknownKey(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\nadress = \"x\"\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.Contains(t, errb.String(), bad+":3:1:")
}

func TestValidateAcceptsShippedConfigs(t *testing.T) {
	t.Setenv("JWT_SECRET", "an-example-secret-of-at-least-32-bytes") // examples/ollama.toml
	files, err := filepath.Glob("../../configs/*.toml")
	require.NoError(t, err)
	ex, err := filepath.Glob("../../configs/examples/*.toml")
	require.NoError(t, err)
	files = append(files, ex...)
	require.NotEmpty(t, files)
	for _, f := range files {
		var out, errb bytes.Buffer
		if run([]string{"validate", f}, &out, &errb) == 0 {
			continue
		}
		// An example may name the certificate files of a real deployment (/etc/certs/…):
		// validate reports them missing here, as serve would, and nothing else.
		for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
			require.Regexp(t, `tls: open /etc/certs/\S+: no such file or directory$`, line, "%s", f)
		}
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errb))
	require.Contains(t, out.String(), "sluice ")
	require.Equal(t, 2, run([]string{"frobnicate"}, &out, &errb))
	require.Contains(t, errb.String(), "usage:")
}

func TestValidatePointsAtTheRuleSyntaxError(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	// The error is at the stray second ")": line 5, column 19.
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n\n[routers.api]\nrule = \"Path(`/a`))\"\nservice = \"up\"\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.True(t, strings.HasPrefix(errb.String(), bad+":5:19:"), "got %q", errb.String())
}

func TestServeRefusesAPositionalConfig(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 2, run([]string{"serve", "my.toml"}, &out, &errb))
	require.Contains(t, errb.String(), `unexpected argument "my.toml"`)
}

func TestValidateChecksTLSFiles(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "tls.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.websecure]\naddress = \"127.0.0.1:8443\"\ntls = { cert_file = \"/nonexistent/cert.pem\", key_file = \"/nonexistent/key.pem\" }\n\n[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.True(t, strings.HasPrefix(errb.String(), bad+":3:"), "got %q", errb.String())
	require.Contains(t, errb.String(), "/nonexistent/cert.pem")
}
