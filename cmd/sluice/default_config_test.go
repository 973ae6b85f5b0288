package main_test

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/config"
)

// `sluice serve` with no --config whose listen address is taken points at the key in the
// embedded default, named as embedded: the user has no configs/default.toml to open.
func TestServeOnTheEmbeddedDefaultNamesItWhenItsAddressIsTaken(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	def, err := config.LoadDefault()
	require.NoError(t, err)
	addr := def.Entrypoints["web"].Address
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		defer ln.Close()
	} else {
		// Taken by someone else already: the situation under test all the same.
		require.ErrorIs(t, err, syscall.EADDRINUSE)
	}
	p := testenv.StartProcess(t, bin, "serve")
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("sluice serve did not exit with %s taken; output:\n%s", addr, p.Output())
	}
	_, err = p.Exited()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit: %v; output:\n%s", err, p.Output())
	require.Equal(t, 1, exit.ExitCode(), p.Output())
	at := def.Pos("entrypoints", "web", "address")
	require.Contains(t, p.Output(), fmt.Sprintf("embedded configs/default.toml:%d:%d: entrypoints.web.address: ", at.Line, at.Col))
	require.Contains(t, p.Output(), "address already in use (another process listens there: stop it, or set another address)")
	require.Contains(t, p.Output(), "sluice serve --config FILE", "how to listen elsewhere")
	// The log's lines come out in the order they happened, before the error that ends it.
	starting := strings.Index(p.Output(), `msg="sluice starting"`)
	require.GreaterOrEqual(t, starting, 0, p.Output())
	require.Less(t, starting, strings.Index(p.Output(), "address already in use"), p.Output())
	require.NotRegexp(t, `(?m)^configs/default\.toml:`, p.Output(), "no bare path to a file the user does not have")
}
