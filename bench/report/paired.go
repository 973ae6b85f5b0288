package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-gw/sluice/bench/harness"
)

// TargetHAProxy is the second peer proxy, a reference of the paired comparison as nginx is.
const TargetHAProxy = "haproxy"

// Spread is one figure of a target against a reference, taken round by round: the figure of
// each round where both ran, set against the reference's of that same round. A round-to-round
// swing of the machine moves both runs of a round, so these per-round figures vary less than
// the figures of either target alone, and the count of rounds the target did better in says
// how steady a lead is (a sign test: ahead in 5 of 5 rounds happens by chance one time in 32).
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Better counts the rounds where the target did better than the reference.
	Better int `json:"better"`
	// Rounds counts the rounds where both had the figure; 0 when the figure does not apply.
	Rounds int `json:"rounds"`
}

// Pair is a target against a reference proxy (nginx, haproxy) on one workload, round by round.
type Pair struct {
	Workload  string `json:"workload"`
	Adversary string `json:"adversary,omitempty"`
	Target    string `json:"target"`
	Reference string `json:"reference"`
	// RPS is the target's RPS over the reference's (better above 1).
	RPS Spread `json:"rps_ratio"`
	// CPU is the target's CPU seconds per request over the reference's (better below 1).
	CPU Spread `json:"cpu_ratio"`
	// P50Us is the target's latency p50 minus the reference's, in µs (better below 0).
	P50Us Spread `json:"p50_diff_us"`
	// TTFTP99 is the target's TTFT p99 over the reference's (better below 1).
	TTFTP99 Spread `json:"ttft_p99_ratio"`
	// ITLP99Us is the target's ITL p99 minus the reference's, in µs (better below 0).
	ITLP99Us Spread `json:"itl_p99_diff_us"`
	// TTFTRise and ITLRise, under an adversary only, set the rise the attack caused against
	// the reference's rise in the same round: the target's p99 attacked over its clean run of
	// that round, over the reference's p99 attacked over its clean run (better below 1: the
	// attack moved the target's well-behaved clients less).
	TTFTRise Spread `json:"ttft_p99_rise_ratio"`
	ITLRise  Spread `json:"itl_p99_rise_ratio"`
	// TTFTRisePooled and ITLRisePooled set the same rises against each other with every
	// p99 taken over all the rounds' samples together, with a 90% interval from a
	// bootstrap over the rounds (pooledRise); nil without an adversary, or when a round's
	// samples are not at hand (a report read back from JSON keeps the figures only).
	TTFTRisePooled *Interval `json:"ttft_p99_rise_pooled,omitempty"`
	ITLRisePooled  *Interval `json:"itl_p99_rise_pooled,omitempty"`
}

// PairRounds sets every proxy target of runs against nginx and haproxy, where they ran, round
// by round (see Spread), and each build of a sluice engine against the first build of that
// engine in the runs, when more than one ran ("sluice-gnet@old" and "sluice-gnet": the second
// against the first). Targets are in the order they first appear; the peers are not set
// against themselves or each other, nor is the direct target against anything.
func PairRounds(runs []Run) []Pair {
	type key struct {
		w, a, t string
		round   int
	}
	byKey := map[key]Run{}
	type group struct{ w, a, t string }
	var groups []group
	seen := map[group]bool{}
	present := map[string]bool{}
	var rounds []int // in the order they first appear
	for _, r := range runs {
		if r.Result == nil {
			continue
		}
		byKey[key{r.Workload, r.Adversary, r.Target, r.Round}] = r
		present[r.Target] = true
		if !slices.Contains(rounds, r.Round) {
			rounds = append(rounds, r.Round)
		}
		g := group{r.Workload, r.Adversary, r.Target}
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	var pairs []Pair
	peer := func(t string) bool { return t == TargetDirect || t == TargetNginx || t == TargetHAProxy }
	// The first build of each engine, when another build of it ran too.
	firstBuild, builds := map[string]string{}, map[string]int{}
	for _, g := range groups {
		if engine := engineOf(g.t); !peer(g.t) {
			if _, ok := firstBuild[engine]; !ok {
				firstBuild[engine] = g.t
			}
			if firstBuild[engine] != g.t {
				builds[engine]++
			}
		}
	}
	refs := []string{TargetNginx, TargetHAProxy}
	for _, g := range groups {
		if e := engineOf(g.t); builds[e] > 0 && firstBuild[e] == g.t && !slices.Contains(refs, g.t) {
			refs = append(refs, g.t)
		}
	}
	for _, ref := range refs {
		if !present[ref] {
			continue
		}
		for _, g := range groups {
			if peer(g.t) || g.t == ref {
				continue
			}
			if !peer(ref) && engineOf(ref) != engineOf(g.t) {
				continue // a build is set against the first build of its own engine only
			}
			var rps, cpu, p50, ttft, itl, ttftRise, itlRise []float64
			var ttftRounds, itlRounds []riseSamples
			for _, round := range rounds {
				r, ok := byKey[key{g.w, g.a, g.t, round}]
				o, okRef := byKey[key{g.w, g.a, ref, round}]
				if !ok || !okRef {
					continue
				}
				a, b := r.Result, o.Result
				if b.RPS > 0 {
					rps = append(rps, a.RPS/b.RPS)
				}
				if r.ProxyRequests > 0 && o.ProxyRequests > 0 && o.ProxyCPUSeconds > 0 {
					cpu = append(cpu, (r.ProxyCPUSeconds/float64(r.ProxyRequests))/(o.ProxyCPUSeconds/float64(o.ProxyRequests)))
				}
				if a.Latency.Count > 0 && b.Latency.Count > 0 {
					p50 = append(p50, a.Latency.P50Us-b.Latency.P50Us)
				}
				if a.TTFT.Count > 0 && b.TTFT.Count > 0 && b.TTFT.P99Us > 0 {
					ttft = append(ttft, a.TTFT.P99Us/b.TTFT.P99Us)
				}
				if a.ITL.Count > 0 && b.ITL.Count > 0 {
					itl = append(itl, a.ITL.P99Us-b.ITL.P99Us)
				}
				if g.a == "" {
					continue
				}
				rc, okC := byKey[key{g.w, "", g.t, round}]
				oc, okRefC := byKey[key{g.w, "", ref, round}]
				if !okC || !okRefC {
					continue
				}
				if v, ok := riseRatio(a.TTFT, rc.Result.TTFT, b.TTFT, oc.Result.TTFT); ok {
					ttftRise = append(ttftRise, v)
				}
				if v, ok := riseRatio(a.ITL, rc.Result.ITL, b.ITL, oc.Result.ITL); ok {
					itlRise = append(itlRise, v)
				}
				ttftRounds = append(ttftRounds, riseSamples{bars(a.TTFTHist), bars(rc.Result.TTFTHist), bars(b.TTFTHist), bars(oc.Result.TTFTHist)})
				itlRounds = append(itlRounds, riseSamples{bars(a.ITLHist), bars(rc.Result.ITLHist), bars(b.ITLHist), bars(oc.Result.ITLHist)})
			}
			if len(rps) == 0 {
				continue
			}
			p := Pair{
				Workload: g.w, Adversary: g.a, Target: g.t, Reference: ref,
				RPS:      spread(rps, func(v float64) bool { return v > 1 }),
				CPU:      spread(cpu, func(v float64) bool { return v < 1 }),
				P50Us:    spread(p50, func(v float64) bool { return v < 0 }),
				TTFTP99:  spread(ttft, func(v float64) bool { return v < 1 }),
				ITLP99Us: spread(itl, func(v float64) bool { return v < 0 }),
				TTFTRise: spread(ttftRise, func(v float64) bool { return v < 1 }),
				ITLRise:  spread(itlRise, func(v float64) bool { return v < 1 }),
			}
			if iv, ok := pooledRise(ttftRounds); ok {
				p.TTFTRisePooled = &iv
			}
			if iv, ok := pooledRise(itlRounds); ok {
				p.ITLRisePooled = &iv
			}
			pairs = append(pairs, p)
		}
	}
	return pairs
}

// riseRatio is the target's p99 rise under attack (attacked over clean) over the reference's;
// ok is false when a run lacks the figure.
func riseRatio(attacked, clean, refAttacked, refClean harness.Summary) (float64, bool) {
	if attacked.Count == 0 || clean.Count == 0 || refAttacked.Count == 0 || refClean.Count == 0 ||
		clean.P99Us <= 0 || refClean.P99Us <= 0 || refAttacked.P99Us <= 0 {
		return 0, false
	}
	return (attacked.P99Us / clean.P99Us) / (refAttacked.P99Us / refClean.P99Us), true
}

// bars is h's buckets, nil for a histogram not at hand.
func bars(h *harness.Histogram) []harness.Bar {
	if h == nil {
		return nil
	}
	return h.Bars()
}

// engineOf is a target's name without the build it ran ("sluice-gnet@old": "sluice-gnet").
func engineOf(target string) string {
	engine, _, _ := strings.Cut(target, "@")
	return engine
}

// spread summarises per-round figures; better says whether one round's figure favours the target.
func spread(xs []float64, better func(float64) bool) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := Spread{Median: median(xs), Min: math.Inf(1), Max: math.Inf(-1), Rounds: len(xs)}
	for _, v := range xs {
		s.Min, s.Max = math.Min(s.Min, v), math.Max(s.Max, v)
		if better(v) {
			s.Better++
		}
	}
	return s
}

// PairedTable returns pairs as a Markdown table, "" for none. A ratio reads "0.97× (0.92–1.03)
// 4/5": the median over rounds, the lowest and highest round, and the rounds the target did
// better in; a difference reads the same in µs with a sign.
func PairedTable(pairs []Pair) string {
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nRound by round: each target against a peer's run, or its engine's first build's, in the same round (median over rounds, lowest–highest round, rounds where the target did better; CPU is per request):\n\n")
	b.WriteString("| workload | target | against | RPS × | CPU × | p50 − µs | TTFT p99 × | ITL p99 − µs |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|\n")
	rows := append([]Pair(nil), pairs...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Reference == TargetNginx && rows[j].Reference != TargetNginx })
	for _, p := range rows {
		label := p.Workload
		if p.Adversary != "" {
			label += " under " + harness.AdversaryName(p.Adversary)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", label, p.Target, p.Reference,
			p.RPS.ratio(), p.CPU.ratio(), p.P50Us.diff(), p.TTFTP99.ratio(), p.ITLP99Us.diff())
	}
	b.WriteString(riseTable(rows))
	return b.String()
}

// riseTable returns the rises under attack of pairs (TTFTRise, ITLRise) as a Markdown table,
// "" when no pair has them.
func riseTable(pairs []Pair) string {
	var b strings.Builder
	for _, p := range pairs {
		if p.TTFTRise.Rounds == 0 && p.ITLRise.Rounds == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nUnder attack: each target's p99 rise (attacked over its clean run) over the peer's rise, round by round (median, lowest–highest round, rounds where the target did better) and pooled (every p99 over all rounds' samples together, with the 5th–95th percentile of a bootstrap over rounds); below 1× the attack moved the target's well-behaved clients less:\n\n")
			b.WriteString("| workload | adversary | target | against | TTFT p99 rise × | pooled (90%) | ITL p99 rise × | pooled (90%) |\n")
			b.WriteString("|---|---|---|---|--:|--:|--:|--:|\n")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Workload, harness.AdversaryName(p.Adversary), p.Target, p.Reference,
			p.TTFTRise.ratio(), p.TTFTRisePooled.ratio(), p.ITLRise.ratio(), p.ITLRisePooled.ratio())
	}
	return b.String()
}

func (s Spread) ratio() string {
	if s.Rounds == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f) %d/%d", s.Median, s.Min, s.Max, s.Better, s.Rounds)
}

// ratio reads "1.21× (0.95–1.40)": the pooled figure and its 90% interval; "–" for none.
func (iv *Interval) ratio() string {
	if iv == nil || iv.Rounds == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", iv.Value, iv.Low, iv.High)
}

func (s Spread) diff() string {
	if s.Rounds == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.1f (%+.1f…%+.1f) %d/%d", s.Median, s.Min, s.Max, s.Better, s.Rounds)
}
