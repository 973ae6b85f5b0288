package balancer

import (
	"testing"

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
