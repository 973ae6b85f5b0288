package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// providers.file.directory adds its *.toml files after the configuration, so that they may
// define what the main file references; the watcher watches all of them.
func TestProviderDirectoryIsMerged(t *testing.T) {
	dir := t.TempDir()
	confd := filepath.Join(dir, "conf.d")
	require.NoError(t, os.Mkdir(confd, 0o755))
	main := filepath.Join(dir, "gateway.toml")
	require.NoError(t, os.WriteFile(main, []byte(`
[entrypoints.web]
address = "127.0.0.1:8080"
[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "ollama"
[providers.file]
watch = true
directory = "conf.d"
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(confd, "10-ollama.toml"), []byte("[services.ollama.load_balancer]\nservers = [{ url = \"http://127.0.0.1:11434\" }]\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(confd, ".hidden.toml"), []byte("not toml"), 0o644))
	c, err := Load(main)
	require.NoError(t, err)
	require.NotNil(t, c.Services["ollama"])
	require.True(t, c.Providers.File.Watch)
	require.Equal(t, DefaultDebounce, c.Providers.File.Debounce)
	require.Equal(t, []string{main, filepath.Join(confd, "10-ollama.toml"), confd}, c.WatchPaths())

	require.NoError(t, os.WriteFile(main, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n[providers.file]\ndirectory = \"nope\"\ndebounce = \"1ms\"\n"), 0o644))
	_, err = Load(main)
	require.Error(t, err)
	require.Contains(t, err.Error(), "gateway.toml:4:13: providers.file.directory: ")
	require.True(t, strings.Contains(err.Error(), "no such file") || strings.Contains(err.Error(), "not found"), err.Error())
}

func TestProviderDebounceBounds(t *testing.T) {
	_, err := LoadBytes("t.toml", withMinimal(`[providers.file]`, `debounce = "1ms"`))
	require.Error(t, err)
	require.Contains(t, err.Error(), "providers.file.debounce 1ms: want 10ms..1m0s")
}
