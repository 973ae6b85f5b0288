package config

import (
	"os"
	"path/filepath"

	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every top-level table of named entries may have its entries spread over the files of a
// directory, the model aliases and consumers too; one entry in two files is still an error.
func TestDirectoryMergesEveryNamedTable(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	dir := writeFiles(t, map[string]string{
		"00.toml": "[entrypoints.web]\naddress = \":8080\"\n[routers.openai]\nrule = \"PathPrefix(`/v1`)\"\nmodels = true\nmiddlewares = [\"keys\"]\n" +
			"[middlewares.keys]\ntype = \"api-key\"\n[services.pool.load_balancer]\nservers = [{ url = \"http://127.0.0.1:8000\" }]\n" +
			"[models.a.targets.t]\nservice = \"pool\"\n[consumers.x]\napi_key_sha256 = [\"" + sum + "\"]\n[consumers.x.grants]\nmodels = [\"a\", \"b\"]\n",
		"10.toml": "[entrypoints.other]\naddress = \":8081\"\n[models.b.targets.t]\nservice = \"pool\"\n[consumers.y]\napi_key_sha256 = [\"" + strings.Repeat("cd", 32) + "\"]\n[consumers.y.grants]\nmodels = [\"b\"]\n",
	})
	c, err := Load(dir)
	require.NoError(t, err)
	require.Len(t, c.Models, 2)
	require.Len(t, c.Consumers, 2)
	require.Len(t, c.Entrypoints, 2)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "20.toml"), []byte("[models.a.targets.u]\nservice = \"pool\"\n[consumers.y]\n"), 0o600))
	_, err = Load(dir)
	f20, f00, f10 := filepath.Join(dir, "20.toml"), filepath.Join(dir, "00.toml"), filepath.Join(dir, "10.toml")
	require.EqualError(t, err, strings.Join([]string{
		f20 + ":1:9: models.a is already defined at " + f00 + ":11:9 (an entry may be defined in only one file)",
		f20 + ":3:12: consumers.y is already defined at " + f10 + ":5:12 (an entry may be defined in only one file)",
	}, "\n"))
}
