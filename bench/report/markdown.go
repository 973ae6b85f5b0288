package report

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/bench/harness"
)

// Markdown writes the comparison as one Markdown table (one row per workload
// and target), preceded by the command, machine and setup, and followed by
// notes (missing peers, skipped targets). Latencies are in µs; "+p50"/"+p99"
// are added latency over direct in the same round ("+ITL p99" likewise for
// the inter-token latency p99); ratios are ×direct and ×nginx, the latter
// only when nginx ran (haproxy alone is set against the sluice targets in the
// round-by-round table); "–" marks a value that does not apply.
func (c *Comparison) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString(CommandMarkdown(c.Command))
	if c.Machine != "" {
		fmt.Fprintf(&b, "Machine: %s  \n", c.Machine)
	}
	if c.Setup != "" {
		fmt.Fprintf(&b, "Setup: %s  \n", c.Setup)
	}
	if !c.StartedAt.IsZero() {
		fmt.Fprintf(&b, "Started: %s\n", c.StartedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	b.WriteString("\n")
	b.WriteString(MarkdownTable(c.Rows))
	b.WriteString(PooledTable(c.Rows))
	b.WriteString(PairedTable(c.Paired))
	b.WriteString(AdversaryTables(c.Rows))
	if len(c.Idle) > 0 {
		b.WriteString("\nIdle keep-alive client connections (proxy RSS, MiB):\n\n")
		b.WriteString("| target | connections | opened | RSS before | RSS idle | KiB per connection | errors |\n|---|--:|--:|--:|--:|--:|---|\n")
		for _, r := range c.Idle {
			per := "–"
			if r.Opened > 0 {
				per = fmt.Sprintf("%.1f", (r.RSSMiB-r.RSSBeforeMiB)*1024/float64(r.Opened))
			}
			errs := "–"
			if len(r.Errors) > 0 {
				errs = fmt.Sprint(r.Errors)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.1f | %s | %s |\n", r.Target, r.Requested, r.Opened, r.RSSBeforeMiB, r.RSSMiB, per, errs)
		}
	}
	if len(c.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range c.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tableColumn is a column of MarkdownTable: its header, whether it is right-aligned (a number),
// and whether it sets the row against nginx.
type tableColumn struct {
	head         string
	number, vsNx bool
}

var tableColumns = []tableColumn{
	{head: "workload"}, {head: "target"},
	{head: "RPS", number: true}, {head: "×direct", number: true}, {head: "×nginx", number: true, vsNx: true},
	{head: "p50 µs", number: true}, {head: "p99 µs", number: true}, {head: "p99.9 µs", number: true},
	{head: "+p50 µs", number: true}, {head: "+p99 µs", number: true}, {head: "p99 ×nginx", number: true, vsNx: true},
	{head: "TTFT p50 / p99 µs", number: true}, {head: "TTFT p50 ×nginx", number: true, vsNx: true},
	{head: "ITL p50 / p99 µs", number: true}, {head: "+ITL p99 µs", number: true},
	{head: "errors", number: true}, {head: "CPU s/1k req", number: true}, {head: "CPU ×nginx", number: true, vsNx: true},
	{head: "peak RSS MiB", number: true},
}

// MarkdownTable returns rows as one Markdown table. The columns against nginx (×nginx,
// p99 ×nginx, TTFT p50 ×nginx, CPU ×nginx) are left out when no row is nginx's: every cell of
// them would be "–".
func MarkdownTable(rows []Row) string {
	withNginx := false
	for _, r := range rows {
		withNginx = withNginx || r.Target == TargetNginx
	}
	var b strings.Builder
	line := func(cells []string) {
		for i, c := range cells {
			if !tableColumns[i].vsNx || withNginx {
				b.WriteString("| " + c + " ")
			}
		}
		b.WriteString("|\n")
	}
	heads, aligns := make([]string, len(tableColumns)), make([]string, len(tableColumns))
	for i, c := range tableColumns {
		heads[i], aligns[i] = c.head, "---"
		if c.number {
			aligns[i] = "--:"
		}
	}
	line(heads)
	// The separator row has no spaces around its cells.
	for i, a := range aligns {
		if !tableColumns[i].vsNx || withNginx {
			b.WriteString("|" + a)
		}
	}
	b.WriteString("|\n")
	for _, r := range rows {
		added50, added99 := "–", "–"
		if r.Target != TargetDirect && (r.AddedP50Us != 0 || r.AddedP99Us != 0) {
			added50, added99 = us(r.AddedP50Us), us(r.AddedP99Us)
		}
		ttft, itl, addedITL := "–", "–", "–"
		if r.TTFTP50Us > 0 {
			ttft = us(r.TTFTP50Us) + " / " + us(r.TTFTP99Us)
		}
		if r.ITLP50Us > 0 || r.ITLP99Us > 0 {
			itl = us(r.ITLP50Us) + " / " + us(r.ITLP99Us)
			if r.Target != TargetDirect {
				addedITL = us(r.AddedITLP99Us)
			}
		}
		errs := strconv.FormatInt(r.Errors, 10)
		if r.Requests > 0 && r.Errors > 0 {
			errs += fmt.Sprintf(" (%.2f%%)", 100*float64(r.Errors)/float64(r.Requests))
		}
		if len(r.ErrorsByStatus) > 0 {
			errs += " " + byStatus(r.ErrorsByStatus)
		}
		if r.Unfinished > 0 {
			errs += fmt.Sprintf(" +%d unfinished", r.Unfinished)
		}
		cpu, rss := "–", "–"
		if r.isProxy || r.CPUPer1k > 0 {
			cpu = fmt.Sprintf("%.3f", r.CPUPer1k)
			rss = fmt.Sprintf("%.1f", r.PeakRSSMiB)
		}
		line([]string{
			r.Label(), r.Target, fmt.Sprintf("%.0f", r.RPS), x(r.RPSvsDirect), x(r.RPSvsNginx),
			us(r.P50Us), us(r.P99Us), us(r.P999Us), added50, added99, x(r.P99vsNginx),
			ttft, x(r.TTFTP50Nginx), itl, addedITL, errs, cpu, x(r.CPUPer1kNginx), rss,
		})
	}
	return b.String()
}

// byStatus writes error counts by status code in code order: "429×10 431×2".
func byStatus(m map[string]int64) string {
	codes := make([]string, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Strings(codes) // three digits each: numeric order
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s×%d", c, m[c])
	}
	return strings.Join(parts, " ")
}

// PooledTable returns the p99 of TTFT and ITL over every round's samples together, for the
// rows of stream workloads that have them, with ITL p99 against nginx's in the same workload
// when nginx ran: "" when none has them.
func PooledTable(rows []Row) string {
	nginx := map[[2]string]Row{}
	for _, r := range rows {
		if r.Target == TargetNginx {
			nginx[[2]string{r.Workload, r.Adversary}] = r
		}
	}
	var b strings.Builder
	for _, r := range rows {
		if r.TTFTP99PooledUs == 0 && r.ITLP99PooledUs == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nPooled over rounds: the p99 of every round's samples taken together (µs):\n\n")
			if len(nginx) > 0 {
				b.WriteString("| workload | target | TTFT p99 | ITL p99 | ITL p99 − nginx's |\n|---|---|--:|--:|--:|\n")
			} else {
				b.WriteString("| workload | target | TTFT p99 | ITL p99 |\n|---|---|--:|--:|\n")
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |", r.Label(), r.Target, us(r.TTFTP99PooledUs), us(r.ITLP99PooledUs))
		if len(nginx) > 0 {
			diff := "–"
			if n, ok := nginx[[2]string{r.Workload, r.Adversary}]; ok && n.ITLP99PooledUs > 0 && r.Target != TargetNginx {
				diff = fmt.Sprintf("%+.0f", r.ITLP99PooledUs-n.ITLP99PooledUs)
			}
			b.WriteString(" " + diff + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// AdversaryTables returns, when rows hold runs under an adversary, two tables: each target's
// well-behaved clients under the adversary against its clean runs (p99 TTFT, ITL and latency,
// RPS, errors, the proxy's peak RSS), and what each adversary kind met at each target. It
// returns "" when no row faced an adversary.
func AdversaryTables(rows []Row) string {
	clean := map[[2]string]Row{}
	var attacked []Row
	var specs []string
	for _, r := range rows {
		if r.Adversary == "" {
			clean[[2]string{r.Workload, r.Target}] = r
		} else {
			attacked = append(attacked, r)
			if !slices.Contains(specs, r.Adversary) {
				specs = append(specs, r.Adversary)
			}
		}
	}
	if len(attacked) == 0 {
		return ""
	}
	var b strings.Builder
	under := "each adversary in turn"
	if len(specs) == 1 {
		under = "the adversary `" + specs[0] + "`"
	}
	fmt.Fprintf(&b, "\nWell-behaved clients under %s, against the clean runs of the same rounds (medians over rounds; pooled: the p99 of all rounds' samples together; ×clean above 1.00× is worse, but for RPS):\n\n", under)
	b.WriteString("| workload | adversary | target | TTFT p99 µs clean → attacked | ×clean | pooled ×clean | ITL p99 µs clean → attacked | ×clean | pooled ×clean | p99 µs clean → attacked | ×clean | RPS ×clean | errors attacked | peak RSS MiB clean → attacked |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, a := range attacked {
		c := clean[[2]string{a.Workload, a.Target}]
		pair := func(x, y float64) string {
			if x == 0 && y == 0 {
				return "–"
			}
			return us(x) + " → " + us(y)
		}
		rss := "–"
		if a.isProxy || a.PeakRSSMiB > 0 {
			rss = fmt.Sprintf("%.1f → %.1f", c.PeakRSSMiB, a.PeakRSSMiB)
		}
		errs := strconv.FormatInt(a.Errors, 10)
		if a.Unfinished > 0 {
			errs += fmt.Sprintf(" +%d unfinished", a.Unfinished)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			a.Workload, harness.AdversaryName(a.Adversary), a.Target,
			pair(c.TTFTP99Us, a.TTFTP99Us), x(ratio(a.TTFTP99Us, c.TTFTP99Us)), x(ratio(a.TTFTP99PooledUs, c.TTFTP99PooledUs)),
			pair(c.ITLP99Us, a.ITLP99Us), x(ratio(a.ITLP99Us, c.ITLP99Us)), x(ratio(a.ITLP99PooledUs, c.ITLP99PooledUs)),
			pair(c.P99Us, a.P99Us), x(ratio(a.P99Us, c.P99Us)),
			x(ratio(a.RPS, c.RPS)), errs, rss)
	}
	b.WriteString("\nWhat the adversary met (summed over rounds; outcomes as in BENCHMARKS.md; held: time from connect to the target's answer, close or reset):\n\n")
	b.WriteString("| workload | adversary | target | kind | opened | attempts | outcomes | held mean / max ms |\n|---|---|---|---|--:|--:|---|--:|\n")
	for _, a := range attacked {
		for _, k := range a.AdversaryKinds {
			held := "–"
			if k.HeldCount > 0 {
				held = fmt.Sprintf("%.0f / %.0f", k.HeldMeanMs, k.HeldMaxMs)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %s | %s |\n", a.Workload, harness.AdversaryName(a.Adversary), a.Target, k.Kind, k.Opened, k.Attempts,
				harness.FormatOutcomes(k.Outcomes), held)
		}
	}
	return b.String()
}

// us formats microseconds: one decimal below 100 µs, none above.
func us(v float64) string {
	if v > -100 && v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// x formats a ratio ("0.64×"), "–" for none.
func x(v float64) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "×"
}
