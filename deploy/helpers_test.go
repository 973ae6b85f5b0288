package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the module's directory (tests run in the package's).
const root = ".."

func rootPath(t *testing.T, rel ...string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(append([]string{root}, rel...)...))
	require.NoError(t, err)
	return abs
}

// buildSluice builds the gateway as the packages ship it (static) into a test directory.
func buildSluice(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the binary under test")
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", bin, "./cmd/sluice")
	cmd.Dir = rootPath(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// run runs a command in the module's directory and returns its standard output, standard
// error and exit code (-1 when it could not start).
func run(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = rootPath(t)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return stdout.String(), stderr.String(), code
}
