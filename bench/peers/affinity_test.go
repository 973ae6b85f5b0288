package peers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
)

// sluiceBinDir returns a directory holding a sluice binary built from this tree, under the
// name RunAffinity looks for.
func sluiceBinDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Symlink(testenv.BuildBinary(t, "./cmd/sluice"), filepath.Join(dir, "sluice")))
	return dir
}

// Every policy starts on a fleet just restarted, which the gateway keeps out of its choice
// until it has observed each instance again: a warmup shorter than that must not leave the
// measured window to requests the gateway answers 503. One gateway and two are both waited for.
func TestAffinityShortRunHasNoErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs sluice and an llmsim fleet")
	}
	res, err := RunAffinity(context.Background(), AffinityOptions{
		Policies: []string{PolicyRoundRobin, PolicyAffinity2},
		Duration: time.Second, Warmup: 200 * time.Millisecond,
		BinDirs: []string{sluiceBinDir(t)}, Log: testLog{t},
	})
	require.NoError(t, err)
	require.Len(t, res.Rows, 2)
	for _, row := range res.Rows {
		require.Positive(t, row.OK, row.Policy)
		require.Zero(t, row.Errors, row.Policy)
	}
}

// A policy whose measured window had failed requests is named under the table with how many
// failed and why: its hit rate, TTFT and load must not read as those of a clean run.
func TestAffinityReportNamesFailedRequests(t *testing.T) {
	res := &AffinityResult{Rows: []AffinityRow{
		{Policy: PolicyRoundRobin, Replicas: 1, OK: 60, Errors: 1085, ErrorSummary: "status_5xx 1085 (503 1085)"},
		{Policy: PolicyAffinity, Replicas: 1, OK: 90},
	}}
	failed := "round-robin: 1085 of 1145 requests in the measured window failed (status_5xx 1085 (503 1085)); " +
		"its hit rate, TTFT and load are not those of the run asked for"
	require.Equal(t, []string{failed}, res.Failures())
	var b strings.Builder
	require.NoError(t, res.Markdown(&b))
	require.Contains(t, b.String(), "| round-robin | 1 | 0.0% | 0 | 0.0 | 0.0 | 0.00 | 60 (1085) |\n")
	require.Contains(t, b.String(), "\n- **"+failed+"**\n")

	clean := &AffinityResult{Rows: res.Rows[1:]}
	require.Nil(t, clean.Failures())
	b.Reset()
	require.NoError(t, clean.Markdown(&b))
	require.NotContains(t, b.String(), "failed")
}

// A value RunAffinity would refuse, or fail on once its fleet is up, is refused by Check,
// named by its flag with the value as that flag prints it (of a list, the element refused).
func TestAffinityCheckNamesTheRefusedValue(t *testing.T) {
	ok := AffinityOptions{Instances: 2, Concurrency: 2, Duration: time.Second, Warmup: time.Second,
		Turns: 2, MaxTokens: 8, TTFT: time.Millisecond, PerUncachedToken: time.Microsecond,
		ITL: time.Millisecond, Blocks: 64, Policies: AffinityPolicies}
	require.NoError(t, ok.Check())
	for _, c := range []struct {
		change      func(o *AffinityOptions)
		flag, value string
	}{
		{func(o *AffinityOptions) { o.MaxTokens = 0 }, "max-tokens", "0"},
		{func(o *AffinityOptions) { o.MaxTokens = llmsim.MaxOutputTokens + 1 }, "max-tokens", "1048577"},
		{func(o *AffinityOptions) { o.Policies = []string{PolicyOracle, "round-robbin"} }, "policies", "round-robbin"},
		{func(o *AffinityOptions) { o.Policies = []string{PolicyOracle, PolicyOracle} }, "policies", PolicyOracle},
		// An empty list has no element to name.
		{func(o *AffinityOptions) { o.Policies = []string{} }, "policies", ""},
	} {
		o := ok
		c.change(&o)
		var oe *OptionError
		require.ErrorAs(t, o.Check(), &oe, "%+v", o)
		require.Equal(t, [2]string{c.flag, c.value}, [2]string{oe.Flag, oe.Value}, "%v", oe)
	}
}
