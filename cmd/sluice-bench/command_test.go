package main_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/sluice-gw/sluice/bench/report"
	"github.com/sluice-gw/sluice/bench/testenv"
)

// invokedAs returns a command that runs bin with args as a shell in dir runs the program name
// (a path relative to dir, such as "bin/sluice-bench"): name is its os.Args[0], and a link at
// dir/name leads to bin, so that a command line starting with name runs bin there too.
func invokedAs(t *testing.T, bin, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	link := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(bin, link))
	cmd := exec.Command(bin, args...)
	cmd.Args[0], cmd.Dir = name, dir
	return cmd
}

// commandJSON returns the "command" of the JSON report in file.
func commandJSON(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var r struct{ Command string }
	require.NoError(t, json.Unmarshal(b, &r), "%s", b)
	return r.Command
}

// run's output starts with the command line that ran it, as compare's report does, starting
// with the program as it was typed (bin/sluice-bench, not a bare sluice-bench that pastes
// back only when it is on PATH); the JSON result holds the same line.
func TestRunReportsItsCommandLine(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	up := harness.StartUpstream(ln, harness.UpstreamOptions{})
	defer up.Close()
	dir := t.TempDir()
	args := []string{"run", "--target", "http://" + up.Addr(), "--concurrency", "1",
		"--warmup", "10ms", "--duration", "200ms", "--header", "X-Note: a b", "--out", "run.json"}
	cmd := invokedAs(t, bin, dir, "bin/sluice-bench", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	want := report.CommandLine(append([]string{"bin/sluice-bench"}, args...)...)
	require.Equal(t, "bin/sluice-bench run --target http://"+up.Addr()+" --concurrency 1 --warmup 10ms --duration 200ms --header 'X-Note: a b' --out run.json", want)
	first, _, _ := strings.Cut(stderr.String(), "\n")
	require.Equal(t, "Command: "+want, first, "stderr:\n%s", stderr.String())
	require.Equal(t, want, commandJSON(t, filepath.Join(dir, "run.json")))
}

// A report is made to be shared: the command line it carries shows no credential given with
// --header, in either spelling of the flag, in its text or its JSON.
func TestRunReportsNoCredentialOfItsCommandLine(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	up := harness.StartUpstream(ln, harness.UpstreamOptions{})
	defer up.Close()
	dir := t.TempDir()
	cmd := invokedAs(t, bin, dir, "bin/sluice-bench", "run", "--target", "http://"+up.Addr(),
		"--concurrency", "1", "--warmup", "10ms", "--duration", "200ms",
		"--header", "Authorization: Bearer sk-live-1", "-header=X-Api-Key: sk-live-2",
		"--header", "X-Note: Basic-ish", "--path", "/v1/chat/completions?api_key=sk-live-3", "--out", "run.json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	want := "bin/sluice-bench run --target http://" + up.Addr() + " --concurrency 1 --warmup 10ms --duration 200ms" +
		" --header 'Authorization: Bearer <redacted>' '-header=X-Api-Key: <redacted>' --header 'X-Note: Basic-ish'" +
		" --path '/v1/chat/completions?api_key=<redacted>' --out run.json"
	first, _, _ := strings.Cut(stderr.String(), "\n")
	require.Equal(t, "Command: "+want, first)
	require.Equal(t, want, commandJSON(t, filepath.Join(dir, "run.json")))
	for _, out := range []string{stdout.String(), stderr.String()} {
		require.NotContains(t, out, "sk-live")
	}
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	require.NoError(t, err)
	require.NotContains(t, string(b), "sk-live")
	require.Contains(t, string(b), "Bearer <redacted>", "the report reads as the command line does, not HTML-escaped")
}

// A closed loop whose responses take longer than its window fails saying to lengthen the
// window: it has no --rate to raise.
func TestRunClosedLoopWindowShorterThanAResponse(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	up := harness.StartUpstream(ln, harness.UpstreamOptions{TTFT: 700 * time.Millisecond})
	defer up.Close()
	cmd := exec.Command(bin, "run", "--target", "http://"+up.Addr(), "--concurrency", "1",
		"--warmup", "100ms", "--duration", "200ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", stderr.String())
	require.Equal(t, 1, ee.ExitCode(), "stderr:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "sluice-bench run: no response came within the window: lengthen --duration")
	require.NotContains(t, stderr.String(), "--rate")
}

// affinity's table and JSON report carry the command line that ran it, as compare's do.
func TestAffinityReportsItsCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an affinity benchmark")
	}
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	dir := t.TempDir()
	// The oracle policy alone runs no sluice: the fleet is in-process.
	args := []string{"affinity", "--policies", "oracle", "--instances", "2", "--concurrency", "2",
		"--max-tokens", "4", "--warmup", "10ms", "--duration", "200ms", "--bin", "nobin", "--out", "affinity.json"}
	cmd := invokedAs(t, bin, dir, "./bin/sluice-bench", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	want := report.CommandLine(append([]string{"./bin/sluice-bench"}, args...)...)
	first, _, _ := strings.Cut(stdout.String(), "\n")
	require.Equal(t, "Command: `"+want+"`  ", first, "stdout:\n%s", stdout.String())
	require.Contains(t, stdout.String(), "\n| oracle |")
	require.Equal(t, want, commandJSON(t, filepath.Join(dir, "affinity.json")))
}

// A refused flag's value is shown in the error, and an error is shared as a report is: a
// --header or a URL that carries a credential is refused without showing it, for a field
// missing its colon (the likeliest slip), a key given alone, or a URL's user information.
func TestRunRefusesAValueWithoutShowingItsCredential(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	for _, args := range [][]string{
		{"--target", "http://127.0.0.1:1", "--header", "Authorization Bearer sk-live-1"},
		{"--target", "http://127.0.0.1:1", "--header=Authorization Bearer sk-live-2"},
		{"--target", "http://127.0.0.1:1", "--header", "sk-live-3"},
		{"--target", "http://127.0.0.1:1", "--header", "Authorization: Bearer sk-live-4\r\nX: y"},
		{"--target", "http://127.0.0.1:1", "--header", "X-Note: a\nAuthorization: Bearer sk-live-7"},
		{"--target", "http://127.0.0.1:1", "--header", "X-Key sk-live-8"},
		{"--target", "http://u:sk-live-5@127.0.0.1:1"},
		{"--target", "http://127.0.0.1:1", "--alt-target", "http://u:sk-live-6@127.0.0.1:1"},
	} {
		cmd := exec.Command(bin, append([]string{"run", "--concurrency", "1"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%q: stderr:\n%s", args, stderr.String())
		require.Equal(t, 2, ee.ExitCode(), "%q: stderr:\n%s", args, stderr.String())
		require.Contains(t, stderr.String(), "invalid value ", "%q", args)
		require.NotContains(t, stderr.String()+stdout.String(), "sk-live", "%q", args)
	}
}
