package main_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
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

// The report's Command line, pasted into a shell, runs the compare that wrote it: an argument
// with a space, a quote or a ";" is quoted.
func TestCompareCommandLinePastesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	args := []string{"compare", "--peers", "none", "--engines", "none", "--workload", "json",
		"--bin", t.TempDir(), "--concurrency", "2", "--rounds", "1", "--warmup", "10ms", "--duration", "200ms",
		"--md", filepath.Join(dir, `it's "a"; report.md`)}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	first, _, _ := strings.Cut(stdout.String(), "\n")
	line, ok := strings.CutPrefix(first, "Command: `")
	require.True(t, ok, "first line %q", first)
	line, ok = strings.CutSuffix(line, "`  ")
	require.True(t, ok, "first line %q", first)
	var argv bytes.Buffer
	sh := exec.Command("sh", "-c", "set -- "+line+"\nprintf '%s\\0' \"$@\"")
	sh.Stdout = &argv
	require.NoError(t, sh.Run(), "sh: %s", line)
	require.Equal(t, append([]string{"sluice-bench"}, args...), strings.Split(strings.TrimSuffix(argv.String(), "\x00"), "\x00"), line)
}
