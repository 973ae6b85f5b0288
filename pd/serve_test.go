package pd_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A streamed chat completion through the gateway runs decode/prepare, prefill/execute and
// decode/execute, in this order, on a prefill and a decode worker, and the client gets the
// decode worker's stream to its end.
func TestStreamRunsPrepPrefillDecodeOnTwoWorkers(t *testing.T) {
	f := startFleet(t, nil)
	g := startGateway(t, f.gatewayTOML("", ""))
	status, data := stream(t, g, chatBody("tell me a story"))
	require.Equal(t, 200, status, data)
	require.Equal(t, "[DONE]", data[len(data)-1])
	require.Contains(t, data[len(data)-2], `"usage"`)

	var ids []string
	for _, w := range []int{decodeA, decodeB} {
		ids = append(ids, f.executions(w, "decode")...)
	}
	require.Len(t, ids, 1, "one decode/execute in all")
	calls := f.calls(ids[0])
	var prefillW, decodeW string
	for w, cs := range calls {
		for _, c := range cs {
			switch c.Call {
			case "prefill":
				prefillW = w
			case "decode":
				decodeW = w
			}
		}
	}
	require.Contains(t, []string{"prefill-a", "prefill-b"}, prefillW)
	require.Contains(t, []string{"decode-a", "decode-b"}, decodeW)
	d := calls[decodeW]
	require.Len(t, d, 2, "prepare then decode on the decode worker: %+v", d)
	require.Equal(t, "prepare", d[0].Call)
	require.Equal(t, "decode", d[1].Call)
	p := calls[prefillW]
	require.Len(t, p, 1)
	require.True(t, d[0].At.Before(p[0].At), "prepare before prefill")
	require.True(t, p[0].At.Before(d[1].At), "prefill before decode")
}
