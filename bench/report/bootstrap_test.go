package report

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/stretchr/testify/require"
)

// The percentile of several histograms' buckets, each taken any number of times, is the one
// the histograms merged that many times give: the pooled figures and the bootstrap's resamples
// agree with what Summarize reports.
func TestWeightedBarsPercentileIsTheMergedHistograms(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 200 {
		n := 1 + rng.IntN(5)
		hists := make([]*harness.Histogram, n)
		per := make([][]harness.Bar, n)
		for h := range hists {
			hists[h] = harness.NewHistogram()
			for range 1 + rng.IntN(400) {
				// Mostly near 2 ms, a tail up to 50 ms, as a TTFT.
				v := int64(2e6 + rng.NormFloat64()*2e5)
				if rng.IntN(50) == 0 {
					v = int64(rng.IntN(50e6))
				}
				hists[h].Record(v)
			}
			per[h] = hists[h].Bars()
		}
		wb := newWeightedBars(per)
		w := make([]int, n)
		merged := harness.NewHistogram()
		for h := range w {
			w[h] = rng.IntN(3)
			for range w[h] {
				merged.Merge(hists[h])
			}
		}
		for _, p := range []float64{0.1, 50, 90, 99, 99.9, 100} {
			require.Equal(t, merged.ValueAtPercentile(p), wb.percentile(p, w), "trial %d, weights %v, p%v", trial, w, p)
		}
	}
}

// Every resample of n rounds appears once with its multinomial probability: C(2n−1, n) of
// them, summing to 1; the resample that takes each round once has probability n!/nⁿ.
func TestForEachResampleEnumeratesTheBootstrapDistribution(t *testing.T) {
	for n := 1; n <= exactBootstrapRounds; n++ {
		var count int
		var sum, ones float64
		forEachResample(n, func(w []int, weight float64) {
			count++
			sum += weight
			total, all := 0, true
			for _, k := range w {
				total += k
				all = all && k == 1
			}
			require.Equal(t, n, total, "a resample has n rounds")
			if all {
				ones = weight
			}
		})
		require.Equal(t, binomial(2*n-1, n), count, "n=%d", n)
		require.InDelta(t, 1, sum, 1e-9, "n=%d", n)
		fact := 1.0
		for i := 2; i <= n; i++ {
			fact *= float64(i)
		}
		require.InDelta(t, fact/math.Pow(float64(n), float64(n)), ones, 1e-12, "n=%d", n)
	}
	var draws int
	forEachResample(exactBootstrapRounds+3, func(w []int, weight float64) {
		draws++
		require.InDelta(t, 1.0/bootstrapDraws, weight, 1e-15)
	})
	require.Equal(t, bootstrapDraws, draws, "past the exact limit, a fixed number of draws")
}

func binomial(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
	}
	return r
}

// tail returns the buckets of 1,000 values at 1 ms of which slow are at slowMs instead.
func tail(slow int, slowMs float64) []harness.Bar {
	h := harness.NewHistogram()
	for i := range 1000 {
		v := 1e6
		if i < slow {
			v = slowMs * 1e6
		}
		h.Record(int64(v))
	}
	return h.Bars()
}

// The pooled rise is the figure on all rounds' samples together; rounds that agree give an
// interval of that one value, and one round whose attacked tail jumps widens the interval to
// take in the resamples that hold it more or less often.
func TestPooledRiseCarriesTheRoundsSpread(t *testing.T) {
	steady := riseSamples{attacked: tail(20, 3), clean: tail(20, 2), refAttacked: tail(20, 2), refClean: tail(20, 2)}
	iv, ok := pooledRise([]riseSamples{steady, steady, steady, steady, steady})
	require.True(t, ok)
	require.InDelta(t, 1.5, iv.Value, 0.01, "3 ms over 2 ms against 2 ms over 2 ms")
	require.Equal(t, iv.Value, iv.Low)
	require.Equal(t, iv.Value, iv.High)
	require.Equal(t, 5, iv.Rounds)

	// One round in five with 4% of its attacked samples at 30 ms: pooled, 0.8% of the samples,
	// under 1%, so the p99 stays at 3 ms; resamples that draw that round twice or more put
	// it over 1% (30 ms), and they are about a quarter of all resamples.
	jump := steady
	jump.attacked = tail(40, 30)
	iv, ok = pooledRise([]riseSamples{steady, steady, jump, steady, steady})
	require.True(t, ok)
	require.InDelta(t, 1.5, iv.Value, 0.01)
	require.InDelta(t, 1.5, iv.Low, 0.01)
	require.InDelta(t, 15, iv.High, 0.1, "a quarter of the resamples hold the jump twice or more")

	_, ok = pooledRise([]riseSamples{steady, {attacked: tail(20, 3), clean: nil, refAttacked: tail(20, 2), refClean: tail(20, 2)}})
	require.False(t, ok, "a round without samples: no pooled figure")
	_, ok = pooledRise(nil)
	require.False(t, ok)
}
