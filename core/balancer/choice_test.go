package balancer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExcludedBackendsAreNeverPicked(t *testing.T) {
	for _, strategy := range Strategies {
		t.Run(strategy, func(t *testing.T) {
			bs := []*Backend{{ID: 0, Weight: 5}, {ID: 1}, {ID: 2, Weight: 2}}
			bal, err := New(strategy, bs)
			require.NoError(t, err)
			var c Choice
			c.Exclude.Add(0)
			for range 200 {
				b := bal.Pick(&c)
				require.NotNil(t, b)
				require.NotEqual(t, 0, b.ID)
			}
			c.Exclude.Add(1)
			c.Exclude.Add(2)
			require.Nil(t, bal.Pick(&c), "every backend excluded")
			c.Reset()
			require.NotNil(t, bal.Pick(&c))
		})
	}
}

func TestSetBeyond64(t *testing.T) {
	var s Set
	for _, id := range []int{0, 63, 64, 200, -1} {
		s.Add(id)
	}
	require.True(t, s.Has(0) && s.Has(63) && s.Has(64) && s.Has(200))
	require.False(t, s.Has(1) || s.Has(65) || s.Has(-1) || s.Has(1000))
	require.Equal(t, 4, s.Len())
	s.Reset()
	require.Equal(t, 0, s.Len())
	require.False(t, s.Has(200))
}

func TestConnectFailureEjectsWithBackoff(t *testing.T) {
	b := &Backend{ID: 0}
	require.False(t, b.Down())
	b.ConnectFailed()
	require.True(t, b.Down() && b.Ejected())
	first := b.state().ejectedUntil.Load()
	for range 50 { // a burst of requests that picked b before it was ejected
		b.ConnectFailed()
	}
	require.Equal(t, first, b.state().ejectedUntil.Load(), "a burst is one failure, not fifty")
	require.EqualValues(t, 1, b.state().connectFails.Load())
	b.ConnectSucceeded()
	require.False(t, b.Down())
}

func TestEjectedBackendsArePickedOnlyInPanicMode(t *testing.T) {
	bs := []*Backend{{ID: 0}, {ID: 1}}
	bal, err := New(LeastConnections, bs)
	require.NoError(t, err)
	bs[0].ConnectFailed()
	var c Choice
	for range 10 {
		require.Equal(t, 1, bal.Pick(&c).ID)
	}
	bs[1].ConnectFailed()
	require.Nil(t, bal.Pick(&c), "every backend ejected")
	c.IgnoreEjection = true
	require.NotNil(t, bal.Pick(&c), "panic mode picks an ejected backend")
	bs[0].SetDown(true)
	c.Exclude.Add(1)
	require.Nil(t, bal.Pick(&c), "panic mode never picks a down or excluded backend")
}

// A backend refusing requests for a Retry-After is left out like an ejected one, and under
// StrictRefusals (a route that answers for it) even in panic mode: it asked to be left alone
// and would only refuse again.
func TestRefusingBackendsAreLeftOut(t *testing.T) {
	for _, strategy := range Strategies {
		bs := []*Backend{{ID: 0}, {ID: 1}}
		bal, err := New(strategy, bs)
		require.NoError(t, err)
		bs[0].RefuseFor(429, time.Minute)
		var c Choice
		for range 10 {
			require.Equal(t, 1, bal.Pick(&c).ID, strategy)
		}
		bs[1].ConnectFailed()
		require.Nil(t, bal.Pick(&c), "%s: one refusing, one ejected", strategy)
		c.IgnoreEjection, c.StrictRefusals = true, true
		for range 10 {
			require.Equal(t, 1, bal.Pick(&c).ID, "%s: strict panic mode takes the ejected backend, not the refusing one", strategy)
		}
		bs[1].RefuseFor(503, time.Second)
		require.Nil(t, bal.Pick(&c), strategy)
		require.True(t, bs[0].Down() && bs[1].Down())
		c.StrictRefusals = false
		require.NotNil(t, bal.Pick(&c), "%s: plain panic mode takes a refusing backend as an ejected one", strategy)
	}
}

// A refusal that has passed is cleared, so that a server's State (which outlives reloads)
// does not make every later pick read the clock.
func TestPassedRefusalsAndEjectionsAreCleared(t *testing.T) {
	var b Backend
	b.RefuseFor(429, time.Nanosecond)
	b.EjectFor(time.Nanosecond)
	require.Eventually(t, func() bool { return !b.Down() }, 10*time.Second, time.Millisecond)
	require.Zero(t, b.state().refused.Load())
	require.Zero(t, b.state().ejectedUntil.Load())
}

func TestRefusalLastsItsLongestRetryAfter(t *testing.T) {
	var b Backend
	_, _, ok := b.Refusing()
	require.False(t, ok)
	b.RefuseFor(503, time.Minute)
	b.RefuseFor(429, time.Second) // a shorter refusal does not end the longer one
	status, left, ok := b.Refusing()
	require.True(t, ok)
	require.Equal(t, 503, status, "the status of the refusal in force")
	require.Greater(t, left, 50*time.Second)
	require.LessOrEqual(t, left, time.Minute)
}

func TestChoiceCopyFrom(t *testing.T) {
	var src, dst Choice
	src.Exclude.Add(3)
	src.Exclude.Add(130)
	src.IgnoreEjection = true
	dst.Exclude.Add(5)
	dst.CopyFrom(&src)
	require.True(t, dst.Exclude.Has(3) && dst.Exclude.Has(130) && dst.IgnoreEjection)
	require.False(t, dst.Exclude.Has(5))
	dst.Exclude.Add(7)
	require.False(t, src.Exclude.Has(7), "the copy does not share the source's storage")
	src.Exclude.Add(200)
	require.False(t, dst.Exclude.Has(200))
	require.Zero(t, testing.AllocsPerRun(100, func() { dst.CopyFrom(&src) }))
}
