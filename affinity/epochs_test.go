package affinity

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

// A backend's hints survive its first sighting and later ones in the same epoch, and go
// when it is seen in another epoch (it restarted); the other backends' hints stay.
func TestEpochsDropTheHintsOfARestartedBackend(t *testing.T) {
	x := NewIndex(Config{})
	s := testDomain.Scope()
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("q", 9000)))
	e := NewEpochs(2)
	has := func(tg Target) bool {
		cs := candidates(tg)
		x.Lookup(s, p, cs)
		return cs[0].Prefix > 0
	}
	e.See(x, 0, 10, 0)
	e.See(x, 1, 11, 4)
	x.Learn(s, p, 10)
	x.Learn(s, p, 11)
	e.See(x, 0, 10, 0)
	e.See(x, 1, 11, 4)
	require.True(t, has(10) && has(11), "seen again in the same epoch")
	require.True(t, e.Current(0, 0))

	e.See(x, 0, 10, 1)
	require.False(t, has(10), "the restarted backend's hints are dropped")
	require.True(t, has(11))
	require.False(t, e.Current(0, 0), "a response chosen before the restart is not learned")
	require.True(t, e.Current(0, 1))

	// Beyond n, or without Epochs, nothing is tracked.
	e.See(x, 5, 11, 9)
	var none *Epochs
	none.See(x, 0, 11, 9)
	require.True(t, has(11))
	require.True(t, e.Current(5, 9) && none.Current(0, 9))
}
