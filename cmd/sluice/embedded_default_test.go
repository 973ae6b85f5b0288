package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/configs"
	"github.com/sluice-gw/sluice/core/config"
)

// `sluice serve` with no --config whose listen address is taken points at the key in the
// embedded default, named as embedded (the user has no configs/default.toml to open), and
// says how to listen elsewhere. serve runs in the test's process, on the embedded default
// with its addresses moved to a listener the test holds (web) and a port of the system's
// choosing (admin): whether the default's own 127.0.0.1:8080 is free or taken on the machine
// decides nothing. The keys keep their positions: only values change. Not parallel: it
// swaps configs.Default, which every load of the embedded default reads.
func TestServeOnTheEmbeddedDefaultNamesItWhenItsAddressIsTaken(t *testing.T) {
	ln := moveEmbeddedDefaultOntoAHeldListener(t)
	def, err := config.LoadDefault()
	require.NoError(t, err)
	defer slog.SetDefault(slog.Default()) // serve sets the process's default logger

	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"serve"}, &out, &errb), errb.String())
	got := errb.String()
	at := def.Pos("entrypoints", "web", "address")
	require.Contains(t, got, fmt.Sprintf("embedded configs/default.toml:%d:%d: entrypoints.web.address: listen tcp %s: ", at.Line, at.Col, ln.Addr()))
	require.Contains(t, got, "address already in use (another process listens there: stop it, or set another address)")
	require.Contains(t, got, "sluice serve --config FILE", "how to listen elsewhere")
	require.NotRegexp(t, `(?m)^configs/default\.toml:`, got, "no bare path to a file the user does not have")
	starting := strings.Index(got, `msg="sluice starting"`)
	require.GreaterOrEqual(t, starting, 0, got)
	require.Less(t, starting, strings.Index(got, "address already in use"), got)
	require.Contains(t, got, `config="embedded default"`)
}

// moveEmbeddedDefaultOntoAHeldListener swaps configs.Default, until the test ends, for the
// embedded default with its web entrypoint's address moved to a listener the test holds (so
// that a serve of it fails at once on the taken address, whatever the machine runs on the
// default's own port) and its admin address to a port of the system's choosing; the keys keep
// their positions. It returns the held listener, closed when the test ends.
func moveEmbeddedDefaultOntoAHeldListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	def, err := config.LoadDefault()
	require.NoError(t, err)
	orig := configs.Default
	t.Cleanup(func() { configs.Default = orig })
	moved := orig
	for _, a := range []struct{ from, to string }{{def.Entrypoints["web"].Address, ln.Addr().String()}, {def.Admin.Address, "127.0.0.1:0"}} {
		from := []byte(`"` + a.from + `"`)
		require.True(t, bytes.Contains(moved, from), "the embedded default has no %s", from)
		moved = bytes.Replace(moved, from, []byte(`"`+a.to+`"`), 1)
	}
	configs.Default = moved
	return ln
}
