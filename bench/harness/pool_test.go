package harness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two real clean runs pooled: the counts add up, each percentile is the one of both runs'
// samples together, RPS is the responses over both windows, and every refusal names its cause.
func TestPoolCleanTakesEveryFigureOverBothRuns(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 4})
	run := func(seed uint64) *Result {
		res, err := Run(context.Background(), Options{
			Target: target, Workload: WorkloadSSE, Rate: 300, Connections: 4,
			Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Seed: seed,
		})
		require.NoError(t, err)
		require.Positive(t, res.OK)
		return res
	}
	a, b := run(1), run(2)
	p, err := PoolClean(a, b)
	require.NoError(t, err)

	require.Equal(t, a.OK+b.OK, p.OK)
	require.Equal(t, a.Requests+b.Requests, p.Requests)
	require.Equal(t, a.Tokens+b.Tokens, p.Tokens)
	require.Equal(t, a.TotalSent+b.TotalSent, p.TotalSent)
	require.InDelta(t, a.DurationS+b.DurationS, p.DurationS, 1e-9)
	require.InDelta(t, (a.RPS*a.DurationS+b.RPS*b.DurationS)/(a.DurationS+b.DurationS), p.RPS, 1e-9)
	require.Equal(t, a.TTFT.Count+b.TTFT.Count, p.TTFT.Count)
	require.Equal(t, a.ITL.Count+b.ITL.Count, p.ITL.Count)
	require.Equal(t, a.Latency.Count+b.Latency.Count, p.Latency.Count)
	require.NotNil(t, p.SendLag, "an open-loop pool keeps its send lag")
	require.Equal(t, a.SendLag.Count+b.SendLag.Count, p.SendLag.Count)

	// Each percentile is the merged samples', which no mean or median of the runs' would give
	// in general; the histograms themselves are merged untouched.
	for _, c := range []struct {
		name       string
		got        Summary
		ha, hb, hp *Histogram
	}{
		{"latency", p.Latency, a.LatencyHist, b.LatencyHist, p.LatencyHist},
		{"service", p.ServiceLatency, a.ServiceHist, b.ServiceHist, p.ServiceHist},
		{"ttft", p.TTFT, a.TTFTHist, b.TTFTHist, p.TTFTHist},
		{"itl", p.ITL, a.ITLHist, b.ITLHist, p.ITLHist},
	} {
		m := NewHistogram()
		m.Merge(c.ha)
		m.Merge(c.hb)
		require.Equal(t, m.Summary(), c.got, c.name)
		require.Equal(t, m.Summary(), c.hp.Summary(), c.name)
	}
	require.Equal(t, a.LatencyHist.Count(), int64(a.Latency.Count), "pooling leaves its inputs alone")

	_, err = PoolClean()
	require.ErrorContains(t, err, "no runs")
	for _, c := range []struct {
		want   string
		change func(r *Result)
	}{
		{"run 2", func(r *Result) { r.Workload = WorkloadJSON }},
		{"adversary reset=1", func(r *Result) { r.Adversary = &AdversaryResult{Spec: "reset=1"} }},
		{"histograms", func(r *Result) { r.TTFTHist = nil }},
		{"load differs", func(r *Result) { r.Mode, r.Rate, r.Concurrency = "closed", 0, 4 }},
	} {
		bad := *b
		c.change(&bad)
		_, err = PoolClean(a, &bad)
		require.ErrorContains(t, err, c.want)
	}
}
