package main_test

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// The command line follows sluice's: help asked for goes to standard output with status 0, on
// the tool and on every subcommand; what the tool does not understand exits 2.
func TestHelpAndUsageErrors(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	run := func(args ...string) (stdout, stderr string, code int) {
		var o, e bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return o.String(), e.String(), code
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "compare"}, {"compare", "--help"}, {"run", "-h"}, {"affinity", "--help"}} {
		out, errOut, code := run(args...)
		require.Zero(t, code, "%v", args)
		require.NotEmpty(t, out, "%v: help on standard output", args)
		require.Empty(t, errOut, "%v", args)
	}
	for _, args := range [][]string{{}, {"nope"}, {"compare", "--bogus"}, {"run", "extra"}} {
		_, errOut, code := run(args...)
		require.Equal(t, 2, code, "%v", args)
		require.NotEmpty(t, errOut, "%v: the error on standard error", args)
	}
}
