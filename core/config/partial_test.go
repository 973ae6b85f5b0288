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
