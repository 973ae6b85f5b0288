package affinity

import (
	"runtime"
	"time"

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

// The Epochs an index gives share what they saw of a backend by its key, whatever its
// position: a restart the replacing router sees first still drops the hints learned before
// it, and is dropped once. The index holds a backend's epoch only while an Epochs does.
func TestIndexEpochsAreSharedByKey(t *testing.T) {
	x := NewIndex(Config{})
	s := testDomain.Scope()
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("q", 9000)))
	has := func(tg Target) bool {
		cs := candidates(tg)
		x.Lookup(s, p, cs)
		return cs[0].Prefix > 0
	}
	func() { // old and repl are let go after it
		old := x.Epochs([]uint64{10, 11})
		old.See(x, 0, 10, 0)
		x.Learn(s, p, 10)

		// The backend restarts; the router that replaces old, with the backends in another
		// order, sees it first.
		repl := x.Epochs([]uint64{11, 10})
		require.True(t, repl.Current(1, 0), "the epoch old saw")
		repl.See(x, 1, 10, 1)
		require.False(t, has(10), "the hints learned before the restart are dropped")
		require.False(t, old.Current(0, 0), "old's response from before the restart is not learned")
		x.Learn(s, p, 10)
		old.See(x, 0, 10, 1)
		require.True(t, has(10), "old sees the same epoch: the hints learned since stay")
	}()
	require.Eventually(t, func() bool {
		runtime.GC()
		x.Epochs(nil)
		x.epochs.mu.Lock()
		defer x.epochs.mu.Unlock()
		return len(x.epochs.cells) == 0
	}, 10*time.Second, time.Millisecond, "the epochs no Epochs holds are let go")
}
