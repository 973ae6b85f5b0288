package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// smallestCompare is the argument list of the shortest compare there is: no peer, no sluice
// (--bin names an empty directory, so the compare runs its in-process upstream), one round of
// 200 ms.
func smallestCompare(t *testing.T) []string {
	return []string{"compare", "--peers", "none", "--engines", "none", "--workload", "json",
		"--bin", t.TempDir(), "--concurrency", "2", "--rounds", "1", "--warmup", "10ms", "--duration", "200ms"}
}

// compare's table is the whole of its standard output, from the first line: `| head -1` gets
// the table's first line, not a blank one.
func TestCompareTableStartsStandardOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	cmd := invokedAs(t, bin, dir, "bin/sluice-bench", smallestCompare(t)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	first, _, _ := strings.Cut(stdout.String(), "\n")
	require.True(t, strings.HasPrefix(first, "Command: `bin/sluice-bench compare "), "first line %q of:\n%s", first, stdout.String())
	require.Contains(t, stdout.String(), "| json | direct |")
}

// The report's Command line, pasted into a shell in the directory the compare ran in, runs
// the compare that wrote it: the program as it was invoked, and an argument with a space, a
// quote or a ";" quoted.
func TestCompareCommandLinePastesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	args := append(smallestCompare(t), "--md", `it's "a"; report.md`)
	cmd := invokedAs(t, bin, dir, "./my bin/sluice-bench", args...)
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
	require.Equal(t, append([]string{"./my bin/sluice-bench"}, args...), strings.Split(strings.TrimSuffix(argv.String(), "\x00"), "\x00"), line)

	// Pasted, the line runs the same binary, and its report says the same.
	stdout.Reset()
	again := exec.Command("sh", "-c", line)
	again.Dir, again.Stdout, again.Stderr = dir, &stdout, &stderr
	require.NoError(t, again.Run(), "sh: %s\nstderr:\n%s", line, stderr.String())
	pasted, _, _ := strings.Cut(stdout.String(), "\n")
	require.Equal(t, first, pasted)
}

// compare makes a --workdir that is missing in a directory that exists, and keeps it.
func TestCompareMakesItsWorkDir(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	cmd := invokedAs(t, bin, dir, "bin/sluice-bench", append(smallestCompare(t), "--workdir", "wd")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	st, err := os.Stat(filepath.Join(dir, "wd"))
	require.NoError(t, err)
	require.True(t, st.IsDir())
}
