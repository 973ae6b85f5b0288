package harness

import (
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
)

// Adversary kinds. The client kinds are misbehaving connections that run beside the workload,
// each kind on its own connections; the upstream kinds are a share of the workload's own
// requests that carry an llmsim fault header (docs/llmsim.md), so that the upstream misbehaves
// on them. BENCHMARKS.md describes each.
const (
	AdvSlowloris = "slowloris" // request heads sent one byte per second
	AdvSlowBody  = "slowbody"  // complete heads, bodies trickled one byte (or 1-byte chunk) per 100 ms
	AdvNoRead    = "noread"    // streaming requests whose responses are never read
	AdvReset     = "reset"     // streaming requests reset (RST) before or during the response
	AdvPipeline  = "pipeline"  // pipelined floods of small requests
	AdvBigHeader = "bigheader" // oversized header values and heads with thousands of fields
	AdvSegment   = "segment"   // valid requests written in random pieces with small delays
	AdvUpTrickle = "up-trickle"
	AdvUpStall   = "up-stall"
	AdvUpReset   = "up-reset"
	AdvUpBigLine = "up-bigline"
)

// AdversaryMixed is the spec that runs every kind at once, at the counts of mixedSpec.
const AdversaryMixed = "mixed"

// mixedSpec is what "mixed" expands to: every client kind with a few connections and every
// upstream kind on a small share of the requests, light enough for the load generator, the
// upstream and a proxy sharing two cores.
const mixedSpec = "slowloris=64,slowbody=16,noread=16,reset=8,pipeline=2,bigheader=8,segment=8," +
	"up-trickle=1%,up-stall=0.2%,up-reset=0.5%,up-bigline=0.5%"

// clientKinds and upstreamKinds list the kinds in report order.
var (
	clientKinds   = []string{AdvSlowloris, AdvSlowBody, AdvNoRead, AdvReset, AdvPipeline, AdvBigHeader, AdvSegment}
	upstreamKinds = [...]string{AdvUpTrickle, AdvUpStall, AdvUpReset, AdvUpBigLine}
)

// AdversaryKinds lists every kind an adversary spec accepts, in report order.
func AdversaryKinds() []string {
	return append(append([]string(nil), clientKinds...), upstreamKinds[:]...)
}

// Bounds of an adversary spec.
const (
	// MaxAdversaryConns bounds the connections of one client kind, and of all kinds together.
	MaxAdversaryConns = 10_000
)

// upstreamFault is the x-llmsim-fault value each upstream kind sends.
var upstreamFault = map[string]string{
	AdvUpTrickle: "trickle",
	AdvUpStall:   "stall-after=3",
	AdvUpReset:   "reset-after=3",
	// Half a MiB: enormous for one SSE line, yet under the load generator's own bound on an
	// event (maxSSELineBytes), so that the adversary's requests are still checked whole.
	AdvUpBigLine: "big-line=524288",
}

// Adversary is a parsed adversary spec: per client kind, how many connections misbehave at
// once; per upstream kind, the percentage of the workload's requests that carry its fault.
type Adversary struct {
	conns map[string]int
	pct   map[string]float64
}

// AdversaryNone is the spec that names no adversary on purpose.
const AdversaryNone = "none"

// ParseAdversary parses a spec: comma-separated kind=N items (N connections of a client
// kind) and kind=P% items (P percent of the workload's requests for an upstream kind; the %
// may be left out), and "mixed" for every kind at once (later items override its counts).
// An empty spec (the zero Options.Adversary) or "none" is no adversary (nil). A spec it
// refuses is an *OptionError; so is any other spec that names no adversary (no items, every
// count 0): one who wrote it asked for an adversary, and would get a clean run.
func ParseAdversary(spec string) (*Adversary, error) {
	if strings.Contains(spec, ";") || strings.TrimSpace(spec) == AdversaryEach {
		// A run faces one adversary; a comparison runs several in turn (ParseAdversaries).
		return nil, refuse("adversary", spec, "want one spec: several separated by \";\", and each, are for sluice-bench compare")
	}
	if spec == "" || strings.TrimSpace(spec) == AdversaryNone {
		return nil, nil
	}
	a := &Adversary{conns: map[string]int{}, pct: map[string]float64{}}
	named := map[string]bool{} // kinds given a value of their own: mixed's may be overridden once
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		switch item {
		case "", AdversaryNone:
			continue
		case AdversaryMixed:
			m, err := ParseAdversary(mixedSpec)
			if err != nil {
				return nil, err
			}
			for k, v := range m.conns {
				a.conns[k] = v
			}
			for k, v := range m.pct {
				a.pct[k] = v
			}
			continue
		}
		kind, val, ok := strings.Cut(item, "=")
		kind, val = strings.TrimSpace(kind), strings.TrimSpace(val)
		if !ok {
			return nil, adversaryError(spec, item, "want kind=N (kinds: %s, or mixed)", strings.Join(AdversaryKinds(), ", "))
		}
		if named[kind] {
			return nil, adversaryError(spec, item, "%s is given twice: want each kind once", kind)
		}
		named[kind] = true
		switch {
		case contains(clientKinds, kind):
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > MaxAdversaryConns {
				return nil, adversaryError(spec, item, "want a number of connections 0..%d", MaxAdversaryConns)
			}
			a.conns[kind] = n
		case contains(upstreamKinds[:], kind):
			p, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
			if err != nil || math.IsNaN(p) || p < 0 || p > 100 {
				return nil, adversaryError(spec, item, "want a percentage of the requests 0..100")
			}
			a.pct[kind] = p
		default:
			return nil, adversaryError(spec, item, "unknown kind %q (kinds: %s, or mixed)", kind, strings.Join(AdversaryKinds(), ", "))
		}
	}
	total, share := 0, 0.0
	for _, n := range a.conns {
		total += n
	}
	for _, p := range a.pct {
		share += p
	}
	switch {
	case total > MaxAdversaryConns:
		return nil, refuse("adversary", spec, "%d connections, at most %d", total, MaxAdversaryConns)
	case share > 100:
		return nil, refuse("adversary", spec, "upstream kinds add up to %.4g%% of the requests, at most 100%%", share)
	case total == 0 && share == 0:
		return nil, RefuseAdversary(spec)
	}
	return a, nil
}

// RefuseAdversary is the *OptionError for spec, a spec that names no adversary though it is
// not "none" (an empty one written out, one whose every count is 0). A caller that can tell
// an empty spec written out from one left out (Options reads "" as "not given") refuses the
// first with it.
func RefuseAdversary(spec string) error {
	return refuse("adversary", spec, "%s", namesNone())
}

// namesNone is what a spec that names no adversary is refused with.
func namesNone() string {
	return "want at least one kind above 0: kind=N (kinds: " + strings.Join(AdversaryKinds(), ", ") + "), or mixed"
}

// adversaryError is an *OptionError about item of adversary spec, which it names when the
// spec has other items.
func adversaryError(spec, item, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	if item != strings.TrimSpace(spec) {
		msg = fmt.Sprintf("%q: %s", item, msg)
	}
	return refuse("adversary", spec, "%s", msg)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Conns returns the connections of client kind k.
func (a *Adversary) Conns(k string) int { return a.conns[k] }

// Percent returns the percentage of requests of upstream kind k.
func (a *Adversary) Percent(k string) float64 { return a.pct[k] }

// String returns the spec in canonical form: every kind in use, in report order.
func (a *Adversary) String() string {
	var parts []string
	for _, k := range clientKinds {
		if n := a.conns[k]; n > 0 {
			parts = append(parts, k+"="+strconv.Itoa(n))
		}
	}
	for _, k := range upstreamKinds {
		if p := a.pct[k]; p > 0 {
			parts = append(parts, k+"="+strconv.FormatFloat(p, 'g', -1, 64)+"%")
		}
	}
	return strings.Join(parts, ",")
}

// checkLoopback refuses an adversary against anything but this machine: the misbehaving
// connections are a test of a proxy under one's own control, never traffic for a real host.
func checkLoopback(host string) error {
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return conflict(fmt.Sprintf("--adversary runs against loopback targets only (127.0.0.0/8, ::1, localhost), not %q", host))
}

// AdversaryResult is what happened to the adversary's connections and requests in a run.
type AdversaryResult struct {
	// Spec is the adversary in canonical form (ParseAdversary's String).
	Spec  string              `json:"spec"`
	Kinds []AdversaryKindStat `json:"kinds"`
}

// AdversaryKindStat is the outcome of one adversary kind.
type AdversaryKindStat struct {
	Kind string `json:"kind"`
	// Conns is the client kind's connections at once; Percent the upstream kind's share of
	// the workload's requests.
	Conns   int     `json:"connections,omitempty"`
	Percent float64 `json:"percent,omitempty"`
	// Opened counts connections opened (client kinds), Attempts the requests (or, for
	// slowloris and slowbody, connections) that ran to an outcome.
	Opened   int64 `json:"opened"`
	Attempts int64 `json:"attempts"`
	// Outcomes counts what ended each attempt (BENCHMARKS.md lists the names): status_NNN
	// (the target answered NNN), closed (it closed without answering), reset (it reset the
	// connection), timeout (it neither answered nor closed before the kind's deadline),
	// open_at_end (it still held the connection when the run ended), ok, and for requests
	// the workload's error kinds.
	Outcomes map[string]int64 `json:"outcomes"`
	// HeldCount counts the connections the target answered, closed or reset (slowloris,
	// slowbody, noread, bigheader), and HeldMeanMs and HeldMaxMs say how long it took.
	HeldCount  int64   `json:"held_count,omitempty"`
	HeldMeanMs float64 `json:"held_mean_ms,omitempty"`
	HeldMaxMs  float64 `json:"held_max_ms,omitempty"`
}

// FormatOutcomes writes outcomes as "name n, name n" in name order.
func FormatOutcomes(outcomes map[string]int64) string {
	ks := make([]string, 0, len(outcomes))
	for k := range outcomes {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, outcomes[k])
	}
	return b.String()
}

// AdversaryEach is the sweep that runs every kind alone, at its count in "mixed", then mixed.
const AdversaryEach = "each"

// ParseAdversaries parses the adversaries of a comparison: specs (ParseAdversary) separated by
// ";", each run in turn, and "each" for every kind alone at its count in mixed followed by
// mixed itself. It returns them in canonical form (String), in order and without repeats; none
// for empty specs (the zero CompareOptions.Adversary) or "none". A spec it refuses is an
// *OptionError, and so is one among several that names no adversary (an empty one between
// two ";", "none", every count 0).
func ParseAdversaries(specs string) ([]string, error) {
	if specs == "" || strings.TrimSpace(specs) == AdversaryNone {
		return nil, nil
	}
	var out []string
	empty := "" // the first spec that names no adversary
	found := false
	add := func(spec string) error {
		a, err := ParseAdversary(spec)
		var oe *OptionError
		if errors.As(err, &oe) && oe.Flag != "" && oe.Value != specs {
			// Name the flag's whole value, as every other refusal does, and the spec in it.
			return refuse(oe.Flag, specs, "%q: %s", spec, oe.Msg)
		}
		if err != nil {
			return err
		}
		if a == nil {
			if !found {
				empty, found = spec, true
			}
			return nil
		}
		if s := a.String(); !contains(out, s) {
			out = append(out, s)
		}
		return nil
	}
	for _, item := range strings.Split(specs, ";") {
		item = strings.TrimSpace(item)
		if item != AdversaryEach {
			if err := add(item); err != nil {
				return nil, err
			}
			continue
		}
		for _, one := range strings.Split(mixedSpec, ",") {
			if err := add(one); err != nil {
				return nil, err
			}
		}
		if err := add(AdversaryMixed); err != nil {
			return nil, err
		}
	}
	switch {
	case len(out) == 0:
		// Nothing but empty specs (";") or "none": the whole value names no adversary.
		return nil, RefuseAdversary(specs)
	case found:
		// One spec among adversaries names none: a slip (";;", a count left at 0) that
		// would silently drop a run.
		return nil, refuse("adversary", specs, "%q: %s", empty, namesNone())
	}
	return out, nil
}

// AdversaryName is spec (in canonical form) as a report names it: "mixed" for mixed's counts,
// spec otherwise.
func AdversaryName(spec string) string {
	if m, err := ParseAdversary(mixedSpec); err == nil && m.String() == spec {
		return AdversaryMixed
	}
	return spec
}
