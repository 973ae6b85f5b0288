package affinity

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

// requireChained checks what every print promises: checkpoints ascending, within bounds,
// at most MaxCheckpoints, each hash the XXH64 of the canonical prefix it marks, and
// EndsMessage exactly where a message or the system prompt ends.
func requireChained(t *testing.T, p *Print) {
	t.Helper()
	canon := p.Canonical()
	require.LessOrEqual(t, len(p.Checkpoints), MaxCheckpoints)
	for k, cp := range p.Checkpoints {
		require.GreaterOrEqual(t, cp.Prefix, MinPrefixBytes)
		require.LessOrEqual(t, cp.Prefix, p.Scanned)
		if k > 0 {
			require.Greater(t, cp.Prefix, p.Checkpoints[k-1].Prefix)
		}
		require.Equal(t, xxhash.Sum64(canon[:cp.Prefix]), cp.Hash, "checkpoint %d", k)
		require.True(t, cp.EndsMessage || cp.Prefix%CheckpointEvery == 0, "checkpoint %d at %d", k, cp.Prefix)
		if cp.EndsMessage { // a message object, or the system prompt's list of parts
			require.Contains(t, "}]", string(canon[cp.Prefix-1]), "checkpoint %d at %d", k, cp.Prefix)
		}
	}
}

func prefixes(p *Print) []int {
	var out []int
	for _, cp := range p.Checkpoints {
		out = append(out, cp.Prefix)
	}
	return out
}

// messageEnds returns where each message of a canonical chat stream ends (the system
// prompt of chat is a message).
func messageEnds(t *testing.T, canon []byte) []int {
	t.Helper()
	i := strings.Index(string(canon), `"messages":[`)
	require.GreaterOrEqual(t, i, 0)
	var ends []int
	for i += len(`"messages":[`); i < len(canon); {
		e := skipValue(canon, i)
		require.Positive(t, e)
		ends = append(ends, e)
		if e >= len(canon) || canon[e] != ',' {
			break
		}
		i = e + 1
	}
	return ends
}

func TestCheckpointsEvery4KiB(t *testing.T) {
	// One 20 KiB user message: fixed checkpoints inside it, one more where it ends.
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("long", 20<<10)))
	requireChained(t, p)
	ends := messageEnds(t, p.Canonical())
	require.Len(t, ends, 2)
	require.Less(t, ends[0], MinPrefixBytes, "the system message is too short to mark")
	require.Equal(t, []int{4096, 8192, 12288, 16384, 20480, ends[1]}, prefixes(p))
	require.True(t, p.Checkpoints[5].EndsMessage)
	for _, cp := range p.Checkpoints[:5] {
		require.False(t, cp.EndsMessage)
	}
}

func TestCheckpointsAtMessageBoundaries(t *testing.T) {
	turns := []string{text("a", 900), text("b", 300), text("c", 2000), text("d", 50), text("e", 5000)}
	p := fingerprint(t, openai.ChatCompletions, chat(text("sys", 1500), turns...))
	requireChained(t, p)
	want := append([]int(nil), messageEnds(t, p.Canonical())...)
	for k := 1; k*CheckpointEvery <= p.Scanned; k++ {
		want = append(want, k*CheckpointEvery)
	}
	require.ElementsMatch(t, want, prefixes(p), "every message end (all above 1 KiB) and every 4 KiB")

	// A message that ends exactly on a 4 KiB multiple gives one checkpoint that ends a
	// message.
	base := fingerprint(t, openai.ChatCompletions, chat("s", "x"))
	pad := CheckpointEvery - (base.Scanned - len(`]}`))
	p = fingerprint(t, openai.ChatCompletions, chat("s", strings.Repeat("x", 1+pad)))
	requireChained(t, p)
	require.Equal(t, []Checkpoint{{Hash: p.Checkpoints[0].Hash, Prefix: CheckpointEvery, EndsMessage: true}}, p.Checkpoints)
}

func TestCheckpointsNotBelow1KiB(t *testing.T) {
	p := fingerprint(t, openai.ChatCompletions, chat("s", "hi", "hello", "bye"))
	require.Less(t, p.Scanned, MinPrefixBytes)
	require.Empty(t, p.Checkpoints)
	require.NotZero(t, p.Conversation, "a short request still has a conversation key")

	p = fingerprint(t, openai.ChatCompletions, chat("s", text("a", 700), text("b", 700)))
	requireChained(t, p)
	ends := messageEnds(t, p.Canonical())
	require.Less(t, ends[1], MinPrefixBytes)
	require.Equal(t, []int{ends[2]}, prefixes(p))
}

func TestCheckpointsCappedAt128(t *testing.T) {
	// 400 messages of about 500 bytes: 50 fixed checkpoints and 400 message ends.
	turns := make([]string, 400)
	for i := range turns {
		turns[i] = text("t"+strconv.Itoa(i), 480)
	}
	p := fingerprint(t, openai.ChatCompletions, chat("s", turns...))
	requireChained(t, p)
	require.False(t, p.Truncated)
	require.Len(t, p.Checkpoints, MaxCheckpoints)
	fixed := p.Scanned / CheckpointEvery
	var got []int
	for _, cp := range p.Checkpoints {
		if cp.Prefix%CheckpointEvery != 0 {
			got = append(got, cp.Prefix)
		}
	}
	for k := 1; k <= fixed; k++ {
		require.Contains(t, prefixes(p), k*CheckpointEvery, "every fixed checkpoint is kept")
	}
	// The message ends kept are the last ones.
	var ends []int
	for _, e := range messageEnds(t, p.Canonical()) {
		if e >= MinPrefixBytes && e%CheckpointEvery != 0 {
			ends = append(ends, e)
		}
	}
	require.Len(t, got, MaxCheckpoints-fixed)
	require.Equal(t, ends[len(ends)-len(got):], got)

	// The next turn still finds this one's last message end.
	next := fingerprint(t, openai.ChatCompletions, chat("s", append(turns, "more", "and more")...))
	require.Contains(t, next.Checkpoints, p.Checkpoints[len(p.Checkpoints)-1])

	// A request that branches off early shares the fixed checkpoints before its branch.
	branch := fingerprint(t, openai.ChatCompletions, chat("s", append(turns[:20:20], "elsewhere")...))
	x := NewIndex(Config{})
	x.Learn(testDomain.Scope(), p, 1)
	_, prefix, ok := x.Lookup(testDomain.Scope(), branch, candidates(1))
	require.True(t, ok)
	// The long request kept no message end that early, so the match is the last fixed
	// checkpoint before the branch point.
	at := branch.Checkpoints[len(branch.Checkpoints)-2].Prefix
	require.Equal(t, at/CheckpointEvery*CheckpointEvery, prefix)
}

func TestFingerprintHashesAtMost256KiB(t *testing.T) {
	body := chatBody(1 << 20)
	p := fingerprint(t, openai.ChatCompletions, body)
	requireChained(t, p)
	require.True(t, p.Truncated)
	require.Equal(t, MaxScanBytes, p.Scanned)
	require.Len(t, p.Canonical(), MaxScanBytes)
	for k := 1; k <= MaxScanBytes/CheckpointEvery; k++ {
		require.Contains(t, prefixes(p), k*CheckpointEvery)
	}
	require.Equal(t, MaxScanBytes, p.Checkpoints[len(p.Checkpoints)-1].Prefix)

	// The scanned stream is the head of the whole canonical stream.
	var c canon
	c.reset(openai.ChatCompletions, body, math.MaxInt)
	require.Positive(t, c.request(openai.Span{}, openai.Span{}))
	require.Greater(t, len(c.out), MaxScanBytes)
	require.Equal(t, string(c.out[:MaxScanBytes]), string(p.Canonical()))

	// A single string longer than the limit is cut inside the string.
	p = fingerprint(t, openai.ChatCompletions, chat("s", text("x", 300<<10)))
	require.True(t, p.Truncated)
	require.Equal(t, MaxScanBytes, p.Scanned)
	require.Len(t, p.Checkpoints, MaxScanBytes/CheckpointEvery)
	requireChained(t, p)
}

func TestConversationKey(t *testing.T) {
	system := text("shared system prompt", 3000)
	turn1 := fingerprint(t, openai.ChatCompletions, chat(system, "Tell me about caches."))
	turn2 := fingerprint(t, openai.ChatCompletions, chat(system, "Tell me about caches.", "They store things.", "Which things?"))
	turn3 := fingerprint(t, openai.ChatCompletions, chat(system, "Tell me about caches.", "They store things.", "Which things?", "Recent ones.", "Thanks."))
	require.Equal(t, turn1.Conversation, turn2.Conversation, "stable across turns")
	require.Equal(t, turn1.Conversation, turn3.Conversation)

	other := fingerprint(t, openai.ChatCompletions, chat(system, "Tell me about queues."))
	require.NotEqual(t, turn1.Conversation, other.Conversation, "the shared system prompt alone is not the key")
	// Both share the checkpoint at the end of the system prompt, but not the key.
	require.Equal(t, turn1.Checkpoints[0], other.Checkpoints[0])

	// The key is the hash of the stream up to the end of the first user message.
	ends := messageEnds(t, turn2.Canonical())
	require.Equal(t, xxhash.Sum64(turn2.Canonical()[:ends[1]]), turn2.Conversation)

	// Without a user message, the whole scanned stream is the key.
	p := fingerprint(t, openai.ChatCompletions, []byte(`{"model":"m","messages":[{"role":"system","content":"only"}]}`))
	require.Equal(t, xxhash.Sum64(p.Canonical()), p.Conversation)

	// Responses and Messages: the first user message too, after instructions or system.
	r1 := fingerprint(t, openai.Responses, []byte(`{"model":"m","instructions":"s","input":"hi"}`))
	r2 := fingerprint(t, openai.Responses, []byte(`{"model":"m","instructions":"s","input":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"next"}]}`))
	require.Equal(t, r1.Conversation, r2.Conversation)
	m1 := fingerprint(t, openai.Messages, []byte(`{"model":"m","max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"}]}`))
	m2 := fingerprint(t, openai.Messages, []byte(`{"model":"m","max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"x"}]}`))
	require.Equal(t, m1.Conversation, m2.Conversation)
}

func TestSystemPromptEndIsACheckpoint(t *testing.T) {
	p := fingerprint(t, openai.Messages, []byte(`{"model":"m","max_tokens":5,"system":"`+text("s", 2000)+`","messages":[{"role":"user","content":"hi"}]}`))
	requireChained(t, p)
	canon := string(p.Canonical())
	end := strings.Index(canon, `,"messages":`)
	require.Equal(t, end, p.Checkpoints[0].Prefix)
	require.True(t, p.Checkpoints[0].EndsMessage)
}

func TestFollowUpTurnSharesCheckpoints(t *testing.T) {
	turns := []string{text("q1", 3000), text("a1", 3000)}
	first := fingerprint(t, openai.ChatCompletions, chat("s", turns...))
	next := fingerprint(t, openai.ChatCompletions, chat("s", append(turns, text("q2", 3000))...))
	for _, cp := range first.Checkpoints {
		require.Contains(t, next.Checkpoints, cp)
	}
}

func TestFingerprintAllocatesNothingOnceWarm(t *testing.T) {
	body := chatBody(256 << 10)
	var r openai.Request
	require.NoError(t, openai.Peek(openai.ChatCompletions, body, &r))
	var p Print
	require.NoError(t, Fingerprint(openai.ChatCompletions, body, r.Prompt, r.System, &p))
	allocs := testing.AllocsPerRun(20, func() {
		_ = Fingerprint(openai.ChatCompletions, body, r.Prompt, r.System, &p)
	})
	require.Zero(t, allocs)
}
