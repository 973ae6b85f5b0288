package share

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSamplerTakesExactlyItsShareEvenlySpaced(t *testing.T) {
	for _, tc := range []struct {
		percent float64
		calls   int
		want    int
	}{
		{10, 1000, 100}, {3, 100, 3}, {0, 1000, 0}, {100, 50, 50}, {0.5, 10_000, 50}, {33.33, 10_000, 3333},
	} {
		s := NewSampler(tc.percent)
		got, last, maxGap := 0, 0, 0
		for i := 1; i <= tc.calls; i++ {
			if s.Take() {
				got++
				maxGap = max(maxGap, i-last)
				last = i
			}
		}
		require.Equal(t, tc.want, got, "%v%% of %d calls", tc.percent, tc.calls)
		if tc.percent == 10 {
			require.Equal(t, 10, maxGap, "one in ten, every tenth")
		}
	}
}

func TestSamplerIsExactUnderConcurrency(t *testing.T) {
	s := NewSampler(10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; i < 1250; i++ {
				if s.Take() {
					n++
				}
			}
			mu.Lock()
			got += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, 1000, got)
}

func TestSplitIsSmoothAndExactOverAWindow(t *testing.T) {
	s := NewSplit(2)
	s.Set([]int64{BasisPoints(90), BasisPoints(10)})
	counts := [2]int{}
	for i := 1; i <= 100; i++ {
		counts[s.Pick()]++
		// After any n picks the second share has n/10 of them, give or take one.
		require.InDelta(t, float64(i)/10, float64(counts[1]), 1)
	}
	require.Equal(t, [2]int{90, 10}, counts)

	s.Set([]int64{0, Scale})
	for i := 0; i < 10; i++ {
		require.Equal(t, 1, s.Pick())
	}
	s.Set([]int64{0, 0})
	require.Equal(t, -1, s.Pick())
}
