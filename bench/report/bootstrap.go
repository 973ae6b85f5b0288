package report

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/sluice-gw/sluice/bench/harness"
)

// Interval is a figure pooled over rounds with the spread a round bootstrap gives it: Value
// is the figure on every round's samples taken together; Low and High are the 5th and 95th
// percentiles of the same figure over the bootstrap's resamples of the rounds (a 90%
// interval). Rounds counts the rounds it rests on; 0 when the figure does not apply.
type Interval struct {
	Value  float64 `json:"value"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
	Rounds int     `json:"rounds"`
}

// exactBootstrapRounds is the most rounds whose resamples the bootstrap enumerates (1,716
// multisets of 7); past it, bootstrapDraws random resamples stand in for them.
const (
	exactBootstrapRounds = 7
	bootstrapDraws       = 2000
	bootstrapSeed        = 1
)

// riseSamples is one round of a pooled rise figure: the target's histogram attacked and clean,
// and the reference's.
type riseSamples struct {
	attacked, clean, refAttacked, refClean []harness.Bar
}

// pooledRise returns the target's p99 attacked over clean, over the reference's, each p99
// taken over the samples of all rounds together, with a 90% interval from a bootstrap over
// rounds (Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 6 and 13): the
// rounds are resampled with replacement, the four runs of a round staying together because
// they shared the machine's state. Rounds are the unit because the noise of this figure is
// between rounds (a scheduling hiccup moves one round's tail), not between samples, which a
// round's hundreds of streams share. With up to exactBootstrapRounds rounds every resample
// is enumerated with its multinomial weight, so the interval is exact and repeatable; past
// that a fixed-seed sample of bootstrapDraws resamples is used. ok is false when a round
// lacks samples or a p99 is 0.
func pooledRise(rounds []riseSamples) (Interval, bool) {
	n := len(rounds)
	if n == 0 {
		return Interval{}, false
	}
	hists := [4]*weightedBars{}
	for k := range hists {
		per := make([][]harness.Bar, n)
		for r, s := range rounds {
			per[r] = [...][]harness.Bar{s.attacked, s.clean, s.refAttacked, s.refClean}[k]
			if len(per[r]) == 0 {
				return Interval{}, false
			}
		}
		hists[k] = newWeightedBars(per)
	}
	rise := func(w []int) (float64, bool) {
		var p [4]float64
		for k, h := range hists {
			p[k] = float64(h.percentile(99, w))
			if p[k] <= 0 {
				return 0, false
			}
		}
		return (p[0] / p[1]) / (p[2] / p[3]), true
	}
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	value, ok := rise(ones)
	if !ok {
		return Interval{}, false
	}
	var samples []weighted
	forEachResample(n, func(w []int, weight float64) {
		if v, ok := rise(w); ok {
			samples = append(samples, weighted{v, weight})
		}
	})
	return Interval{Value: value, Low: weightedQuantile(samples, 0.05), High: weightedQuantile(samples, 0.95), Rounds: n}, true
}

// weightedBars is several histograms' buckets on one ascending scale of values, so that the
// percentile of their union with any multiplicities is one pass over it.
type weightedBars struct {
	upper  []int64   // bucket values, ascending, the union of every histogram's
	counts [][]int64 // counts[h][i]: histogram h's count in bucket upper[i]
	totals []int64   // each histogram's count
}

func newWeightedBars(hists [][]harness.Bar) *weightedBars {
	var upper []int64
	for _, h := range hists {
		for _, b := range h {
			upper = append(upper, b.UpperNs)
		}
	}
	slices.Sort(upper)
	upper = slices.Compact(upper)
	wb := &weightedBars{upper: upper, counts: make([][]int64, len(hists)), totals: make([]int64, len(hists))}
	for h, bars := range hists {
		c := make([]int64, len(upper))
		for _, b := range bars {
			i, _ := slices.BinarySearch(upper, b.UpperNs)
			c[i] += b.Count
			wb.totals[h] += b.Count
		}
		wb.counts[h] = c
	}
	return wb
}

// percentile is the value at percentile p (0..100) of the union of the histograms, histogram
// h taken w[h] times, as harness.Histogram.ValueAtPercentile gives it for the histograms
// merged: the bucket where the count from the bottom reaches the rank p/100 × total, rounded
// half up and at least 1. 0 when the union is empty.
func (wb *weightedBars) percentile(p float64, w []int) int64 {
	var total int64
	for h, t := range wb.totals {
		total += int64(w[h]) * t
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Max(1, math.Min(float64(total), p/100*float64(total)+0.5)))
	var seen int64
	for i, v := range wb.upper {
		for h, c := range wb.counts {
			seen += int64(w[h]) * c[i]
		}
		if seen >= rank {
			return v
		}
	}
	return wb.upper[len(wb.upper)-1]
}

// forEachResample calls f with the multiplicities of every resample of n rounds with
// replacement and its probability, enumerating them when n ≤ exactBootstrapRounds; past
// that, with bootstrapDraws random resamples of equal weight. w is reused between calls.
func forEachResample(n int, f func(w []int, weight float64)) {
	w := make([]int, n)
	if n > exactBootstrapRounds {
		rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(n)))
		for range bootstrapDraws {
			clear(w)
			for range n {
				w[rng.IntN(n)]++
			}
			f(w, 1.0/bootstrapDraws)
		}
		return
	}
	// Compositions of n into n parts, each with the multinomial probability
	// n! / (w1! … wn!) / n^n of drawing it.
	logFact := make([]float64, n+1)
	for i := 1; i <= n; i++ {
		logFact[i] = logFact[i-1] + math.Log(float64(i))
	}
	base := logFact[n] - float64(n)*math.Log(float64(n))
	var place func(i, left int, logw float64)
	place = func(i, left int, logw float64) {
		if i == n-1 {
			w[i] = left
			f(w, math.Exp(logw-logFact[left]))
			return
		}
		for k := left; k >= 0; k-- {
			w[i] = k
			place(i+1, left-k, logw-logFact[k])
		}
	}
	place(0, n, base)
}

type weighted struct{ v, w float64 }

// weightedQuantile is the smallest value whose cumulative weight reaches q of the total.
func weightedQuantile(s []weighted, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v < s[j].v })
	var total float64
	for _, x := range s {
		total += x.w
	}
	var acc float64
	for _, x := range s {
		acc += x.w
		if acc >= q*total*(1-1e-12) {
			return x.v
		}
	}
	return s[len(s)-1].v
}
