package affinity

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// onePoint is a print with one checkpoint of hash h.
func onePoint(h uint64) *Print {
	return &Print{Checkpoints: []Checkpoint{{Hash: h, Prefix: 2048}}, Scanned: 2048}
}

func candidates(ts ...Target) []Candidate {
	cs := make([]Candidate, len(ts))
	for i, t := range ts {
		cs[i].Target = t
	}
	return cs
}

var testDomain = Domain{Route: "llm", Environment: "prod", Generation: 3, Model: "chat", Endpoint: openai.ChatCompletions}

func TestLookupFindsTheLongestLearnedPrefix(t *testing.T) {
	x := NewIndex(Config{})
	s := testDomain.Scope()
	sys := text("system", 2000)
	first := fingerprint(t, openai.ChatCompletions, chat(sys, text("q1", 3000)))
	turn1 := fingerprint(t, openai.ChatCompletions, chat(sys, text("q1", 3000), text("a1", 3000), text("q2", 3000)))
	turn2 := fingerprint(t, openai.ChatCompletions, chat(sys, text("q1", 3000), text("a1", 3000), text("q2", 3000), text("a2", 3000), "q3"))

	cs := candidates(1, 2, 3)
	_, _, ok := x.Lookup(s, turn2, cs)
	require.False(t, ok)

	x.Learn(s, turn1, 1)
	x.Learn(s, first, 2)
	got, prefix, ok := x.Lookup(s, turn2, cs)
	require.True(t, ok)
	require.Equal(t, Target(1), got)
	last := turn1.Checkpoints[len(turn1.Checkpoints)-1].Prefix
	require.Equal(t, last, prefix, "the end of the previous turn")
	require.Equal(t, last, cs[0].Prefix)
	require.Equal(t, first.Checkpoints[len(first.Checkpoints)-1].Prefix, cs[1].Prefix)
	require.Zero(t, cs[2].Prefix)
	require.Zero(t, cs[2].Used)

	// A target that is not a candidate is not reported.
	cs = candidates(2, 3)
	got, prefix, ok = x.Lookup(s, turn2, cs)
	require.True(t, ok)
	require.Equal(t, Target(2), got)
	require.Equal(t, cs[0].Prefix, prefix)

	// No candidates, or a print without checkpoints: nothing.
	_, _, ok = x.Lookup(s, turn2, nil)
	require.False(t, ok)
	_, _, ok = x.Lookup(s, &Print{}, candidates(1))
	require.False(t, ok)
}

func TestDomainsDoNotShareHints(t *testing.T) {
	x := NewIndex(Config{})
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("q", 5000)))
	x.Learn(testDomain.Scope(), p, 1)

	others := []Domain{testDomain, testDomain, testDomain, testDomain, testDomain}
	others[0].Route = "other"
	others[1].Environment = "staging"
	others[2].Generation = 4
	others[3].Model = "chat-2"
	others[4].Endpoint = openai.Responses
	seen := map[Scope]bool{testDomain.Scope(): true}
	for _, d := range others {
		require.False(t, seen[d.Scope()], "%+v", d)
		seen[d.Scope()] = true
		_, _, ok := x.Lookup(d.Scope(), p, candidates(1))
		require.False(t, ok, "%+v sees the hint of another domain", d)
	}
	// Field boundaries are part of the scope: ("ab","c") is not ("a","bc").
	a := Domain{Route: "ab", Environment: "c"}
	b := Domain{Route: "a", Environment: "bc"}
	require.NotEqual(t, a.Scope(), b.Scope())

	_, _, ok := x.Lookup(testDomain.Scope(), p, candidates(1))
	require.True(t, ok)
}

func TestHintsExpireAfterTTL(t *testing.T) {
	clock := newFakeClock()
	x := NewIndex(Config{Now: clock.Now})
	s := testDomain.Scope()
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("q", 5000)))
	x.Learn(s, p, 1)

	clock.Advance(DefaultTTL - time.Second)
	_, _, ok := x.Lookup(s, p, candidates(1))
	require.True(t, ok, "alive just before 5 minutes")
	require.Equal(t, len(p.Checkpoints), x.Len())

	clock.Advance(time.Second)
	_, _, ok = x.Lookup(s, p, candidates(1))
	require.False(t, ok, "gone at 5 minutes")
	require.Zero(t, x.Len())

	// Learning again renews the hint for another TTL.
	x.Learn(s, p, 1)
	clock.Advance(4 * time.Minute)
	x.Learn(s, p, 1)
	clock.Advance(4 * time.Minute)
	_, _, ok = x.Lookup(s, p, candidates(1))
	require.True(t, ok, "renewed 4 minutes ago")

	// A configured TTL.
	x = NewIndex(Config{Now: clock.Now, TTL: time.Minute})
	x.Learn(s, p, 1)
	clock.Advance(time.Minute)
	_, _, ok = x.Lookup(s, p, candidates(1))
	require.False(t, ok)
}

func TestEachTargetOfAHintExpiresOnItsOwn(t *testing.T) {
	clock := newFakeClock()
	x := NewIndex(Config{Now: clock.Now})
	s := testDomain.Scope()
	p := onePoint(42)
	x.Learn(s, p, 1)
	clock.Advance(3 * time.Minute)
	x.Learn(s, p, 2)
	clock.Advance(3 * time.Minute)
	cs := candidates(1, 2)
	got, _, ok := x.Lookup(s, p, cs)
	require.True(t, ok)
	require.Equal(t, Target(2), got)
	require.Zero(t, cs[0].Prefix, "target 1 learned 6 minutes ago")
}

func TestIndexKeepsAtMost4096Entries(t *testing.T) {
	clock := newFakeClock()
	x := NewIndex(Config{Now: clock.Now})
	s := testDomain.Scope()
	old := syntheticPrints(4, 1)
	for _, p := range old {
		x.Learn(s, p, 1)
	}
	var last *Print
	for _, p := range syntheticPrints(8*DefaultMaxEntries/MaxCheckpoints, 2) {
		clock.Advance(100 * time.Millisecond)
		x.Learn(s, p, 2)
		require.LessOrEqual(t, x.Len(), DefaultMaxEntries)
		last = p
	}
	require.Equal(t, DefaultMaxEntries, x.Len())
	// The newest request is wholly there; the oldest are gone.
	for _, cp := range last.Checkpoints {
		_, _, ok := x.Lookup(s, onePoint(cp.Hash), candidates(2))
		require.True(t, ok)
	}
	for _, p := range old {
		_, _, ok := x.Lookup(s, p, candidates(1))
		require.False(t, ok)
	}
}

func TestLeastRecentlyLearnedGoFirst(t *testing.T) {
	clock := newFakeClock()
	evicted := 0
	x := NewIndex(Config{Now: clock.Now, MaxEntries: 16, OnEvict: func() { evicted++ }}) // one set: exact LRU
	s := testDomain.Scope()
	for h := uint64(0); h < 16; h++ {
		x.Learn(s, onePoint(h), 1)
		clock.Advance(time.Second)
	}
	require.Equal(t, 16, x.Len())
	require.Zero(t, evicted)
	x.Learn(s, onePoint(0), 1) // renewed: now the most recent
	x.Learn(s, onePoint(16), 1)
	require.Equal(t, 16, x.Len())
	require.Equal(t, 1, evicted, "hash 1 was displaced")
	for h := uint64(0); h <= 16; h++ {
		_, _, ok := x.Lookup(s, onePoint(h), candidates(1))
		require.Equal(t, h != 1, ok, "hash %d", h)
	}
	// An expired key that makes way is not an eviction.
	clock.Advance(DefaultTTL)
	x.Learn(s, onePoint(17), 1)
	require.Equal(t, 1, evicted)

	// A default index is 256 sets of 16: each set evicts its least recently learned.
	x = NewIndex(Config{MaxEntries: 4096})
	require.Len(t, x.sets, 256)
	require.Equal(t, 16, x.ways)
	// Small indexes have fewer places.
	x = NewIndex(Config{MaxEntries: 5})
	require.Len(t, x.sets, 1)
	for h := uint64(0); h < 10; h++ {
		x.Learn(s, onePoint(h), 1)
	}
	require.Equal(t, 5, x.Len())
}

func TestNewKeysDoNotDisplaceKeysLearnedWithinASecond(t *testing.T) {
	clock := newFakeClock()
	x := NewIndex(Config{Now: clock.Now, MaxEntries: 16})
	s := testDomain.Scope()
	for h := uint64(0); h < 16; h++ {
		x.Learn(s, onePoint(h), 1)
	}
	clock.Advance(999 * time.Millisecond)
	x.Learn(s, onePoint(16), 1)
	_, _, ok := x.Lookup(s, onePoint(16), candidates(1))
	require.False(t, ok, "every place was learned within the last second")
	_, _, ok = x.Lookup(s, onePoint(0), candidates(1))
	require.True(t, ok)

	clock.Advance(time.Millisecond)
	x.Learn(s, onePoint(16), 1)
	_, _, ok = x.Lookup(s, onePoint(16), candidates(1))
	require.True(t, ok, "a second later the least recently learned gives way")
	_, _, ok = x.Lookup(s, onePoint(0), candidates(1))
	require.False(t, ok)
}

func TestLearnRenewsOncePerSecond(t *testing.T) {
	clock := newFakeClock()
	x := NewIndex(Config{Now: clock.Now})
	s := testDomain.Scope()
	p := onePoint(5)
	x.Learn(s, p, 1)
	cs := candidates(1)
	x.Lookup(s, p, cs)
	first := cs[0].Used
	clock.Advance(500 * time.Millisecond)
	x.Learn(s, p, 1)
	x.Lookup(s, p, cs)
	require.Equal(t, first, cs[0].Used, "learned half a second ago: left as it is")
	clock.Advance(500 * time.Millisecond)
	x.Learn(s, p, 1)
	x.Lookup(s, p, cs)
	require.Equal(t, first+int64(time.Second), cs[0].Used)
}

// ForgetTarget drops a target's hints in every scope and for every conversation, and no
// other target's: what a backend's restart calls for.
func TestForgetTarget(t *testing.T) {
	x := NewIndex(Config{})
	other := testDomain
	other.Model = "other"
	s1, s2 := testDomain.Scope(), other.Scope()
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("q", 9000)))
	q := fingerprint(t, openai.ChatCompletions, chat("t", text("r", 9000)))
	for _, s := range []Scope{s1, s2} {
		x.Learn(s, p, 1)
		x.Learn(s, p, 2)
		x.Learn(s, q, 1)
	}
	n := x.Len()
	x.ForgetTarget(1)
	for _, s := range []Scope{s1, s2} {
		cs := candidates(1, 2)
		got, _, ok := x.Lookup(s, p, cs)
		require.True(t, ok)
		require.Equal(t, Target(2), got, "the other target's hints stay")
		require.Zero(t, cs[0].Prefix, "the forgotten target has no hint")
		_, _, ok = x.Lookup(s, q, candidates(1, 2))
		require.False(t, ok, "a checkpoint that led to the forgotten target alone leads nowhere")
	}
	require.Equal(t, n-2*len(q.Checkpoints), x.Len(), "checkpoints without targets are dropped")
	x.ForgetTarget(1) // nothing left of it: no-op
	require.Equal(t, n-2*len(q.Checkpoints), x.Len())
}

func TestForget(t *testing.T) {
	x := NewIndex(Config{})
	s := testDomain.Scope()
	p := fingerprint(t, openai.ChatCompletions, chat("s", text("q", 9000)))
	x.Learn(s, p, 1)
	x.Learn(s, p, 2)
	x.Forget(s, p, 1)
	cs := candidates(1, 2)
	got, _, ok := x.Lookup(s, p, cs)
	require.True(t, ok)
	require.Equal(t, Target(2), got, "the other target's hints stay")
	require.Zero(t, cs[0].Prefix)
	require.Equal(t, len(p.Checkpoints), x.Len())

	x.Forget(s, p, 2)
	_, _, ok = x.Lookup(s, p, candidates(1, 2))
	require.False(t, ok)
	require.Zero(t, x.Len(), "a checkpoint without targets is dropped")
	x.Forget(s, p, 2) // nothing left: no-op
	x.Forget(testDomain.Scope(), &Print{}, 1)

	// A forgotten place is the next one used, before any live entry is evicted.
	clock := newFakeClock()
	x = NewIndex(Config{Now: clock.Now, MaxEntries: 16})
	for h := uint64(0); h < 16; h++ {
		x.Learn(s, onePoint(h), 1)
	}
	x.Forget(s, onePoint(7), 1)
	x.Learn(s, onePoint(100), 1)
	for h := uint64(0); h < 16; h++ {
		_, _, ok := x.Lookup(s, onePoint(h), candidates(1))
		require.Equal(t, h != 7, ok, "hash %d", h)
	}
}

func TestAHintRemembersFourTargets(t *testing.T) {
	clock := newFakeClock()
	x := NewIndex(Config{Now: clock.Now})
	s := testDomain.Scope()
	p := onePoint(7)
	for tg := Target(1); tg <= 5; tg++ {
		x.Learn(s, p, tg)
		clock.Advance(2 * time.Second)
	}
	cs := candidates(1, 2, 3, 4, 5)
	got, _, ok := x.Lookup(s, p, cs)
	require.True(t, ok)
	require.Equal(t, Target(5), got, "the most recently learned of equal prefixes")
	require.Zero(t, cs[0].Prefix, "the fifth target replaced the least recently learned")
	for i := 1; i < 5; i++ {
		require.Equal(t, 2048, cs[i].Prefix)
		if i > 1 {
			require.Greater(t, cs[i].Used, cs[i-1].Used)
		}
	}
}

func TestIndexConcurrentUse(t *testing.T) {
	x := NewIndex(Config{MaxEntries: 512})
	s := testDomain.Scope()
	prints := syntheticPrints(16, 5)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 0))
			cs := candidates(1, 2, 3)
			for range 300 {
				p := prints[r.IntN(len(prints))]
				switch r.IntN(4) {
				case 0, 1:
					x.Lookup(s, p, cs)
				case 2:
					x.Learn(s, p, Target(1+r.IntN(3)))
				default:
					x.Forget(s, p, Target(1+r.IntN(3)))
				}
				if !assert.LessOrEqual(t, x.Len(), 512) { // assert: not the test's goroutine
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestIndexHoldsOnlyNumbers: the index stores hashes, targets, times and ranks; no type it
// stores can hold prompt text or a caller's cache key.
func TestIndexHoldsOnlyNumbers(t *testing.T) {
	var check func(reflect.Type, string)
	check = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				check(ty.Field(i).Type, path+"."+ty.Field(i).Name)
			}
		case reflect.Array:
			check(ty.Elem(), path+"[]")
		case reflect.Uint64, reflect.Int64, reflect.Int32:
		default:
			t.Errorf("%s is a %s", path, ty)
		}
	}
	check(reflect.TypeFor[set](), "set")
}

func TestIndexAllocatesNothing(t *testing.T) {
	x := NewIndex(Config{})
	prints := syntheticPrints(64, 9)
	cs := candidates(1, 2, 3, 4)
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		s := testDomain.Scope()
		p := prints[i%len(prints)]
		i++
		x.Lookup(s, p, cs)
		x.Learn(s, p, Target(1+i%4))
		if i%7 == 0 {
			x.Forget(s, p, 1)
		}
	})
	require.Zero(t, allocs)
}

func TestRankOrder(t *testing.T) {
	o := uint64(initialOrder)
	for w := range 16 {
		require.Equal(t, w, rank(o, w))
	}
	o = promote(o, 9)
	require.Equal(t, 0, rank(o, 9))
	require.Equal(t, 1, rank(o, 0))
	require.Equal(t, 10, rank(o, 10))
	o = demote(o, 9, 15)
	require.Equal(t, 15, rank(o, 9))
	require.Equal(t, 14, rank(o, 15))
	require.Equal(t, 0, rank(o, 0))
	// Every order stays a permutation.
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		if r.IntN(2) == 0 {
			o = promote(o, r.IntN(16))
		} else {
			o = demote(o, r.IntN(16), 15)
		}
		seen := 0
		for k := range 16 {
			seen |= 1 << (o >> (4 * k) & 0xf)
		}
		require.Equal(t, 0xffff, seen, strconv.FormatUint(o, 16))
	}
}
