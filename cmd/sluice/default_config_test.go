package main_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/configs"
	"github.com/sluice-gw/sluice/core/config"
)

// `sluice serve --config FILE` whose listen address is taken exits 1 with the key's position
// in FILE, and the lines it logged before come out first, as they happened, although the log
// goes through a writer of its own when standard error is the process's. The address is a
// listener the test holds: the embedded default's fixed one may be free or taken on the
// machine (TestServeOnTheEmbeddedDefaultNamesItWhenItsAddressIsTaken covers that default).
func TestServeWhoseAddressIsTakenLogsFirstThenSaysSo(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	def, err := config.LoadDefault()
	require.NoError(t, err)
	text := string(configs.Default)
	for _, a := range []struct{ from, to string }{{def.Entrypoints["web"].Address, ln.Addr().String()}, {def.Admin.Address, "127.0.0.1:0"}} {
		require.Contains(t, text, `"`+a.from+`"`)
		text = strings.Replace(text, `"`+a.from+`"`, `"`+a.to+`"`, 1)
	}
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(text), 0o644))
	p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("sluice serve did not exit with %s taken; output:\n%s", ln.Addr(), p.Output())
	}
	_, err = p.Exited()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit: %v; output:\n%s", err, p.Output())
	require.Equal(t, 1, exit.ExitCode(), p.Output())
	at := def.Pos("entrypoints", "web", "address")
	require.Contains(t, p.Output(), fmt.Sprintf("%s:%d:%d: entrypoints.web.address: ", cfg, at.Line, at.Col))
	require.Contains(t, p.Output(), "address already in use (another process listens there: stop it, or set another address)")
	require.NotContains(t, p.Output(), "copy configs/default.toml", "a config file is edited where it is")
	starting := strings.Index(p.Output(), `msg="sluice starting"`)
	require.GreaterOrEqual(t, starting, 0, p.Output())
	require.Less(t, starting, strings.Index(p.Output(), "address already in use"), p.Output())
}
