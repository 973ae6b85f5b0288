package metrics

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// populate creates a series of every sluice_ family and records a value in each histogram.
func populate(t *testing.T) {
	t.Helper()
	r := ForRoute("api", "up")
	r.Publish()
	r.Response(200, time.Second, 10)
	r.FirstByte(30 * time.Millisecond)
	r.Gap(20 * time.Millisecond)
	e := ForEntrypoint("web")
	e.Publish()
	e.Request()
	e.GatewayError(404)
	EntrypointGauges("web", func() int64 { return 1 }, func() int64 { return 2 })
	be := ForBackend("up", "http://127.0.0.1:1")
	be.Publish()
	be.Connected(time.Millisecond)
	s := NewSet()
	s.Backend("up", "http://127.0.0.1:1", func() int64 { return 0 }, func() bool { return true }, func() int { return 3 })
	s.Model("chat", func() int64 { return 1 }, func() int64 { return 0 })
	m := ForModel("chat", "queue_full", "queue_timeout")
	m.Rejected("queue_full")
	m.Waited(5 * time.Millisecond)
	m.Tokens("t", "team").Add(10, 5, 2)
	m.UsageMissing()
	ex := ForExclusions("fleet", "stale")
	ex.Counters[0].Inc()
	rl := ForRateLimit("per-client")
	rl.Limited()
	pd := ForPD("chat", "t")
	pd.Phase(PDPrefill, time.Now())
	pd.Failed(PDPrefill)
	pd.PairRetry()
	pd.Exhausted()
	pd.Aborted(PDAbortLegFailed)
	pd.Batch(3)
	pm := ForPrefix("chat")
	pm.Selected(1, 4096, 6000)
	pm.Invalidated()
	held := InForce([]Named{m, ex, rl, pd, pm}, nil)
	t.Cleanup(func() { InForce(nil, held) })
	PrefixEvicted()
	PrefixIndex(func() int { return 7 })
	h := ForHealth("up", "http://127.0.0.1:1")
	h.Publish()
	h.Check(true)
	s.Breaker("breaker", "up", "http://127.0.0.1:1", func() int { return BreakerClosed })
	s.Register()
	t.Cleanup(s.Retire)
	ConfigReloaded(true, time.Now())
	populateLifecycle()
	TLSCertificateReload("web", true)
	r.WebSocketStarted()
	r.WebSocketEnded(10)
}

// exposition is a parsed text exposition: per family its help, type and label names.
type exposition struct {
	help, typ map[string]string
	labels    map[string][]string // sorted, le excluded
	samples   map[string][]string // sample lines by family
	order     []string
}

var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? \S+$`)

func parseExposition(t *testing.T, text string) *exposition {
	t.Helper()
	x := &exposition{help: map[string]string{}, typ: map[string]string{}, labels: map[string][]string{}, samples: map[string][]string{}}
	var cur string
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			_, seen := x.help[name]
			require.False(t, seen, "family %s has a second HELP line", name)
			x.help[name] = help
			x.order = append(x.order, name)
			cur = name
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			require.Equal(t, cur, name, "TYPE line right after its HELP line")
			x.typ[name] = typ
			continue
		}
		m := sampleRe.FindStringSubmatch(line)
		require.NotNil(t, m, "sample line %q", line)
		require.NotEmpty(t, cur, "sample %q before any HELP line", line)
		require.True(t, strings.HasPrefix(m[1], cur), "sample %q outside its family %s", line, cur)
		x.samples[cur] = append(x.samples[cur], line)
		for _, kv := range regexp.MustCompile(`([a-zA-Z_]+)="`).FindAllStringSubmatch(m[2], -1) {
			if kv[1] != "le" && !slices.Contains(x.labels[cur], kv[1]) {
				x.labels[cur] = append(x.labels[cur], kv[1])
			}
		}
	}
	for _, l := range x.labels {
		sort.Strings(l)
	}
	return x
}

func scrape(t *testing.T) *exposition {
	t.Helper()
	var b bytes.Buffer
	WritePrometheus(&b)
	return parseExposition(t, b.String())
}

func TestEveryFamilyHasHelpAndType(t *testing.T) {
	populate(t)
	x := scrape(t)
	for _, name := range x.order {
		require.NotEmpty(t, x.help[name], "help text of %s", name)
		require.Contains(t, []string{"counter", "gauge", "histogram", "summary"}, x.typ[name], "type of %s", name)
		if x.typ[name] == "counter" {
			require.True(t, strings.HasSuffix(name, "_total"), "counter %s", name)
		} else {
			require.False(t, strings.HasSuffix(name, "_total"), "%s %s", x.typ[name], name)
		}
	}
	for _, f := range Families {
		require.Equal(t, f.Type, x.typ[f.Name], "type of %s", f.Name)
	}
	for name := range runtimeDropped {
		require.NotContains(t, x.help, name)
	}
}

func TestHistogramsHaveLeBuckets(t *testing.T) {
	populate(t)
	x := scrape(t)
	for _, f := range Families {
		if f.Type != "histogram" {
			continue
		}
		var le []string
		var sum, count bool
		for _, s := range x.samples[f.Name] {
			require.NotContains(t, s, "vmrange")
			switch {
			case strings.HasPrefix(s, f.Name+"_bucket{"):
				le = append(le, regexp.MustCompile(`le="([^"]+)"`).FindStringSubmatch(s)[1])
			case strings.HasPrefix(s, f.Name+"_sum"):
				sum = true
			case strings.HasPrefix(s, f.Name+"_count"):
				count = true
			}
		}
		require.True(t, sum && count, "%s has _sum and _count", f.Name)
		require.NotEmpty(t, le, f.Name)
		require.Equal(t, "+Inf", le[len(le)-1], f.Name)
	}
}

func TestBucketsSpanWhatTheyMeasure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		b        []float64
		min, max float64
	}{
		{"ttft", TTFTBuckets, 0.005, 60},
		{"itl", ITLBuckets, 0.001, 5},
		{"duration", DurationBuckets, 0.005, 600},
		{"connect", ConnectBuckets, 0.001, 5},
	} {
		require.Equal(t, tc.min, tc.b[0], tc.name)
		require.Equal(t, tc.max, tc.b[len(tc.b)-1], tc.name)
		require.True(t, slices.IsSorted(tc.b), tc.name)
	}
}

// The same family written by several sets (the default one and a snapshot's) comes out once,
// with its help text; dropped families go and a wrong type is corrected.
func TestAnnotateMergesFamilies(t *testing.T) {
	raw := "# HELP sluice_backend_up\n# TYPE sluice_backend_up gauge\nsluice_backend_up{service=\"a\",backend=\"x\"} 1\n" +
		"# HELP go_cgo_calls_count\n# TYPE go_cgo_calls_count counter\ngo_cgo_calls_count 0\n" +
		"# HELP process_io_read_bytes_total\n# TYPE process_io_read_bytes_total gauge\nprocess_io_read_bytes_total 7\n" +
		"# HELP sluice_backend_up\n# TYPE sluice_backend_up gauge\nsluice_backend_up{service=\"b\",backend=\"y\"} 0\n"
	want := "# HELP sluice_backend_up 1 when the backend is eligible for balancing, 0 while it is out: an active health check failing, passive health ejecting it (connect failures, failed responses) or a Retry-After refusal running.\n" +
		"# TYPE sluice_backend_up gauge\n" +
		"sluice_backend_up{service=\"a\",backend=\"x\"} 1\n" +
		"sluice_backend_up{service=\"b\",backend=\"y\"} 0\n" +
		"# HELP process_io_read_bytes_total Bytes read by read-like system calls.\n" +
		"# TYPE process_io_read_bytes_total counter\n" +
		"process_io_read_bytes_total 7\n"
	require.Equal(t, want, string(annotate([]byte(raw))))
}

func TestLabelValuesAreEscaped(t *testing.T) {
	require.Equal(t, `service="a\"b",backend="c\\d\ne"`, labels("service", `a"b`, "backend", "c\\d\ne"))
}

// The hot path updates metrics without allocating.
func TestUpdatesDoNotAllocate(t *testing.T) {
	r := ForRoute("alloc", "up")
	e := ForEntrypoint("alloc")
	b := ForBackend("up", "http://alloc")
	rl := ForRateLimit("alloc")
	start := time.Now()
	require.Zero(t, testing.AllocsPerRun(100, func() {
		e.Request()
		r.StreamStarted()
		r.FirstByte(time.Millisecond)
		r.Gap(time.Millisecond)
		r.UpstreamError(ReasonStream)
		r.Response(200, time.Since(start), 100)
		r.StreamEnded()
		r.Canceled()
		e.GatewayError(502)
		e.GatewayError(418)
		b.Connected(time.Millisecond)
		rl.Limited()
	}))
}

func TestActiveStreamsGaugeIsSharedAcrossReloads(t *testing.T) {
	a, b := ForRoute("streams", "up"), ForRoute("streams", "up")
	a.Publish()
	a.StreamStarted()
	b.StreamStarted()
	a.StreamEnded() // a request that began before a reload ends after it
	x := scrape(t)
	require.Contains(t, x.samples["sluice_active_streams"], `sluice_active_streams{router="streams",service="up"} 1`)
	b.StreamEnded()
}

// The series of a router, a backend or an entrypoint appear once published (the
// configuration naming them is in force), with what was counted before.
func TestSeriesAppearWhenPublished(t *testing.T) {
	name := runName("unpublished")
	r := ForRoute(name, "up")
	e := ForEntrypoint(name)
	r.Response(200, time.Millisecond, 1)
	e.Request()
	require.Empty(t, scrapeLines(`sluice_responses_total{router="`+name+`"`))
	require.Empty(t, scrapeLines(`sluice_requests_total{entrypoint="`+name+`"}`))
	ForRoute(name, "up").Publish()
	e.Publish()
	e.Publish()
	ok := `sluice_responses_total{router="` + name + `",service="up",code="2xx"}`
	require.Equal(t, []string{ok + " 1"}, scrapeLines(ok))
	requests := `sluice_requests_total{entrypoint="` + name + `"}`
	require.Equal(t, []string{requests + " 1"}, scrapeLines(requests))
}

func TestConfigReloadMetrics(t *testing.T) {
	before := scrape(t).samples["sluice_config_reloads_total"]
	ConfigReloaded(false, time.Now())
	at := time.Unix(1_700_000_000, 250_000_000)
	ConfigReloaded(true, at)
	x := scrape(t)
	require.Equal(t, []string{"sluice_config_last_reload_success_timestamp_seconds 1.70000000025e+09"}, x.samples["sluice_config_last_reload_success_timestamp_seconds"])
	require.Equal(t, bump(t, before, `result="failure"`, `result="success"`), x.samples["sluice_config_reloads_total"])
}

// bump returns the sample lines with 1 added to the value of the series matching each of sel.
func bump(t *testing.T, lines []string, sel ...string) []string {
	t.Helper()
	out := slices.Clone(lines)
	for i, l := range out {
		for _, s := range sel {
			if strings.Contains(l, s) {
				name, v, _ := strings.Cut(l, " ")
				n, err := strconv.Atoi(v)
				require.NoError(t, err)
				out[i] = name + " " + strconv.Itoa(n+1)
			}
		}
	}
	return out
}

// docs/admin-api.md lists every family with its type, labels and unit.
func TestDocsListEveryFamily(t *testing.T) {
	populate(t)
	x := scrape(t)
	doc, err := os.ReadFile("../../docs/admin-api.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `(sluice_[a-z_]+)` \\| ([a-z]+) \\| ([^|]*) \\| ([^|]+) \\| [^|]+ \\|$")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		name, typ, lbls, unit := m[1], m[2], m[3], strings.TrimSpace(m[4])
		documented[name] = true
		require.Equal(t, x.typ[name], typ, "docs: type of %s", name)
		require.NotEmpty(t, unit, "docs: unit of %s", name)
		var got []string
		for _, l := range strings.Split(regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(lbls, ""), ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				got = append(got, l)
			}
		}
		sort.Strings(got)
		require.Equal(t, x.labels[name], got, "docs: labels of %s", name)
	}
	for _, f := range Families {
		require.True(t, documented[f.Name], "docs/admin-api.md lists %s", f.Name)
	}
	require.Len(t, documented, len(Families), "docs/admin-api.md lists only families that exist")
}

// An entrypoint replaced by a reload counts the connections of both listeners while the old
// one drains; the series goes when the last listener of the name is released.
func TestEntrypointGaugesSumListenersOfOneName(t *testing.T) {
	old := EntrypointGauges("swapped", func() int64 { return 3 }, func() int64 { return 1 })
	cur := EntrypointGauges("swapped", func() int64 { return 2 }, func() int64 { return 2 })
	x := scrape(t)
	require.Contains(t, x.samples["sluice_open_connections"], `sluice_open_connections{entrypoint="swapped"} 5`)
	require.Contains(t, x.samples["sluice_active_requests"], `sluice_active_requests{entrypoint="swapped"} 3`)
	old()
	old() // a second release does nothing
	x = scrape(t)
	require.Contains(t, x.samples["sluice_open_connections"], `sluice_open_connections{entrypoint="swapped"} 2`)
	cur()
	x = scrape(t)
	for _, s := range x.samples["sluice_open_connections"] {
		require.NotContains(t, s, `entrypoint="swapped"`, "a removed entrypoint's series goes")
	}
}
