package report

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/stretchr/testify/require"
)

// pairedRuns: five rounds in which the machine's speed swings by a factor of six, moving
// every target of a round alike; sluice's figures against nginx's are the same each round but
// the fourth, where it did worse.
func pairedRuns() []Run {
	var runs []Run
	for i, f := range []float64{1, 3, 1.5, 0.5, 2} {
		round := i + 1
		lag := 1.0 // sluice's share of nginx's cost this round
		if round == 4 {
			lag = 1.2
		}
		stream := func(rps, p50, ttft99, itl99 float64) *harness.Result {
			r := result(rps, p50, 2*p50)
			r.TTFT = harness.Summary{Count: 100, P50Us: ttft99 / 2, P99Us: ttft99}
			r.ITL = harness.Summary{Count: 1000, P50Us: itl99 / 2, P99Us: itl99}
			return r
		}
		runs = append(runs,
			Run{Round: round, Target: TargetDirect, Workload: "sse", Result: stream(1000/f, 90*f, 900*f, 5000+10*f)},
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Result: stream(990/f/lag, 100*f*lag, 950*f*lag, 5100+10*f*lag),
				ProxyCPUSeconds: 0.9 * f * lag, ProxyRequests: 10000},
			Run{Round: round, Target: TargetNginx, Workload: "sse", Result: stream(900/f, 110*f, 1000*f, 5150+10*f),
				ProxyCPUSeconds: 1.0 * f, ProxyRequests: 10000},
		)
		if round <= 2 { // haproxy ran in two rounds only
			runs = append(runs, Run{Round: round, Target: TargetHAProxy, Workload: "sse", Result: stream(1000/f, 100*f, 1000*f, 5100+10*f),
				ProxyCPUSeconds: 0.9 * f, ProxyRequests: 10000})
		}
		// A workload without nginx or haproxy has nothing to pair.
		runs = append(runs, Run{Round: round, Target: "sluice-gnet", Workload: "json", Result: result(5000, 50, 90),
			ProxyCPUSeconds: 1, ProxyRequests: 5000})
	}
	return runs
}

func TestPairRoundsSetsEachRoundAgainstThePeerOfThatRound(t *testing.T) {
	pairs := PairRounds(pairedRuns())
	require.Len(t, pairs, 2, "sluice against nginx and against haproxy; peers and direct are not paired")
	n, h := pairs[0], pairs[1]
	require.Equal(t, [4]string{"sse", "", "sluice-gnet", TargetNginx}, [4]string{n.Workload, n.Adversary, n.Target, n.Reference})
	require.Equal(t, TargetHAProxy, h.Reference)

	// RPS: 990/900 = 1.1 in four rounds, 1.1/1.2 in the fourth; all five ahead of nginx.
	require.Equal(t, 5, n.RPS.Rounds)
	require.InDelta(t, 1.1, n.RPS.Median, 1e-9)
	require.InDelta(t, 1.1/1.2, n.RPS.Min, 1e-9)
	require.InDelta(t, 1.1, n.RPS.Max, 1e-9)
	require.Equal(t, 4, n.RPS.Better)
	// CPU per request: 0.9× nginx's, 1.08× in the fourth round.
	require.InDelta(t, 0.9, n.CPU.Median, 1e-9)
	require.InDelta(t, 1.08, n.CPU.Max, 1e-9)
	require.Equal(t, 4, n.CPU.Better)
	// p50: (100 − 110)·f µs each round but the fourth, (120 − 110)·0.5 there.
	require.InDelta(t, -15, n.P50Us.Median, 1e-9, "rounds: −10, −30, −15, +5, −20")
	require.InDelta(t, -30, n.P50Us.Min, 1e-9)
	require.InDelta(t, 5, n.P50Us.Max, 1e-9)
	require.Equal(t, 4, n.P50Us.Better)
	require.InDelta(t, 0.95, n.TTFTP99.Median, 1e-9)
	require.Equal(t, 4, n.TTFTP99.Better)
	require.InDelta(t, -50, n.ITLP99Us.Median, 1e-9, "5100 − 5150, the swing term cancels")
	require.Equal(t, 5, n.ITLP99Us.Better, "the fourth round's ITL p99 is still 49 µs under nginx's")

	require.Equal(t, 2, h.RPS.Rounds, "only the rounds haproxy ran in")
	require.InDelta(t, 0.99, h.RPS.Median, 1e-9)
	require.Equal(t, 0, h.RPS.Better)
	require.InDelta(t, 1.0, h.CPU.Median, 1e-9)
	require.Equal(t, 0, h.CPU.Better, "equal is not better")
}

func TestPairedTableReadsMedianRangeAndRoundsAhead(t *testing.T) {
	runs := pairedRuns()
	c := &Comparison{Rows: Summarize(runs), Paired: PairRounds(runs)}
	var b strings.Builder
	require.NoError(t, c.Markdown(&b))
	out := b.String()
	require.Contains(t, out, "| sse | sluice-gnet | nginx | 1.10× (0.92–1.10) 4/5 | 0.90× (0.90–1.08) 4/5 | -15.0 (-30.0…+5.0) 4/5 | 0.95× (0.95–1.14) 4/5 | -50.0 (-50.0…-49.0) 5/5 |")
	require.Contains(t, out, "| sse | sluice-gnet | haproxy | 0.99× (0.99–0.99) 0/2 |")
	require.Empty(t, PairedTable(nil))
	require.Empty(t, PairRounds(sampleRuns()[:1]), "direct alone pairs nothing")
}

// Two builds of one engine in a run: the later is set against the first, besides the peers;
// another engine is not set against either.
func TestPairRoundsSetsABuildAgainstTheFirstBuildOfItsEngine(t *testing.T) {
	var runs []Run
	for round, f := range []float64{1, 2, 0.5} {
		targets := []string{"sluice-gnet@old", "sluice-gnet", "sluice-fasthttp", TargetNginx}
		cpu := []float64{1.0, 0.9, 1.2, 1.0}
		if round > 0 { // compare rotates the order: the first build is the first seen in round 1
			targets, cpu = append(targets[1:], targets[0]), append(cpu[1:], cpu[0])
		}
		for i, target := range targets {
			runs = append(runs, Run{Round: round + 1, Target: target, Workload: "json", Result: result(1000, 100*f, 200*f),
				ProxyCPUSeconds: cpu[i] * f, ProxyRequests: 1000})
		}
	}
	var got []string
	for _, p := range PairRounds(runs) {
		got = append(got, p.Target+" against "+p.Reference)
		if p.Target == "sluice-gnet" && p.Reference == "sluice-gnet@old" {
			require.InDelta(t, 0.9, p.CPU.Median, 1e-9)
			require.Equal(t, 3, p.CPU.Better)
		}
	}
	require.ElementsMatch(t, []string{
		"sluice-gnet@old against nginx", "sluice-gnet against nginx", "sluice-fasthttp against nginx",
		"sluice-gnet against sluice-gnet@old",
	}, got)
}

// Under an adversary, each round's rise (attacked over clean) is set against the peer's rise of
// that round: a machine that swings from round to round moves both runs of both targets alike.
func TestPairRoundsSetsTheRiseUnderAttackAgainstThePeersOfTheRound(t *testing.T) {
	const adv = "slowloris=64"
	var runs []Run
	for i, f := range []float64{1, 2, 0.5} {
		round := i + 1
		sluiceRise := 1.1
		if round == 3 {
			sluiceRise = 1.5
		}
		stream := func(ttft99, itl99 float64) *harness.Result {
			r := result(400, 75000, 77000)
			r.TTFT = harness.Summary{Count: 100, P50Us: ttft99 / 2, P99Us: ttft99}
			r.ITL = harness.Summary{Count: 1000, P50Us: itl99 / 2, P99Us: itl99}
			return r
		}
		runs = append(runs,
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Result: stream(1000*f, 6000*f)},
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Adversary: adv, Result: stream(1000*f*sluiceRise, 6600*f)},
			Run{Round: round, Target: TargetNginx, Workload: "sse", Result: stream(900*f, 6000*f)},
			Run{Round: round, Target: TargetNginx, Workload: "sse", Adversary: adv, Result: stream(1200*f, 6600*f)},
		)
	}
	pairs := PairRounds(runs)
	require.Len(t, pairs, 2, "the clean workload and the attacked one, each against nginx")
	clean, attacked := pairs[0], pairs[1]
	require.Equal(t, "", clean.Adversary)
	require.Zero(t, clean.TTFTRise.Rounds, "a clean run has no rise")
	require.Equal(t, adv, attacked.Adversary)

	// nginx rose 1200/900 = 4/3 each round; sluice 1.1, and 1.5 in the third.
	require.Equal(t, 3, attacked.TTFTRise.Rounds)
	require.InDelta(t, 1.1*0.75, attacked.TTFTRise.Median, 1e-9)
	require.InDelta(t, 1.5*0.75, attacked.TTFTRise.Max, 1e-9)
	require.Equal(t, 2, attacked.TTFTRise.Better)
	require.InDelta(t, 1.0, attacked.ITLRise.Median, 1e-9, "both ITL p99 rose 1.1×")
	require.Equal(t, 0, attacked.ITLRise.Better, "equal is not better")

	out := PairedTable(pairs)
	require.Contains(t, out, "| sse | slowloris=64 | sluice-gnet | nginx | 0.83× (0.83–1.12) 2/3 | – | 1.00× (1.00–1.00) 0/3 | – |",
		"runs without samples have no pooled rise")
	require.Nil(t, attacked.TTFTRisePooled)
	require.NotContains(t, PairedTable(pairs[:1]), "Under attack", "no rise table without an adversary")
}

// With the rounds' samples at hand, each rise is also pooled over the rounds, with its
// bootstrap interval, in the table and the JSON.
func TestPairRoundsPoolsTheRiseWithItsInterval(t *testing.T) {
	const adv = "reset=8"
	stream := func(ttft, itl []harness.Bar) *harness.Result {
		r := result(400, 75000, 77000)
		r.TTFTHist, r.ITLHist = harness.NewHistogram(), harness.NewHistogram()
		for _, b := range ttft {
			for range b.Count {
				r.TTFTHist.Record(b.UpperNs)
			}
		}
		for _, b := range itl {
			for range b.Count {
				r.ITLHist.Record(b.UpperNs)
			}
		}
		r.TTFT, r.ITL = r.TTFTHist.Summary(), r.ITLHist.Summary()
		return r
	}
	var runs []Run
	for round := 1; round <= 5; round++ {
		attacked := tail(20, 4) // sluice's TTFT tail doubles under attack, nginx's does not move
		if round == 3 {
			attacked = tail(40, 40) // and one round's jumps far further
		}
		runs = append(runs,
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Result: stream(tail(20, 2), tail(20, 6))},
			Run{Round: round, Target: "sluice-gnet", Workload: "sse", Adversary: adv, Result: stream(attacked, tail(20, 6))},
			Run{Round: round, Target: TargetNginx, Workload: "sse", Result: stream(tail(20, 2), tail(20, 6))},
			Run{Round: round, Target: TargetNginx, Workload: "sse", Adversary: adv, Result: stream(tail(20, 2), tail(20, 6))},
		)
	}
	pairs := PairRounds(runs)
	require.Len(t, pairs, 2)
	p := pairs[1]
	require.NotNil(t, p.TTFTRisePooled)
	require.InDelta(t, 2, p.TTFTRisePooled.Value, 0.01, "pooled, the jump is 0.8% of the samples: the p99 stays at 4 ms")
	require.InDelta(t, 2, p.TTFTRisePooled.Low, 0.01)
	require.InDelta(t, 20, p.TTFTRisePooled.High, 0.1, "resamples holding the jumping round twice or more")
	require.InDelta(t, 1, p.ITLRisePooled.Value, 0.01)
	require.Equal(t, 5, p.ITLRisePooled.Rounds)
	require.Contains(t, PairedTable(pairs), "| sse | reset=8 | sluice-gnet | nginx | 2.00× (2.00–20.00) 0/5 | 2.00× (2.00–20.00) | 1.00× (1.00–1.00) 0/5 | 1.00× (1.00–1.00) |")

	js, err := json.Marshal(p)
	require.NoError(t, err)
	require.Contains(t, string(js), `"ttft_p99_rise_pooled":{"value":2`)
	js, err = json.Marshal(pairs[0])
	require.NoError(t, err)
	require.NotContains(t, string(js), "rise_pooled", "a clean workload has no rise")
}
