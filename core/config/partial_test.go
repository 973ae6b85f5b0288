package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// LoadPartial returns, with Load's errors, the configuration decoded in spite of them, and
// tells the parts with a problem from those without, key path segment by segment.
func TestLoadPartialTellsThePartsInError(t *testing.T) {
	_, set := os.LookupEnv("SLUICE_TEST_UNSET_SECRET")
	require.False(t, set)
	f := filepath.Join(t.TempDir(), "t.toml")
	require.NoError(t, os.WriteFile(f, withMinimal(
		`[entrypoints.tls]`,
		`address = "127.0.0.1:8443"`,
		`engine = "fasthttp"`,
		`tls = { cert_file = "/x/cert.pem", key_file = "/x/key.pem" }`,
		`[middlewares.auth]`,
		`type = "jwt"`,
		`value = "${SLUICE_TEST_UNSET_SECRET}"`,
	), 0o644))
	_, loadErr := Load(f)
	require.Error(t, loadErr)
	cfg, err := LoadPartial(f)
	require.Equal(t, loadErr, err, "the errors are Load's")
	require.NotNil(t, cfg)
	require.Equal(t, "/x/cert.pem", cfg.Entrypoints["tls"].TLS.CertFile)
	require.True(t, cfg.InError("middlewares", "auth"))
	require.True(t, cfg.InError("middlewares", "auth", "value"))
	require.True(t, cfg.InError("middlewares"))
	require.False(t, cfg.InError("middleware"), "a prefix of a segment is no part")
	require.False(t, cfg.InError("middlewares", "auth", "type"))
	require.False(t, cfg.InError("entrypoints", "tls", "tls"))
	require.False(t, cfg.InError("entrypoints"))

	ok, err := LoadBytes("ok.toml", withMinimal())
	require.NoError(t, err)
	require.False(t, ok.InError("entrypoints", "web"))
}

// A file that does not parse leaves nothing to check: LoadPartial returns no configuration.
func TestLoadPartialAfterASyntaxError(t *testing.T) {
	f := filepath.Join(t.TempDir(), "t.toml")
	require.NoError(t, os.WriteFile(f, []byte("[entrypoints.web\n"), 0o644))
	cfg, err := LoadPartial(f)
	require.Nil(t, cfg)
	var list ErrorList
	require.ErrorAs(t, err, &list)
}

// A file of a directory that does not parse hides none of the other files' own problems:
// they are decoded, and reported with the syntax error in the order of their positions.
func TestLoadPartialDirectoryWithASyntaxErrorReportsTheOtherFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.toml": "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\nbogus = 1\ndrain_timeout = \"5x\"\n",
		"b.toml": "[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }\n",
		"c.toml": "[log]\nlevel = \"info\"\naccess_log_sample = \"all\"\n",
	})
	a, b, c := filepath.Join(dir, "a.toml"), filepath.Join(dir, "b.toml"), filepath.Join(dir, "c.toml")
	cfg, err := LoadPartial(dir)
	require.Nil(t, cfg, "a configuration with a file that does not parse is not returned")
	var list ErrorList
	require.ErrorAs(t, err, &list)
	var got []string
	for _, e := range list {
		got = append(got, e.Pos.String())
	}
	require.Equal(t, []string{a + ":3:1", a + ":4:17", b + ":3:1", c + ":3:21"}, got, "%v", err)
	require.Contains(t, list[0].Msg, `unknown key "bogus" in [entrypoints.web]`)
	require.Contains(t, list[1].Msg, `entrypoints.web.drain_timeout: invalid duration "5x"`)
	require.Contains(t, list[2].Msg, "expected character ]")
	require.Contains(t, list[3].Msg, "log.access_log_sample must be a number")
	_, loadErr := Load(dir)
	require.Equal(t, err, loadErr, "the errors are Load's")
}

// What a file that does not parse defines is unknown: a reference into it is no error, nor is
// a part the configuration lacks without it (here every entrypoint), nor a clash with it.
func TestLoadPartialDirectoryWithASyntaxErrorGuessesNoReference(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.toml": "[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\nentrypoints = [\"web\"]\nmiddlewares = [\"auth\"]\n",
		"b.toml": "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }\n[middlewares.auth]\ntype = \"api-key\"\n",
	})
	cfg, err := LoadPartial(dir)
	require.Nil(t, cfg)
	var list ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 1, "%v", err)
	require.Equal(t, filepath.Join(dir, "b.toml"), list[0].Pos.File)
}
