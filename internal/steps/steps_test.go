package steps

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCountOnlyCountsInsideCount(t *testing.T) {
	Add(5)
	require.EqualValues(t, 7, Count(func() { Add(3); Add(4) }))
	Add(5)
	require.EqualValues(t, 0, Count(func() {}))
}
