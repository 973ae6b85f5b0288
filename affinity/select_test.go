package affinity

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

func TestSelectNeedsHalfOfTheScannedRequest(t *testing.T) {
	cs := []Candidate{{Target: 1, Prefix: 4999}, {Target: 2}}
	c := Select(cs, 10000, 7)
	require.Equal(t, OutcomeShort, c.Outcome, "4999 of 10000 bytes is less than half")
	require.Zero(t, c.Prefix)
	require.Equal(t, rendezvousPick(cs, 7), c.Index)

	cs[0].Prefix = 5000
	c = Select(cs, 10000, 7)
	require.Equal(t, Choice{Index: 0, Prefix: 5000, Outcome: OutcomeHit}, c, "exactly half counts")
}

func TestSelectLoadBand(t *testing.T) {
	// The longest match is on a target two operations above the least loaded: out of band.
	cs := []Candidate{
		{Target: 1, Load: 5, Prefix: 9000},
		{Target: 2, Load: 3},
		{Target: 3, Load: 4, Prefix: 6000},
		{Target: 4, Load: 3},
	}
	c := Select(cs, 10000, 99)
	require.Equal(t, Choice{Index: 2, Prefix: 6000, Outcome: OutcomeHit}, c, "one above the least is in band")

	cs[2].Load = 5
	c = Select(cs, 10000, 99)
	require.Equal(t, OutcomeBusy, c.Outcome)
	require.Contains(t, []int{1, 3}, c.Index, "rendezvous among the band only")
	require.Equal(t, rendezvousPick([]Candidate{cs[1], cs[3]}, 99), map[int]int{1: 0, 3: 1}[c.Index])
}

func TestSelectTies(t *testing.T) {
	// The longest prefix wins even over a less loaded candidate in band.
	cs := []Candidate{{Target: 1, Load: 1, Prefix: 8000}, {Target: 2, Load: 0, Prefix: 6000}}
	require.Equal(t, 0, Select(cs, 10000, 1).Index)

	// Equal prefixes: the lower load.
	cs = []Candidate{{Target: 1, Load: 1, Prefix: 8000, Used: 50}, {Target: 2, Load: 0, Prefix: 8000, Used: 10}}
	require.Equal(t, 1, Select(cs, 10000, 1).Index)

	// Equal prefixes and loads: the most recently used.
	cs[1].Load = 1
	require.Equal(t, 0, Select(cs, 10000, 1).Index)

	// All equal: the rendezvous order, whatever the order of the slice.
	for conv := uint64(0); conv < 50; conv++ {
		a := []Candidate{{Target: 1, Prefix: 8000}, {Target: 2, Prefix: 8000}, {Target: 3, Prefix: 8000}}
		b := []Candidate{a[2], a[0], a[1]}
		require.Equal(t, a[Select(a, 10000, conv).Index].Target, b[Select(b, 10000, conv).Index].Target)
		require.Equal(t, a[rendezvousPick(a, conv)].Target, a[Select(a, 10000, conv).Index].Target)
	}
}

func TestSelectWithoutHints(t *testing.T) {
	require.Equal(t, Choice{Index: -1}, Select(nil, 100, 1))
	cs := []Candidate{{Target: 1}, {Target: 2}}
	c := Select(cs, 0, 1)
	require.Equal(t, OutcomeMiss, c.Outcome)
	require.Equal(t, rendezvousPick(cs, 1), c.Index)
	require.Equal(t, "miss", c.Outcome.String())
	require.Equal(t, "hit", OutcomeHit.String())
}

// rendezvousPick is the highest-random-weight candidate, by definition.
func rendezvousPick(cs []Candidate, conv uint64) int {
	best := 0
	for i := range cs {
		if RendezvousWeight(conv, cs[i].Target) > RendezvousWeight(conv, cs[best].Target) {
			best = i
		}
	}
	return best
}

// TestRendezvousIsTheSameInEveryProcess pins rendezvous choices: replicas of the gateway,
// built from any version, must send a conversation to the same target.
func TestRendezvousIsTheSameInEveryProcess(t *testing.T) {
	cs := []Candidate{{Target: 0}, {Target: 1}, {Target: 2}, {Target: 3}}
	var got []Target
	for _, conv := range []uint64{0, 1, 2, 0xdeadbeef, 0x2030e3919a489934, 1 << 63} {
		got = append(got, cs[Select(cs, 0, conv).Index].Target)
	}
	require.Equal(t, []Target{1, 0, 3, 3, 2, 0}, got)
	require.Equal(t, uint64(0x871af5cecade18c4), RendezvousWeight(0x2030e3919a489934, 3))
}

func TestRendezvousSpreadsAndMovesLittle(t *testing.T) {
	const keys = 20000
	cs := []Candidate{{Target: 10}, {Target: 11}, {Target: 12}, {Target: 13}}
	r := rand.New(rand.NewPCG(3, 4))
	count := map[Target]int{}
	moved := 0
	for range keys {
		conv := r.Uint64()
		was := cs[Select(cs, 0, conv).Index].Target
		count[was]++
		// Without target 13, only its conversations move.
		now := cs[Select(cs[:3], 0, conv).Index].Target
		if now != was {
			require.Equal(t, Target(13), was)
			moved++
		}
	}
	for _, c := range cs {
		require.InDelta(t, keys/4, count[c.Target], keys/4*0.05, "target %d", c.Target)
	}
	require.Equal(t, count[13], moved)

	// Small consecutive keys and targets spread too.
	count = map[Target]int{}
	for conv := range uint64(keys) {
		count[cs[Select(cs, 0, conv).Index].Target]++
	}
	for _, c := range cs {
		require.InDelta(t, keys/4, count[c.Target], keys/4*0.05, "target %d", c.Target)
	}
}

// A hint that ends before the first user message marks a prefix conversations share: it does
// not pull a new conversation to the backends that served others; the conversation's own
// hints do count.
func TestSelectPrintDropsSharedHints(t *testing.T) {
	system := text("shared system prompt ", 3000)
	first := fingerprint(t, openai.ChatCompletions, chat(system, "short question one"))
	require.Greater(t, first.ConversationPrefix, len(system))
	require.Less(t, first.ConversationPrefix, first.Scanned+1)
	var systemEnd int
	for _, cp := range first.Checkpoints {
		if cp.EndsMessage && cp.Prefix < first.ConversationPrefix {
			systemEnd = cp.Prefix
		}
	}
	require.Positive(t, systemEnd, "the system prompt ends at a checkpoint")
	require.GreaterOrEqual(t, 2*systemEnd, first.Scanned, "it covers over half of the request")

	cs := []Candidate{{Target: 1, Prefix: systemEnd}, {Target: 2}, {Target: 3}}
	c := SelectPrint(cs, first)
	require.Equal(t, OutcomeShared, c.Outcome)
	require.Zero(t, c.Prefix)
	require.Equal(t, rendezvousPick(cs, first.Conversation), c.Index)
	require.Equal(t, Choice{Index: 0, Prefix: systemEnd, Outcome: OutcomeHit},
		Select([]Candidate{{Target: 1, Prefix: systemEnd}, {Target: 2}, {Target: 3}}, first.Scanned, first.Conversation),
		"Select alone takes it")

	// The conversation's own hint (through its first user message) counts.
	cs = []Candidate{{Target: 1, Prefix: systemEnd}, {Target: 2, Prefix: first.ConversationPrefix}, {Target: 3}}
	require.Equal(t, Choice{Index: 1, Prefix: first.ConversationPrefix, Outcome: OutcomeHit}, SelectPrint(cs, first))

	// Without any hint, the outcome stays a miss.
	cs = []Candidate{{Target: 1}, {Target: 2}}
	require.Equal(t, OutcomeMiss, SelectPrint(cs, first).Outcome)
}

// TestSelectWithoutHintsBoundsTheLoad: without a hint, the conversation's rendezvous choice
// takes the turn while its load is within the load band or 1.25× the mean load (counting the
// request being placed), whichever is larger, and not beyond.
func TestSelectWithoutHintsBoundsTheLoad(t *testing.T) {
	// Find a conversation whose rendezvous choice among four targets is target 3.
	cs := []Candidate{{Target: 0}, {Target: 1}, {Target: 2}, {Target: 3}}
	var conv uint64
	for rendezvousPick(cs, conv) != 3 {
		conv++
	}
	pick := func(loads ...int) Target {
		for i := range cs {
			cs[i].Load = loads[i]
		}
		return cs[Select(cs, 0, conv).Index].Target
	}
	// Mean bound: (2+2+4+4+1)/4 = 3.25 in flight, 1.25× that rounds up to 5.
	require.Equal(t, Target(3), pick(2, 2, 4, 4), "above the load band, within 1.25× the mean")
	require.Equal(t, Target(3), pick(2, 2, 4, 5), "at the bound")
	require.NotEqual(t, Target(3), pick(3, 3, 3, 6), "past 1.25× the mean (ceil(1.25·16/4) = 5)")
	// Band bound: (0+0+0+1+1)/4 rounds up to 1 = the least plus the band.
	require.Equal(t, Target(3), pick(0, 0, 0, 1))
	require.NotEqual(t, Target(3), pick(0, 0, 0, 2))
}
