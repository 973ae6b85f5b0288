package main_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// compare's table is the whole of its standard output, from the first line: `| head -1` gets
// the table's first line, not a blank one.
func TestCompareTableStartsStandardOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	// --bin names an empty directory: the compare runs its in-process upstream.
	cmd := exec.Command(bin, "compare", "--peers", "none", "--engines", "none", "--workload", "json",
		"--bin", t.TempDir(), "--concurrency", "2", "--rounds", "1", "--warmup", "10ms", "--duration", "200ms")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	first, _, _ := strings.Cut(stdout.String(), "\n")
	require.True(t, strings.HasPrefix(first, "Command: `sluice-bench compare "), "first line %q of:\n%s", first, stdout.String())
	require.Contains(t, stdout.String(), "| json | direct |")
}
