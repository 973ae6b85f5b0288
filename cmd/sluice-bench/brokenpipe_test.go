//go:build unix

package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// A compare whose standard output has no reader left (`| head -1` done reading, `| true`)
// still writes its report files, --out, the SVG beside it and --md, and exits 0: the table it
// could not print is what the reader gave up.
func TestCompareWithoutStdoutReaderWritesItsReports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	out, md := filepath.Join(dir, "cmp.json"), filepath.Join(dir, "cmp.md")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close()) // no reader: the first write to the pipe fails
	// --bin names an empty directory: the compare runs its in-process upstream.
	cmd := exec.Command(bin, "compare", "--peers", "none", "--engines", "none", "--workload", "json",
		"--bin", t.TempDir(), "--concurrency", "2", "--rounds", "1", "--warmup", "10ms", "--duration", "200ms",
		"--out", out, "--md", md)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	_ = w.Close()
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	for _, f := range []string{out, filepath.Join(dir, "cmp.svg"), md} {
		b, err := os.ReadFile(f)
		require.NoError(t, err, "stderr:\n%s", stderr.String())
		require.Contains(t, string(b), "direct", f)
	}
}

// affinity, too, writes its --out report before the table, and a standard output without a
// reader costs it neither the file nor the exit status.
func TestAffinityWithoutStdoutReaderWritesItsReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an affinity benchmark")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	out := filepath.Join(t.TempDir(), "affinity.json")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close()) // no reader: the first write to the pipe fails
	// The oracle policy alone runs no sluice: the fleet is in-process.
	cmd := exec.Command(bin, "affinity", "--policies", "oracle", "--instances", "2", "--concurrency", "2",
		"--max-tokens", "4", "--warmup", "10ms", "--duration", "200ms", "--bin", t.TempDir(), "--out", out)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	_ = w.Close()
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	require.Contains(t, string(b), `"policy": "oracle"`)
}
