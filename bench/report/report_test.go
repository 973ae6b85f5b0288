package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/stretchr/testify/require"
)

// result builds a harness result whose latency histogram holds n values of
// p50 µs and 1% of values at p99 µs.
func result(rps, p50, p99 float64) *harness.Result {
	h := harness.NewHistogram()
	for i := 0; i < 990; i++ {
		h.Record(int64(p50 * 1000))
	}
	for i := 0; i < 10; i++ {
		h.Record(int64(p99 * 1000))
	}
	return &harness.Result{
		RPS: rps, Requests: 1000, OK: 1000, LatencyHist: h,
		Latency: harness.Summary{Count: 1000, P50Us: p50, P99Us: p99, P999Us: p99},
	}
}

func sampleRuns() []Run {
	var runs []Run
	// Three rounds; round 2 is an outlier for every target, so medians
	// must come from rounds 1 and 3.
	for round, f := range []float64{1, 5, 1.2} {
		runs = append(runs,
			Run{Round: round + 1, Target: TargetDirect, Workload: "json", Result: result(10000/f, 100*f, 200*f)},
			Run{Round: round + 1, Target: "sluice-gnet", Workload: "json", Result: result(8000/f, 130*f, 260*f),
				ProxyCPUSeconds: 0.5 * f, ProxyRequests: 10000, ProxyPeakRSSBytes: int64(10+f) << 20},
			Run{Round: round + 1, Target: TargetNginx, Workload: "json", Result: result(6000/f, 160*f, 400*f),
				ProxyCPUSeconds: 1.0 * f, ProxyRequests: 10000, ProxyPeakRSSBytes: 20 << 20},
		)
	}
	return runs
}

func TestSummarizeMediansAndRatios(t *testing.T) {
	rows := Summarize(sampleRuns())
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	byTarget := map[string]Row{}
	for _, r := range rows {
		byTarget[r.Target] = r
		if r.Rounds != 3 || r.Workload != "json" {
			t.Fatalf("row %+v", r)
		}
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-6*want+1e-9 || d < -1e-6*want-1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	s, n, d := byTarget["sluice-gnet"], byTarget[TargetNginx], byTarget[TargetDirect]
	near("direct rps", d.RPS, 10000/1.2)
	near("sluice rps", s.RPS, 8000/1.2)
	near("sluice p50", s.P50Us, 130*1.2)
	near("sluice added p50", s.AddedP50Us, 30*1.2) // per-round differences 30, 150, 36
	near("sluice added p99", s.AddedP99Us, 60*1.2)
	near("sluice rps vs direct", s.RPSvsDirect, 0.8)
	near("sluice rps vs nginx", s.RPSvsNginx, 8000.0/6000)
	near("sluice p99 vs nginx", s.P99vsNginx, 260.0/400)
	near("sluice cpu per 1k", s.CPUPer1k, 0.5*1.2/10)
	near("sluice cpu vs nginx", s.CPUPer1kNginx, 0.5)
	near("sluice peak rss", s.PeakRSSMiB, 15)
	near("nginx rps vs nginx", n.RPSvsNginx, 1)
	if d.CPUPer1k != 0 || d.AddedP50Us != 0 || d.CPUPer1kNginx != 0 {
		t.Errorf("direct has proxy figures: %+v", d)
	}
	if s.Requests != 3000 || len(s.Distribution) == 0 {
		t.Errorf("requests %d, distribution %d points", s.Requests, len(s.Distribution))
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestMarkdownIsOneTable(t *testing.T) {
	c := &Comparison{Command: "sluice-bench compare --quick", Rows: Summarize(sampleRuns()), Notes: []string{"haproxy not found"}}
	var b bytes.Buffer
	if err := c.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var tableLines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			tableLines = append(tableLines, l)
		}
	}
	if len(tableLines) != 2+3 {
		t.Fatalf("table has %d lines:\n%s", len(tableLines), out)
	}
	cols := strings.Count(tableLines[0], "|")
	for _, l := range tableLines {
		if strings.Count(l, "|") != cols {
			t.Fatalf("ragged table line %q", l)
		}
	}
	for _, want := range []string{"| json | sluice-gnet | 6667 | 0.80× | 1.33× |", "haproxy not found", "`sluice-bench compare --quick`"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}

func TestSVGIsWellFormedWithASeriesPerTarget(t *testing.T) {
	c := &Comparison{Rows: Summarize(sampleRuns())}
	var b bytes.Buffer
	if err := c.SVG(&b); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	polylines := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 3 {
		t.Errorf("%d polylines, want one per target (3)", polylines)
	}
	var empty bytes.Buffer
	if err := (&Comparison{}).SVG(&empty); err != nil || !strings.Contains(empty.String(), "no results") {
		t.Errorf("empty comparison SVG: %v %q", err, empty.String())
	}
}

func TestWriteJSONRoundTrips(t *testing.T) {
	c := &Comparison{Command: "x", Runs: sampleRuns()}
	c.Rows = Summarize(c.Runs)
	var b bytes.Buffer
	if err := c.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	rows := back["rows"].([]any)
	if v := rows[1].(map[string]any)["rps_vs_direct"].(float64); len(rows) != 3 || v < 0.7999 || v > 0.8001 {
		t.Fatalf("rows = %v", rows)
	}
}

// Without nginx in the run, the JSON rows have no ratios against it, where a 0 would read as
// one; with nginx, each row has those it has figures for.
func TestWriteJSONLeavesOutRatiosAgainstAMissingNginx(t *testing.T) {
	rowsOf := func(runs []Run) []map[string]any {
		t.Helper()
		c := &Comparison{Runs: runs, Rows: Summarize(runs)}
		var b bytes.Buffer
		require.NoError(t, c.WriteJSON(&b))
		var back struct{ Rows []map[string]any }
		require.NoError(t, json.Unmarshal(b.Bytes(), &back))
		return back.Rows
	}
	var noNginx []Run
	for _, r := range sampleRuns() {
		if r.Target != TargetNginx {
			noNginx = append(noNginx, r)
		}
	}
	rows := rowsOf(noNginx)
	require.Len(t, rows, 2)
	for _, row := range rows {
		require.Contains(t, row, "rps_vs_direct", row["target"])
		for k := range row {
			require.NotContains(t, k, "vs_nginx", row["target"])
		}
	}
	for _, row := range rowsOf(sampleRuns()) {
		require.Contains(t, row, "rps_vs_nginx", row["target"])
		require.Contains(t, row, "p99_vs_nginx", row["target"])
		require.NotContains(t, row, "ttft_p50_vs_nginx", "%v: json has no TTFT", row["target"])
		if row["target"] == "sluice-gnet" {
			require.InDelta(t, 0.5, row["cpu_per_1k_vs_nginx"], 1e-9)
		}
	}
}

func TestSummarizeStreamRatios(t *testing.T) {
	stream := func(ttft50, itl99 float64) *harness.Result {
		r := result(100, 1000, 2000)
		r.TTFT = harness.Summary{Count: 10, P50Us: ttft50, P99Us: ttft50 * 2}
		r.ITL = harness.Summary{Count: 100, P50Us: 10000, P99Us: itl99}
		return r
	}
	rows := Summarize([]Run{
		{Round: 1, Target: TargetDirect, Workload: "sse", Result: stream(20000, 10100)},
		{Round: 1, Target: "sluice-gnet", Workload: "sse", Result: stream(20300, 10150)},
		{Round: 1, Target: TargetNginx, Workload: "sse", Result: stream(20600, 10400)},
	})
	if s := rows[1]; s.AddedITLP99Us != 50 || s.TTFTP50Nginx != 20300.0/20600 {
		t.Errorf("sluice: +ITL p99 %v, TTFT ×nginx %v", s.AddedITLP99Us, s.TTFTP50Nginx)
	}
	if d := rows[0]; d.AddedITLP99Us != 0 {
		t.Errorf("direct +ITL p99 = %v", d.AddedITLP99Us)
	}
	if !strings.Contains(MarkdownTable(rows), "| 50.0 |") {
		t.Errorf("table lacks +ITL p99:\n%s", MarkdownTable(rows))
	}
}

func TestMarkdownIdleTable(t *testing.T) {
	c := &Comparison{Idle: []IdleRun{
		{Target: "sluice-gnet", Requested: 10000, Opened: 10000, RSSBeforeMiB: 12, RSSMiB: 52},
		{Target: "haproxy", Requested: 10000, Opened: 9967, Errors: map[string]int64{"timeout": 33}, RSSBeforeMiB: 15, RSSMiB: 26},
	}}
	var b bytes.Buffer
	if err := c.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| sluice-gnet | 10000 | 10000 | 12.0 | 52.0 | 4.1 | – |", "map[timeout:33]"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("idle table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSummarizeGroupsRowsByWorkload(t *testing.T) {
	rows := Summarize([]Run{
		{Round: 1, Target: TargetDirect, Workload: "json", Result: result(1, 1, 1)},
		{Round: 1, Target: TargetDirect, Workload: "sse", Result: result(1, 1, 1)},
		{Round: 1, Target: TargetNginx, Workload: "json", Result: result(1, 1, 1)},
		{Round: 1, Target: TargetNginx, Workload: "sse", Result: result(1, 1, 1)},
	})
	var got []string
	for _, r := range rows {
		got = append(got, r.Workload+"/"+r.Target)
	}
	if strings.Join(got, " ") != "json/direct json/nginx sse/direct sse/nginx" {
		t.Errorf("row order %v", got)
	}
}

// TestSummarizeKeepsAdversaryRunsApart: runs under an adversary make their own rows, compared
// with the direct and nginx rows under the same adversary, and the adversary tables set each
// target's attacked figures against its clean ones.
func TestSummarizeKeepsAdversaryRunsApart(t *testing.T) {
	const spec = "slowloris=2,up-stall=1%"
	attacked := func(ttft99 float64, outcomes map[string]int64) *harness.Result {
		r := result(50, 2000, 4000)
		r.TTFT = harness.Summary{Count: 10, P50Us: ttft99 / 2, P99Us: ttft99}
		r.Adversary = &harness.AdversaryResult{Spec: spec, Kinds: []harness.AdversaryKindStat{
			{Kind: "slowloris", Conns: 2, Opened: 2, Attempts: 2, Outcomes: outcomes, HeldCount: 1, HeldMeanMs: 10, HeldMaxMs: 10},
		}}
		return r
	}
	clean := func(ttft99 float64) *harness.Result {
		r := result(100, 1000, 2000)
		r.TTFT = harness.Summary{Count: 10, P50Us: ttft99 / 2, P99Us: ttft99}
		return r
	}
	var runs []Run
	for round := 1; round <= 2; round++ {
		runs = append(runs,
			Run{Round: round, Target: TargetDirect, Workload: "sse", Result: clean(1000)},
			Run{Round: round, Target: TargetDirect, Workload: "sse", Adversary: spec, Result: attacked(1500, map[string]int64{"open_at_end": 2})},
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Result: clean(2000), ProxyRequests: 1, ProxyPeakRSSBytes: 10 << 20},
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Adversary: spec, ProxyRequests: 1, ProxyPeakRSSBytes: 12 << 20,
				Result: attacked(8000, map[string]int64{"status_408": 1, "open_at_end": 1})},
		)
	}
	rows := Summarize(runs)
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Label()+"/"+r.Target)
	}
	require.Equal(t, []string{"sse/direct", "sse/sluice-gnet", "sse under " + spec + "/direct", "sse under " + spec + "/sluice-gnet"}, labels)
	require.InDelta(t, 1, rows[3].RPSvsDirect, 1e-9, "against direct under the same adversary (50 req/s), not the clean one (100)")
	require.Equal(t, []harness.AdversaryKindStat{{Kind: "slowloris", Conns: 2, Opened: 4, Attempts: 4,
		Outcomes: map[string]int64{"status_408": 2, "open_at_end": 2}, HeldCount: 2, HeldMeanMs: 10, HeldMaxMs: 10}}, rows[3].AdversaryKinds)

	tables := AdversaryTables(rows)
	for _, want := range []string{
		"`" + spec + "`",
		"| sse | " + spec + " | sluice-gnet | 2000 → 8000 | 4.00× | – | – | – | – | 2000 → 4000 | 2.00× | 0.50× | 0 | 10.0 → 12.0 |",
		"| sse | " + spec + " | sluice-gnet | slowloris | 4 | 4 | open_at_end 2, status_408 2 | 10 / 10 |",
		"| sse | " + spec + " | direct | slowloris | 4 | 4 | open_at_end 4 | 10 / 10 |",
	} {
		require.Contains(t, tables, want)
	}
	require.Empty(t, AdversaryTables(Summarize(sampleRuns())), "no adversary, no tables")
	var b bytes.Buffer
	require.NoError(t, (&Comparison{Rows: rows}).Markdown(&b))
	require.Contains(t, b.String(), "| sse under "+spec+" | sluice-gnet |")
}

// TestAdversaryTablesNameEachAdversary: a comparison under several adversaries in turn keeps
// each one's rows apart, sets each against the same clean runs, and names mixed by its name.
func TestAdversaryTablesNameEachAdversary(t *testing.T) {
	mixed, err := harness.ParseAdversaries("mixed")
	require.NoError(t, err)
	specs := []string{"noread=16", mixed[0]}
	ttft := func(p99 float64) *harness.Result {
		r := result(100, 1000, 2000)
		r.TTFT = harness.Summary{Count: 10, P50Us: p99 / 2, P99Us: p99}
		return r
	}
	var runs []Run
	for round := 1; round <= 2; round++ {
		for _, target := range []string{"sluice-gnet", TargetNginx} {
			runs = append(runs,
				Run{Round: round, Target: target, Workload: "sse", Result: ttft(1000)},
				Run{Round: round, Target: target, Workload: "sse", Adversary: specs[0], Result: ttft(1200)},
				Run{Round: round, Target: target, Workload: "sse", Adversary: specs[1], Result: ttft(3000)},
			)
		}
	}
	rows := Summarize(runs)
	tables := AdversaryTables(rows)
	require.Contains(t, tables, "under each adversary in turn")
	require.Contains(t, tables, "| sse | noread=16 | sluice-gnet | 1000 → 1200 | 1.20× |")
	require.Contains(t, tables, "| sse | mixed | sluice-gnet | 1000 → 3000 | 3.00× |")
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Label()+"/"+r.Target)
	}
	require.Contains(t, labels, "sse under noread=16/sluice-gnet")
	require.Contains(t, labels, "sse under mixed/nginx")

	rises := PairedTable(PairRounds(runs))
	require.Contains(t, rises, "| sse | noread=16 | sluice-gnet | nginx | 1.00× (1.00–1.00) 0/2 |")
	require.Contains(t, rises, "| sse | mixed | sluice-gnet | nginx | 1.00× (1.00–1.00) 0/2 |")
}

// The pooled p99 is over every round's samples together: a round whose slow tail is just
// under 1% and one whose tail is over it give a median of their p99s halfway between fast and
// slow, and a pooled p99 that is slow, since the two tails together are over 1%.
func TestSummarizePoolsTheRoundsSamplesForTheP99(t *testing.T) {
	stream := func(slowPermille int) *harness.Result {
		r := result(100, 1000, 2000)
		r.TTFTHist, r.ITLHist = harness.NewHistogram(), harness.NewHistogram()
		for i := 0; i < 1000; i++ {
			ttft, itl := int64(1e6), int64(5e6) // 1 ms, 5 ms
			if i < slowPermille {
				ttft, itl = 9e6, 7e6
			}
			r.TTFTHist.Record(ttft)
			r.ITLHist.Record(itl)
		}
		r.TTFT, r.ITL = r.TTFTHist.Summary(), r.ITLHist.Summary()
		return r
	}
	runs := []Run{
		{Round: 1, Target: "sluice-gnet", Workload: "sse", Result: stream(0)},
		{Round: 1, Target: "sluice-gnet", Workload: "sse", Adversary: "slowloris=1", Result: stream(15)},
		{Round: 2, Target: "sluice-gnet", Workload: "sse", Result: stream(0)},
		{Round: 2, Target: "sluice-gnet", Workload: "sse", Adversary: "slowloris=1", Result: stream(7)},
		{Round: 1, Target: TargetNginx, Workload: "sse", Result: stream(0)},
		{Round: 1, Target: TargetNginx, Workload: "sse", Adversary: "slowloris=1", Result: stream(0)},
	}
	rows := Summarize(runs)
	require.Len(t, rows, 4)
	clean, attacked := rows[0], rows[2]
	require.Equal(t, "sluice-gnet", attacked.Target)
	require.Equal(t, "slowloris=1", attacked.Adversary)
	require.InDelta(t, 1000, clean.TTFTP99PooledUs, 1)
	require.InDelta(t, 5000, clean.ITLP99PooledUs, 5)
	require.InDelta(t, 5000, attacked.TTFTP99Us, 5, "the median of a slow round (9 ms) and a fast one (1 ms)")
	require.InDelta(t, 9000, attacked.TTFTP99PooledUs, 9, "22 slow samples in 2,000 are over 1%")
	require.InDelta(t, 7000, attacked.ITLP99PooledUs, 7)
	require.Contains(t, AdversaryTables(rows), "| sse | slowloris=1 | sluice-gnet | 1000 → 5002 | 5.00× | 9.00× | 5001 → 6001 | 1.20× | 1.40× |")

	pooled := PooledTable(rows)
	require.Contains(t, pooled, "| sse under slowloris=1 | sluice-gnet | 9003 | 7000 | +1999 |", "ITL p99 against nginx's under the same adversary")
	require.Contains(t, pooled, "| sse under slowloris=1 | nginx | 1000 | 5001 | – |")

	runs[3].Result.TTFTHist = nil // a run read back from JSON has no samples
	require.Zero(t, Summarize(runs)[2].TTFTP99PooledUs, "no pool from some of the rounds")
}

// A row sums its rounds' errors by status code, and its errors cell lists them by code, so
// that a model router's 429 shows apart from other refusals.
func TestRowBreaksErrorsDownByStatus(t *testing.T) {
	var runs []Run
	for round, by := range []map[string]int64{{"429": 3, "431": 1}, {"429": 2}} {
		res := result(1000, 100, 200)
		res.Requests, res.Errors = 1000, 0
		for _, n := range by {
			res.Errors += n
		}
		res.OK = res.Requests - res.Errors
		res.ErrorsByKind = map[string]int64{"status_4xx": res.Errors}
		res.ErrorsByStatus = by
		runs = append(runs, Run{Round: round + 1, Target: "sluice-gnet", Workload: "json", Result: res})
	}
	rows := Summarize(runs)
	require.Len(t, rows, 1)
	require.Equal(t, int64(6), rows[0].Errors)
	require.Equal(t, map[string]int64{"429": 5, "431": 1}, rows[0].ErrorsByStatus)
	require.Contains(t, MarkdownTable(rows), "| 6 (0.30%) 429×5 431×1 |")

	var b bytes.Buffer
	require.NoError(t, (&Comparison{Rows: rows}).WriteJSON(&b))
	require.Contains(t, b.String(), `"errors_by_status": {`)
}

// Without nginx in the run (--peers none, or haproxy alone) the columns against nginx are left
// out rather than filled with "–"; haproxy alone is set against the sluice targets in the
// round-by-round table.
func TestMarkdownWithoutNginxLeavesOutItsColumns(t *testing.T) {
	streams := func(runs []Run) []Run {
		for i := range runs {
			res := *runs[i].Result
			res.TTFTHist, res.ITLHist = harness.NewHistogram(), harness.NewHistogram()
			res.TTFTHist.Record(3e6)
			res.ITLHist.Record(1e6)
			res.TTFT, res.ITL = res.TTFTHist.Summary(), res.ITLHist.Summary()
			runs[i].Result = &res
		}
		return runs
	}
	var haproxyAlone, noPeer []Run
	for _, r := range streams(sampleRuns()) {
		if r.Target == TargetNginx {
			r.Target = TargetHAProxy
		} else {
			noPeer = append(noPeer, r)
		}
		haproxyAlone = append(haproxyAlone, r)
	}
	for name, runs := range map[string][]Run{"haproxy alone": haproxyAlone, "no peer": noPeer} {
		c := &Comparison{Rows: Summarize(runs), Paired: PairRounds(runs)}
		var b bytes.Buffer
		require.NoError(t, c.Markdown(&b))
		out := b.String()
		require.NotContains(t, out, "nginx", name)
		require.Contains(t, out, "| workload | target | RPS | ×direct | p50 µs | p99 µs | p99.9 µs | +p50 µs | +p99 µs | TTFT p50 / p99 µs | ITL p50 / p99 µs | +ITL p99 µs | errors | CPU s/1k req | peak RSS MiB |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", name)
		require.Contains(t, out, "| json | sluice-gnet | 6667 | 0.80× | 156 | 312 | 312 | 36.0 | 72.0 | 3000 / 3000 | 1000 / 1000 | 0.0 | 0 | 0.060 | 15.0 |\n", name)
		require.Contains(t, out, "| workload | target | TTFT p99 | ITL p99 |\n|---|---|--:|--:|\n| json | direct | 3000 | 1000 |\n", name)
		if name == "haproxy alone" {
			require.Contains(t, out, "| json | sluice-gnet | haproxy | 1.33× (1.33–1.33) 3/3 |")
		}
	}
}
