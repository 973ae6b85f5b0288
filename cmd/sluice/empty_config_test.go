package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A config path written out empty, as `--config "$SLUICE_CONFIG"` is with the variable unset,
// exits 2 before anything loads: serve does not run the embedded default in place of the
// config meant, and validate checks neither another config nor a file named "" (reported as
// "-"). serve runs in the test's process on the embedded default moved to a listener the test
// holds, so that a serve that took the empty value for the flag left out fails at once on the
// taken address (exit 1) instead of listening on the default's 127.0.0.1:8080. Not parallel:
// it swaps configs.Default, which every load of the embedded default reads.
func TestEmptyConfigPathExits2(t *testing.T) {
	moveEmbeddedDefaultOntoAHeldListener(t)
	defer slog.SetDefault(slog.Default()) // a serve that starts sets the process's default logger

	const want = `want a TOML file or a directory of *.toml`
	for _, c := range []struct {
		args []string
		line string // the first line on stderr
	}{
		{[]string{"serve", "--config", ""}, `sluice serve: invalid value "" for flag --config: ` + want + ` (leave --config out to run the embedded default)`},
		{[]string{"serve", "--config="}, `sluice serve: invalid value "" for flag --config: ` + want + ` (leave --config out to run the embedded default)`},
		{[]string{"serve", "-config", ""}, `sluice serve: invalid value "" for flag -config: ` + want + ` (leave --config out to run the embedded default)`},
		{[]string{"validate", ""}, `sluice validate: invalid PATH "": ` + want},
		{[]string{"validate", "--config", ""}, `sluice validate: invalid value "" for flag --config: ` + want},
		{[]string{"validate", "--config=", "../../configs/default.toml"}, `sluice validate: invalid value "" for flag --config: ` + want},
		{[]string{"validate", "../../configs/default.toml", "--config", ""}, `sluice validate: invalid value "" for flag --config: ` + want},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(c.args, &out, &errb), "%q: %s", c.args, errb.String())
		require.Empty(t, out.String(), "%q", c.args)
		line, _, _ := strings.Cut(errb.String(), "\n")
		require.Equal(t, c.line, line, "%q", c.args)
		require.Contains(t, errb.String(), "usage: sluice "+c.args[0], "%q", c.args)
		require.NotContains(t, errb.String(), "sluice starting", "%q", c.args)
	}
}
