package harness

import (
	"errors"
	"fmt"
)

// PoolClean returns one result that stands for the clean runs rs of one target, workload and
// load shape taken together, as though they were one run as long as all of them: counts are
// summed, every percentile is taken over all their samples (their histograms merged), and RPS
// is their responses completed inside the windows over the windows' total length. A
// comparison takes a clean baseline from more than one run so that one run's scheduling
// hiccup moves its p99 less.
//
// Errors: no runs; a run without its histograms (a result read back from JSON); runs of
// different targets, workloads or load shapes; a run under an adversary, whose outcomes do
// not add up across runs.
func PoolClean(rs ...*Result) (*Result, error) {
	if len(rs) == 0 {
		return nil, errors.New("pool: no runs")
	}
	first := rs[0]
	out := &Result{
		Target: first.Target, Workload: first.Workload, Mode: first.Mode,
		Concurrency: first.Concurrency, Connections: first.Connections, Rate: first.Rate, Poisson: first.Poisson,
		StartedAt:    first.StartedAt,
		ErrorsByKind: map[string]int64{},
		LatencyHist:  NewHistogram(), ServiceHist: NewHistogram(),
		TTFTHist: NewHistogram(), ITLHist: NewHistogram(),
	}
	if first.Mode == "open" {
		out.SendLagHist = NewHistogram()
	}
	var okInWindow float64
	for i, r := range rs {
		if err := poolable(first, r); err != nil {
			return nil, fmt.Errorf("pool: run %d: %w", i+1, err)
		}
		if r.StartedAt.Before(out.StartedAt) {
			out.StartedAt = r.StartedAt
		}
		out.DurationS += r.DurationS
		okInWindow += r.RPS * r.DurationS
		out.Requests += r.Requests
		out.OK += r.OK
		out.Errors += r.Errors
		out.Unfinished += r.Unfinished
		out.TotalSent += r.TotalSent
		out.WindowSent += r.WindowSent
		out.Tokens += r.Tokens
		out.BodyBytes += r.BodyBytes
		addCounts(out.ErrorsByKind, r.ErrorsByKind)
		if len(r.ErrorsByStatus) > 0 {
			if out.ErrorsByStatus == nil {
				out.ErrorsByStatus = map[string]int64{}
			}
			addCounts(out.ErrorsByStatus, r.ErrorsByStatus)
		}
		out.LatencyHist.Merge(r.LatencyHist)
		out.ServiceHist.Merge(r.ServiceHist)
		out.TTFTHist.Merge(r.TTFTHist)
		out.ITLHist.Merge(r.ITLHist)
		if out.SendLagHist != nil {
			out.SendLagHist.Merge(r.SendLagHist)
		}
	}
	if out.DurationS > 0 {
		out.RPS = okInWindow / out.DurationS
	}
	out.Latency = out.LatencyHist.Summary()
	out.ServiceLatency = out.ServiceHist.Summary()
	if out.SendLagHist != nil {
		lag := out.SendLagHist.Summary()
		out.SendLag = &lag
	}
	out.TTFT = out.TTFTHist.Summary()
	out.ITL = out.ITLHist.Summary()
	out.LatencyDistribution = out.LatencyHist.Distribution()
	return out, nil
}

// poolable says why r cannot be pooled with first, nil when it can.
func poolable(first, r *Result) error {
	switch {
	case r == nil:
		return errors.New("no result")
	case r.Adversary != nil:
		return fmt.Errorf("ran under the adversary %s", r.Adversary.Spec)
	case r.LatencyHist == nil || r.ServiceHist == nil || r.TTFTHist == nil || r.ITLHist == nil ||
		(r.Mode == "open" && r.SendLagHist == nil):
		return errors.New("its histograms are not at hand")
	case r.Target != first.Target || r.Workload != first.Workload:
		return fmt.Errorf("%s %s is not %s %s", r.Target, r.Workload, first.Target, first.Workload)
	case r.Mode != first.Mode || r.Concurrency != first.Concurrency || r.Connections != first.Connections ||
		r.Rate != first.Rate || r.Poisson != first.Poisson:
		return errors.New("its load differs")
	}
	return nil
}

// addCounts adds every count of from to into.
func addCounts(into, from map[string]int64) {
	for k, n := range from {
		into[k] += n
	}
}
