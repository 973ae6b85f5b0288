package pd_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// execution_timeout_ms bounds the exchange: a prefill that outlasts it gets the client a 504
// and both workers an abort.
func TestExecutionTimeoutAbortsBothWorkers(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillA || i == prefillB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	})
	g := startGateway(t, f.gatewayTOML("", "execution_timeout_ms = 300"))
	status, data := stream(t, g, chatBody("too slow"))
	require.Equal(t, 504, status, data)
	require.Contains(t, data[0], `"upstream_timeout"`)
	var id string
	for _, w := range []int{prefillA, prefillB} {
		if ids := f.executions(w, "prefill"); len(ids) > 0 {
			id = ids[0]
		}
	}
	require.NotEmpty(t, id)
	calls := f.calls(id)
	require.Len(t, calls, 2)
	for w := range calls {
		f.waitCall(t, indexOf(f.ids, w), "abort", id)
	}
	require.Empty(t, f.executions(decodeA, "decode"))
	require.Empty(t, f.executions(decodeB, "decode"))
}

// execution_timeout_ms covers the decode stream too: a stream that outlasts it ends with the
// gateway's error event, and both workers get an abort.
func TestExecutionTimeoutEndsTheStream(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == decodeA || i == decodeB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	})
	g := startGateway(t, f.gatewayTOML("", "execution_timeout_ms = 500"))
	status, data := stream(t, g, chatBody("a slow stream"))
	require.Equal(t, 200, status, "the stream had begun")
	require.NotContains(t, data, "[DONE]")
	require.NotEmpty(t, data)
	require.Contains(t, data[len(data)-1], `"upstream_stream_error"`)
	var id string
	for _, w := range []int{decodeA, decodeB} {
		if ids := f.executions(w, "decode"); len(ids) > 0 {
			id = ids[0]
		}
	}
	require.NotEmpty(t, id)
	for w := range f.calls(id) {
		f.waitCall(t, indexOf(f.ids, w), "abort", id)
	}
}
