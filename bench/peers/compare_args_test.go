package peers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The upstream's flags: Compare's own, less those --sim-args give (llmsim refuses a flag
// given twice, so theirs must replace Compare's, not follow it).
func TestLLMSimArgsLetSimArgsReplaceCompareFlags(t *testing.T) {
	o := CompareOptions{SimITL: 5 * time.Millisecond, SimTokens: 16,
		SimArgs: []string{"--itl-per-running", "1ms", "-tokens=8", "--fault-rate", "0.1"}}
	require.Equal(t, []string{
		"--listen", "127.0.0.1:1", "--ttft", "0s", "--itl", "5ms",
		"--per-uncached-token", "0s", "--max-running", "100000", "--max-waiting", "100000", "--max-model-len", "0",
		"--itl-per-running", "1ms", "-tokens=8", "--fault-rate", "0.1",
	}, llmsimArgs(o, "127.0.0.1:1"))
}
