// Package report turns sluice-bench compare runs into the side-by-side
// report: per workload and target, the medians over rounds of
// RPS, latency p50/p99/p99.9, added latency over the direct-to-upstream
// target, TTFT and ITL percentiles, errors, proxy CPU seconds per 1,000
// requests and proxy peak RSS, with ratios against direct and nginx; as a
// Markdown table, JSON, and an SVG chart of latency distributions.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/sluice-gw/sluice/bench/harness"
)

// Target names with a role in the ratios.
const (
	TargetDirect = "direct" // the upstream without a proxy
	TargetNginx  = "nginx"
)

// Run is one measured run of one target in one round.
type Run struct {
	Round    int    `json:"round"`
	Target   string `json:"target"`
	Workload string `json:"workload"`
	// Adversary is the adversary spec the run faced ("" for a clean run).
	Adversary string `json:"adversary,omitempty"`
	// Result is the load generator's result.
	Result *harness.Result `json:"result"`
	// ProxyCPUSeconds is the CPU time the proxy's process tree used during
	// the run's measured window (warmup and drain left out); 0 for direct.
	ProxyCPUSeconds float64 `json:"proxy_cpu_seconds"`
	// ProxyPeakRSSBytes is the peak of the proxy tree's summed RSS sampled
	// during the run (every 100 ms), or the peak RSS of one process of the tree
	// within the run where that is higher; 0 for direct.
	ProxyPeakRSSBytes int64 `json:"proxy_peak_rss_bytes"`
	// ProxyRequests is the number of requests written to the proxy during the
	// run's measured window (harness.Result.WindowSent: the denominator of CPU
	// per 1,000 requests); 0 when the proxy's CPU could not be read (its
	// process exited in the run).
	ProxyRequests int64 `json:"proxy_requests"`
	// Pooled, when above 1, is how many runs of the round this one stands for (PoolRuns): a
	// comparison under adversaries runs each target clean at the start and at the end of a
	// round and pools the two into its clean run.
	Pooled int `json:"pooled_runs,omitempty"`
}

// PoolRuns returns the clean runs rs of one target, workload and round as one run: the
// load's figures as harness.PoolClean takes them, the proxy's CPU seconds and requests
// summed, its peak RSS the highest. Errors: those of PoolClean, and runs of different
// targets, workloads or rounds.
func PoolRuns(rs ...Run) (Run, error) {
	if len(rs) == 0 {
		return Run{}, errors.New("pool: no runs")
	}
	results := make([]*harness.Result, len(rs))
	for i, r := range rs {
		if r.Target != rs[0].Target || r.Workload != rs[0].Workload || r.Round != rs[0].Round || r.Adversary != "" {
			return Run{}, fmt.Errorf("pool: run %d is %s %s %q round %d, not a clean run of %s %s round %d",
				i+1, r.Target, r.Workload, r.Adversary, r.Round, rs[0].Target, rs[0].Workload, rs[0].Round)
		}
		results[i] = r.Result
	}
	res, err := harness.PoolClean(results...)
	if err != nil {
		return Run{}, err
	}
	out := Run{Round: rs[0].Round, Target: rs[0].Target, Workload: rs[0].Workload, Result: res, Pooled: len(rs)}
	for _, r := range rs {
		out.ProxyCPUSeconds += r.ProxyCPUSeconds
		out.ProxyRequests += r.ProxyRequests
		out.ProxyPeakRSSBytes = max(out.ProxyPeakRSSBytes, r.ProxyPeakRSSBytes)
	}
	return out, nil
}

// Row is the summary of one target on one workload: medians over rounds
// (latencies in µs), sums of counts, and ratios. A ratio is 0 when its
// reference is missing; the JSON leaves out a ratio against nginx that is 0
// (no nginx in the run, or no figure of its to set against), which a reader
// could otherwise take for a ratio.
type Row struct {
	Workload string `json:"workload"`
	// Adversary is the adversary spec the rows's runs faced ("" for clean runs).
	Adversary string `json:"adversary,omitempty"`
	Target    string `json:"target"`
	Rounds    int    `json:"rounds"`

	RPS        float64 `json:"rps"`
	P50Us      float64 `json:"latency_p50_us"`
	P99Us      float64 `json:"latency_p99_us"`
	P999Us     float64 `json:"latency_p999_us"`
	AddedP50Us float64 `json:"added_p50_us"` // median over rounds of (p50 − direct p50 of the same round)
	AddedP99Us float64 `json:"added_p99_us"`
	TTFTP50Us  float64 `json:"ttft_p50_us"`
	TTFTP99Us  float64 `json:"ttft_p99_us"`
	ITLP50Us   float64 `json:"itl_p50_us"`
	ITLP99Us   float64 `json:"itl_p99_us"`
	// AddedITLP99Us is the median over rounds of (ITL p99 − direct ITL p99
	// of the same round): what the proxy adds to the gaps between tokens.
	AddedITLP99Us float64 `json:"added_itl_p99_us"`
	// TTFTP99PooledUs and ITLP99PooledUs are the p99 of every round's samples taken
	// together (0 when a round's samples are not at hand, as in a report read back from
	// JSON). A p99 over five rounds' samples rests on five times as many, so one round's
	// scheduling hiccup moves it less than it moves that round's own p99.
	TTFTP99PooledUs float64 `json:"ttft_p99_pooled_us,omitempty"`
	ITLP99PooledUs  float64 `json:"itl_p99_pooled_us,omitempty"`

	Requests   int64 `json:"requests"`
	Errors     int64 `json:"errors"`
	Unfinished int64 `json:"unfinished"`
	// ErrorsByStatus counts the errors that were responses with a status other than 2xx by
	// their status code ("429", "502"), summed over rounds (harness.Result.ErrorsByStatus).
	ErrorsByStatus map[string]int64 `json:"errors_by_status,omitempty"`
	// CPUPer1k is proxy CPU seconds per 1,000 requests (median over rounds).
	CPUPer1k float64 `json:"cpu_seconds_per_1k_requests"`
	// PeakRSSMiB is the largest proxy peak RSS over rounds, in MiB.
	PeakRSSMiB float64 `json:"peak_rss_mib"`

	RPSvsDirect   float64 `json:"rps_vs_direct"`
	RPSvsNginx    float64 `json:"rps_vs_nginx,omitempty"`
	P99vsNginx    float64 `json:"p99_vs_nginx,omitempty"`
	CPUPer1kNginx float64 `json:"cpu_per_1k_vs_nginx,omitempty"`
	TTFTP50Nginx  float64 `json:"ttft_p50_vs_nginx,omitempty"`

	// Distribution is the latency percentile distribution of all rounds
	// merged, for the chart.
	Distribution []harness.Point `json:"latency_distribution_us"`

	// AdversaryKinds is what happened to each adversary kind, summed over rounds.
	AdversaryKinds []harness.AdversaryKindStat `json:"adversary_kinds,omitempty"`

	isProxy bool
}

// Label names the row's load: the workload, and for attacked runs "under" the adversary
// (harness.AdversaryName: "sse under mixed", "sse under noread=16").
func (r *Row) Label() string {
	if r.Adversary != "" {
		return r.Workload + " under " + harness.AdversaryName(r.Adversary)
	}
	return r.Workload
}

// Comparison is a full compare session.
type Comparison struct {
	// Command is the command line that ran the comparison, as a shell takes it back
	// (CommandLine).
	Command   string    `json:"command"`
	StartedAt time.Time `json:"started_at"`
	Machine   string    `json:"machine"`
	// Setup describes the load: workloads, mode, duration, rounds, upstream.
	Setup string   `json:"setup"`
	Notes []string `json:"notes,omitempty"`
	Rows  []Row    `json:"rows"`
	// Paired sets each sluice target against the peers round by round (PairRounds).
	Paired []Pair `json:"paired,omitempty"`
	Runs   []Run  `json:"runs"`
	// Idle holds the idle keep-alive connection memory runs, if any.
	Idle []IdleRun `json:"idle,omitempty"`
}

// IdleRun is the memory of one proxy holding idle keep-alive client
// connections (each has carried one request).
type IdleRun struct {
	Target    string           `json:"target"`
	Requested int              `json:"requested"`
	Opened    int              `json:"opened"`
	Errors    map[string]int64 `json:"errors,omitempty"`
	// RSSBeforeMiB is the proxy tree's summed RSS before opening the
	// connections, RSSMiB the peak while they were idle.
	RSSBeforeMiB float64 `json:"rss_before_mib"`
	RSSMiB       float64 `json:"rss_mib"`
}

// Summarize computes one Row per (workload, target) from runs, in the order
// workloads and targets first appear.
func Summarize(runs []Run) []Row {
	type key struct{ w, a, t string }
	var order []key
	groups := map[key][]Run{}
	for _, r := range runs {
		k := key{r.Workload, r.Adversary, r.Target}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	// Direct p50/p99 per (workload, round), for added latency.
	type rk struct {
		w, a string
		r    int
	}
	directP50, directP99, directITL99 := map[rk]float64{}, map[rk]float64{}, map[rk]float64{}
	for _, r := range runs {
		if r.Target == TargetDirect && r.Result != nil {
			k := rk{r.Workload, r.Adversary, r.Round}
			directP50[k] = r.Result.Latency.P50Us
			directP99[k] = r.Result.Latency.P99Us
			if r.Result.ITL.Count > 0 {
				directITL99[k] = r.Result.ITL.P99Us
			}
		}
	}
	// Group rows by workload and adversary, in the order they first appear.
	type wa struct{ w, a string }
	firstSeen := map[wa]int{}
	for i, k := range order {
		if _, ok := firstSeen[wa{k.w, k.a}]; !ok {
			firstSeen[wa{k.w, k.a}] = i
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		return firstSeen[wa{order[i].w, order[i].a}] < firstSeen[wa{order[j].w, order[j].a}]
	})
	rows := make([]Row, 0, len(order))
	for _, k := range order {
		g := groups[k]
		row := Row{Workload: k.w, Adversary: k.a, Target: k.t, Rounds: len(g)}
		var rps, p50, p99, p999, a50, a99, t50, t99, i50, i99, ai99, cpu []float64
		merged := harness.NewHistogram()
		ttftPool, itlPool := harness.NewHistogram(), harness.NewHistogram()
		pooled := true
		for _, r := range g {
			res := r.Result
			if res == nil {
				continue
			}
			if res.TTFTHist == nil || res.ITLHist == nil {
				pooled = false
			} else {
				ttftPool.Merge(res.TTFTHist)
				itlPool.Merge(res.ITLHist)
			}
			rps = append(rps, res.RPS)
			p50 = append(p50, res.Latency.P50Us)
			p99 = append(p99, res.Latency.P99Us)
			p999 = append(p999, res.Latency.P999Us)
			if d, ok := directP50[rk{k.w, k.a, r.Round}]; ok && k.t != TargetDirect {
				a50 = append(a50, res.Latency.P50Us-d)
				a99 = append(a99, res.Latency.P99Us-directP99[rk{k.w, k.a, r.Round}])
			}
			if res.TTFT.Count > 0 {
				t50 = append(t50, res.TTFT.P50Us)
				t99 = append(t99, res.TTFT.P99Us)
			}
			if res.ITL.Count > 0 {
				i50 = append(i50, res.ITL.P50Us)
				i99 = append(i99, res.ITL.P99Us)
				if d, ok := directITL99[rk{k.w, k.a, r.Round}]; ok && k.t != TargetDirect {
					ai99 = append(ai99, res.ITL.P99Us-d)
				}
			}
			row.Requests += res.Requests
			row.Errors += res.Errors
			for code, n := range res.ErrorsByStatus {
				if row.ErrorsByStatus == nil {
					row.ErrorsByStatus = map[string]int64{}
				}
				row.ErrorsByStatus[code] += n
			}
			row.Unfinished += res.Unfinished
			if r.ProxyRequests > 0 {
				cpu = append(cpu, r.ProxyCPUSeconds/float64(r.ProxyRequests)*1000)
				row.isProxy = true
			}
			row.PeakRSSMiB = math.Max(row.PeakRSSMiB, float64(r.ProxyPeakRSSBytes)/(1<<20))
			merged.Merge(res.LatencyHist)
			if res.Adversary != nil {
				row.AdversaryKinds = addKinds(row.AdversaryKinds, res.Adversary.Kinds)
			}
		}
		row.RPS, row.P50Us, row.P99Us, row.P999Us = median(rps), median(p50), median(p99), median(p999)
		row.AddedP50Us, row.AddedP99Us = median(a50), median(a99)
		row.TTFTP50Us, row.TTFTP99Us = median(t50), median(t99)
		row.ITLP50Us, row.ITLP99Us, row.AddedITLP99Us = median(i50), median(i99), median(ai99)
		row.CPUPer1k = median(cpu)
		row.Distribution = merged.Distribution()
		if pooled {
			row.TTFTP99PooledUs = float64(ttftPool.ValueAtPercentile(99)) / 1e3
			row.ITLP99PooledUs = float64(itlPool.ValueAtPercentile(99)) / 1e3
		}
		rows = append(rows, row)
	}
	for i := range rows {
		r := &rows[i]
		for _, o := range rows {
			if o.Workload != r.Workload || o.Adversary != r.Adversary {
				continue
			}
			switch o.Target {
			case TargetDirect:
				r.RPSvsDirect = ratio(r.RPS, o.RPS)
			case TargetNginx:
				r.RPSvsNginx = ratio(r.RPS, o.RPS)
				r.P99vsNginx = ratio(r.P99Us, o.P99Us)
				r.TTFTP50Nginx = ratio(r.TTFTP50Us, o.TTFTP50Us)
				if r.isProxy {
					r.CPUPer1kNginx = ratio(r.CPUPer1k, o.CPUPer1k)
				}
			}
		}
	}
	return rows
}

// addKinds adds the kind outcomes of one round to sum.
func addKinds(sum, round []harness.AdversaryKindStat) []harness.AdversaryKindStat {
	for _, k := range round {
		i := 0
		for i < len(sum) && sum[i].Kind != k.Kind {
			i++
		}
		if i == len(sum) {
			sum = append(sum, harness.AdversaryKindStat{Kind: k.Kind, Conns: k.Conns, Percent: k.Percent, Outcomes: map[string]int64{}})
		}
		s := &sum[i]
		s.Opened += k.Opened
		s.Attempts += k.Attempts
		for o, n := range k.Outcomes {
			s.Outcomes[o] += n
		}
		if n := s.HeldCount + k.HeldCount; n > 0 {
			s.HeldMeanMs = (s.HeldMeanMs*float64(s.HeldCount) + k.HeldMeanMs*float64(k.HeldCount)) / float64(n)
			s.HeldCount = n
		}
		s.HeldMaxMs = math.Max(s.HeldMaxMs, k.HeldMaxMs)
	}
	return sum
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// median returns the median of xs (mean of the middle two for an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// WriteJSON writes c as indented JSON (EncodeJSON).
func (c *Comparison) WriteJSON(w io.Writer) error { return EncodeJSON(w, c) }

// EncodeJSON writes v to w as JSON indented by two spaces, followed by a newline, with
// '<', '>' and '&' written as themselves: a report is read by people and tools and never
// embedded in HTML, and a redacted value reads "<redacted>", not "\u003credacted\u003e".
// Errors are encoding/json's and w's.
func EncodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
