package peers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/harness"
)

// A binary not found is reported with the places searched written as a list a person reads,
// not as Go prints a slice ("[./bin]").
func TestFindBinaryNamesWhereItLooked(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir := t.TempDir()
	_, err := FindBinary("sluice-no-such-binary", dir, "")
	require.EqualError(t, err, "peers: sluice-no-such-binary not found in "+dir+", PATH, /usr/sbin, /usr/local/sbin, /sbin")
}

// Without llmsim, the compare's note says where it looked, as the note of a missing sluice
// does.
func TestCompareWithoutLlmsimNamesWhereItLooked(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a compare")
	}
	t.Setenv("PATH", t.TempDir())
	a, b := t.TempDir(), t.TempDir()
	cmp, err := Compare(context.Background(), CompareOptions{
		Peers: []string{}, Engines: []string{}, Workloads: []string{harness.WorkloadJSON},
		BinDirs: []string{a, b}, Rounds: 1, Concurrency: 1,
		Duration: 100 * time.Millisecond, Warmup: 10 * time.Millisecond, Log: testLog{t},
	})
	require.NoError(t, err)
	require.Contains(t, strings.Join(cmp.Notes, "\n"), "llmsim not found in "+a+", "+b+" or PATH: ")
}
