package affinity

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

// TestTurnPrefixEndsThePreviousTurnsRequest: a follow-up turn's TurnPrefix is the length of
// the previous turn's whole canonical stream, so the last checkpoint of the previous request
// is a checkpoint of this one.
func TestTurnPrefixEndsThePreviousTurnsRequest(t *testing.T) {
	sys := text("system", 1500)
	u1, a1, u2, a2, u3 := text("u1", 300), text("a1", 300), text("u2", 300), text("a2", 300), text("u3", 300)

	first := fingerprint(t, openai.ChatCompletions, chat(sys, u1))
	require.Zero(t, first.TurnPrefix, "a first turn has no previous turn")

	second := fingerprint(t, openai.ChatCompletions, chat(sys, u1, a1, u2))
	third := fingerprint(t, openai.ChatCompletions, chat(sys, u1, a1, u2, a2, u3))
	require.Equal(t, first.Checkpoints[len(first.Checkpoints)-1].Prefix, second.TurnPrefix)
	require.Equal(t, second.Checkpoints[len(second.Checkpoints)-1].Prefix, third.TurnPrefix)
	require.Equal(t, third.TurnPrefix, third.turnCheckpoint())
	require.Equal(t, second.Checkpoints[len(second.Checkpoints)-1].Hash, checkpointAt(t, third, third.TurnPrefix).Hash)
}

// TestSelectPrintFollowsOnlyCurrentHints: a hint learned from the previous turn is followed;
// one learned from an older turn only (another router served the turns since) is not, and
// rendezvous hashing of the conversation chooses as it would with no hint.
func TestSelectPrintFollowsOnlyCurrentHints(t *testing.T) {
	sys := text("system", 1500)
	u1, a1, u2, a2, u3 := text("u1", 3000), text("a1", 200), text("u2", 200), text("a2", 200), text("u3", 200)
	p := fingerprint(t, openai.ChatCompletions, chat(sys, u1, a1, u2, a2, u3))
	older := fingerprint(t, openai.ChatCompletions, chat(sys, u1))
	olderEnd := older.Checkpoints[len(older.Checkpoints)-1].Prefix
	require.Less(t, olderEnd, p.turnCheckpoint())
	require.GreaterOrEqual(t, 2*olderEnd, p.Scanned, "the older hint alone would cover half of the request")

	cands := func(prefix int) []Candidate {
		return []Candidate{{Target: 1}, {Target: 2, Prefix: prefix, Used: 5}, {Target: 3}}
	}
	noHint := SelectPrint(cands(0), p)
	require.Equal(t, OutcomeMiss, noHint.Outcome)

	current := SelectPrint(cands(p.turnCheckpoint()), p)
	require.Equal(t, Choice{Index: 1, Prefix: p.turnCheckpoint(), Outcome: OutcomeHit}, current)

	behind := SelectPrint(cands(olderEnd), p)
	require.Equal(t, OutcomeBehind, behind.Outcome)
	require.Equal(t, noHint.Index, behind.Index, "an out-of-date hint chooses as no hint does")
}

func checkpointAt(t *testing.T, p *Print, prefix int) Checkpoint {
	t.Helper()
	for _, cp := range p.Checkpoints {
		if cp.Prefix == prefix {
			return cp
		}
	}
	t.Fatalf("no checkpoint at %d", prefix)
	return Checkpoint{}
}

// TestSelectPrintPlacesOpeningsWithinTheBand: a conversation's opening request (no assistant
// message yet) goes to its rendezvous choice only while that backend is within the load band;
// a later turn without a current hint may go to it up to the bound relative to the mean.
func TestSelectPrintPlacesOpeningsWithinTheBand(t *testing.T) {
	sys, u1, a1, u2 := text("system", 1500), text("u1", 300), text("a1", 300), text("u2", 300)
	opening := fingerprint(t, openai.ChatCompletions, chat(sys, u1))
	next := fingerprint(t, openai.ChatCompletions, chat(sys, u1, a1, u2))
	require.Zero(t, opening.TurnPrefix)
	require.Positive(t, next.TurnPrefix)
	require.Equal(t, opening.Conversation, next.Conversation)

	// Loads 2, 2, 2, 4 (with the request, 11/4 in flight: 1.25× rounds up to 4): the
	// conversation's rendezvous choice carries 4, above the band (least 2 + 1), within the
	// mean bound.
	cands := func() []Candidate {
		cs := []Candidate{{Target: 10, Load: 2}, {Target: 11, Load: 2}, {Target: 12, Load: 2}, {Target: 13, Load: 4}}
		home := rendezvousPick(cs, opening.Conversation)
		cs[home].Load, cs[(home+1)%4].Load = 4, 2
		return cs
	}
	cs := cands()
	home := rendezvousPick(cs, opening.Conversation)

	c := SelectPrint(cs, opening)
	require.Equal(t, OutcomeMiss, c.Outcome)
	require.NotEqual(t, home, c.Index, "an opening is placed within the band")
	require.LessOrEqual(t, cs[c.Index].Load, 3)

	cs = cands()
	c = SelectPrint(cs, next)
	require.Equal(t, Choice{Index: home, Outcome: OutcomeMiss}, c, "a later turn goes home within the mean bound")
}
