package affinity

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/internal/steps"
)

// TestDeepBodiesCostAFewTimesTheirLength checks the walk's budget: a body whose objects nest
// deep around most of its bytes is refused with ErrTooCostly after reading it a few times,
// where it used to be read once per level; white space that the canonical stream drops is
// bounded the same way.
func TestDeepBodiesCostAFewTimesTheirLength(t *testing.T) {
	padded := []byte(`{"messages":[{"role":"user","content":[{"type":"data"` +
		strings.Repeat(`,"a":{"z":0`, 40) + strings.Repeat(" ", 8<<20) + strings.Repeat("}", 40) + `}]}]}`)
	for name, body := range map[string][]byte{
		"numbers 60 objects deep":     nestedBody(60, 8<<20),
		"white space 43 objects deep": padded,
	} {
		t.Run(name, func(t *testing.T) {
			var p Print
			var err error
			n := steps.Count(func() { err = Fingerprint(openai.ChatCompletions, body, openai.Span{}, openai.Span{}, &p) })
			require.ErrorIs(t, err, ErrTooCostly)
			require.Empty(t, p.Checkpoints)
			require.Zero(t, p.Scanned)
			// The top-level scan, the budget, the object that overdrew it, and the arrays and
			// strings the walk counts besides (each at most the body).
			require.LessOrEqual(t, n, int64(8*len(body)+16*MaxScanBytes), "steps for %d bytes", len(body))
		})
	}
}

// TestLargeConversationsStayWithinTheBudget checks that the budget refuses no request of the
// usual shapes, however long: many messages, or one message, content part or tool call's
// arguments as long as the body.
func TestLargeConversationsStayWithinTheBudget(t *testing.T) {
	long := text("long", 16<<20)
	for name, body := range map[string][]byte{
		"many turns":       chatBody(16 << 20),
		"one long message": []byte(`{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`),
		"one long part":    []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"}]}]}`),
		"long tool call arguments": []byte(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"` +
			long + `"}}]}]}`),
	} {
		t.Run(name, func(t *testing.T) {
			p := fingerprint(t, openai.ChatCompletions, body)
			require.True(t, p.Truncated)
			require.Equal(t, MaxScanBytes, p.Scanned)
		})
	}
}
