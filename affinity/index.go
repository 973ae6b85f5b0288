package affinity

import (
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"
)

// Index defaults and limits.
const (
	// DefaultTTL is how long a hint lives after it was last learned: 5 minutes, the order of
	// the time an inference server keeps an idle prefix in its KV cache under load.
	DefaultTTL = 5 * time.Minute
	// DefaultMaxEntries is the most checkpoint hashes an index holds (each with its targets);
	// beyond it the least recently learned go.
	DefaultMaxEntries = 4096
	// MaxTargetsPerHint is the most targets one checkpoint remembers: the same prefix may sit
	// in several backends' caches. A fifth target replaces the least recently learned one.
	MaxTargetsPerHint = 4
	// ways is the associativity of the index: a key may sit in any of the 16 places of its
	// set, and a new key replaces the least recently learned of them.
	ways = 16
	// maxShards is the most locks the sets are striped over.
	maxShards = 16
)

// Target is the caller's identifier of a backend: a small integer such as the target's
// position in its alias, or a hash of its name. Rendezvous hashing ranks targets by it, so
// every gateway replica must give a backend the same Target.
type Target uint64

// Config configures an Index. The zero Config gives the defaults.
type Config struct {
	// TTL is how long a hint lives after it was last learned (0: DefaultTTL).
	TTL time.Duration
	// MaxEntries is the most checkpoint hashes held (0: DefaultMaxEntries); above 16 it is
	// rounded down to a multiple of 16.
	MaxEntries int
	// Now is the clock (nil: time.Now); tests give a controllable one.
	Now func() time.Time
}

// Index is the in-process prefix index: checkpoint hashes, scoped by domain, each mapped to
// the targets that were last seen serving a request with that prefix. It stores no prompt
// text and no caller cache key: only 64-bit keys (a checkpoint hash mixed with the domain's
// scope and a per-index random seed), targets and times.
//
// It is a set-associative cache, as CPU caches are: a key belongs to one set of 16 places,
// and a new key takes the place of the least recently learned key of its set (an expired
// one first). Eviction is thus LRU per set and approximately LRU overall, and finding a key
// reads one set's 16 keys (two cache lines) instead of chasing a hash chain and an LRU list:
// that keeps a lookup and a learn of 128 checkpoints within a few microseconds. The sets are
// striped over up to 16 locks; lookups take them shared. It is safe for concurrent use.
type Index struct {
	ttl       int64 // ns
	now       func() time.Time
	epoch     time.Time
	seed      uint64
	ways      int
	shardMask int
	sets      []set
	shards    []shard
}

// set is one set of the cache. A place is empty when its key is 0 (keys are forced odd).
// order ranks the places from the most recently learned (the low 4 bits) to the least
// (nibble ways-1): an LRU list in one word, so that choosing and promoting a place costs a
// few bit operations instead of a scan of times. Empty places rank last. tags holds a byte
// of each place's key (0 when empty), so that a search compares 16 places in a few word
// operations and reads a key only where its tag matches.
type set struct {
	order uint64
	tags  [ways / 8]uint64
	keys  [ways]uint64
	hints [ways]hint
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// tagOf is the tag of key: never 0.
func tagOf(key uint64) uint64 { return key>>8&0xff | 1 }

func (st *set) setTag(w int, tag uint64) {
	shift := uint(w%8) * 8
	st.tags[w/8] = st.tags[w/8]&^(0xff<<shift) | tag<<shift
}

// initialOrder ranks place i at rank i.
const initialOrder = 0xfedcba9876543210

const nibbles = 0x1111111111111111

// rank returns the rank of place w in order.
func rank(order uint64, w int) int {
	x := order ^ nibbles*uint64(w)
	// The lowest zero nibble of x is exact: borrows only mark nibbles above a zero one.
	z := (x - nibbles) &^ x & (nibbles << 3)
	return bits.TrailingZeros64(z) / 4
}

// promote moves place w to rank 0.
func promote(order uint64, w int) uint64 {
	r := uint(rank(order, w)) * 4
	below := order & (1<<r - 1)
	above := order &^ (1<<(r+4) - 1)
	return above | below<<4 | uint64(w)
}

// demote moves place w to rank last (ways-1 of the index's ways).
func demote(order uint64, w, last int) uint64 {
	r, l := uint(rank(order, w))*4, uint(last)*4
	below := order & (1<<r - 1)
	mid := order >> (r + 4) & (1<<(l-r) - 1) // ranks r+1..last, moved down one
	above := order &^ (1<<(l+4) - 1)
	return above | uint64(w)<<l | mid<<r | below
}

// hint is the targets one key leads to.
type hint struct {
	n       int32
	targets [MaxTargetsPerHint]Target
	used    [MaxTargetsPerHint]int64 // last learned, ns on the index's clock
}

// live reports whether a target of h has not expired.
func (h *hint) live(now, ttl int64) bool {
	for j := 0; j < int(h.n); j++ {
		if now-h.used[j] < ttl {
			return true
		}
	}
	return false
}

// shard is one lock of the stripe, padded so that two locks never share a cache line.
type shard struct {
	mu sync.RWMutex
	_  [64 - 24]byte
}

// NewIndex returns an empty index; it allocates all its memory here, none afterwards.
func NewIndex(cfg Config) *Index {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	nways, nsets := min(cfg.MaxEntries, ways), max(cfg.MaxEntries/ways, 1)
	nshards := 1
	for nshards < maxShards && 2*nshards <= nsets {
		nshards *= 2
	}
	x := &Index{ttl: int64(cfg.TTL), now: cfg.Now, epoch: cfg.Now(), seed: rand.Uint64(),
		ways: nways, shardMask: nshards - 1, sets: make([]set, nsets), shards: make([]shard, nshards)}
	for i := range x.sets {
		x.sets[i].order = initialOrder
	}
	return x
}

// clock returns the time in ns since the index was made (monotonic when Now is time.Now).
func (x *Index) clock() int64 { return int64(x.now().Sub(x.epoch)) }

// fmix64 is MurmurHash3's 64-bit finaliser: a bijection that spreads every input bit over
// the output.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// scopeKey is the per-domain value xor-ed into the domain's checkpoint hashes. Within a
// domain, keys collide only when hashes do; across domains, a collision needs the xor of two
// hashes to equal a value that depends on the index's secret seed.
func (x *Index) scopeKey(s Scope) uint64 { return fmix64(uint64(s) ^ x.seed) }

// setOf returns the set of key, chosen by its top 32 bits (any number of sets).
func (x *Index) setOf(key uint64) int { return int((key >> 32) * uint64(len(x.sets)) >> 32) }

// batch is the keys of a print's checkpoints grouped by shard, so that one call locks each
// shard once rather than once per checkpoint.
type batch struct {
	keys  [MaxCheckpoints]uint64
	sets  [MaxCheckpoints]uint32 // set index of each key
	cps   [MaxCheckpoints]uint8  // checkpoint index, in shard order
	end   [maxShards]uint8       // end of each shard's run in cps
	first int                    // the first checkpoint used
	start int                    // the shard to lock first
}

// run returns the range of cps that falls in shard si.
func (b *batch) run(si int) (lo, hi int) {
	if si > 0 {
		lo = int(b.end[si-1])
	}
	return lo, int(b.end[si])
}

func (x *Index) group(b *batch, s Scope, p *Print) {
	cps := p.Checkpoints
	b.first = max(len(cps)-MaxCheckpoints, 0) // a hand-built print: its longest ones
	cps = cps[b.first:]
	sk := x.scopeKey(s)
	var count [maxShards + 1]int
	for k := range cps {
		key := fmix64(cps[k].Hash^sk) | 1
		si := x.setOf(key)
		b.keys[k], b.sets[k] = key, uint32(si)
		count[si&x.shardMask+1]++
	}
	for i := 1; i <= len(x.shards); i++ {
		count[i] += count[i-1]
	}
	for k := range cps {
		sh := int(b.sets[k]) & x.shardMask
		b.cps[count[sh]] = uint8(k)
		count[sh]++
	}
	for i := range x.shards {
		b.end[i] = uint8(count[i])
	}
	// Callers with different prints take the locks in different orders, so that two of
	// them rarely queue behind each other lock after lock.
	if len(cps) > 0 {
		b.start = int(b.keys[0]>>8) & x.shardMask
	}
}

// Candidate is a target the caller may send the request to. The caller sets Target and
// Load; Lookup sets Prefix and Used.
type Candidate struct {
	Target Target
	// Load is the target's current load in operations (requests in flight).
	Load int
	// Prefix is the length in canonical bytes of the longest checkpoint of the request
	// learned for this target and still alive, 0 when none.
	Prefix int
	// Used is when that hint was last learned, in ns on the index's clock: larger is more
	// recent.
	Used int64
}

// Lookup finds, for each candidate, the longest checkpoint of p learned for it in scope s
// and still alive, and records it in the candidate's Prefix and Used (0 when none). It
// returns the candidate target with the longest such prefix (the most recently learned of
// equal ones) and that prefix in canonical bytes; ok is false when no candidate has one.
// Lookup does not change the index. It allocates nothing.
func (x *Index) Lookup(s Scope, p *Print, cands []Candidate) (t Target, prefix int, ok bool) {
	for i := range cands {
		cands[i].Prefix, cands[i].Used = 0, 0
	}
	if len(p.Checkpoints) == 0 || len(cands) == 0 {
		return 0, 0, false
	}
	now := x.clock()
	var b batch
	x.group(&b, s, p)
	cps := p.Checkpoints[b.first:]
	for j := range x.shards {
		si := (b.start + j) & x.shardMask
		lo, hi := b.run(si)
		if lo == hi {
			continue
		}
		mu := &x.shards[si].mu
		mu.RLock()
		for _, k := range b.cps[lo:hi] {
			st := &x.sets[b.sets[k]]
			w := x.find(st, b.keys[k])
			if w < 0 {
				continue
			}
			h := &st.hints[w]
			prefix := cps[k].Prefix
			for j := 0; j < int(h.n); j++ {
				if now-h.used[j] >= x.ttl {
					continue
				}
				for ci := range cands {
					c := &cands[ci]
					if c.Target == h.targets[j] && prefix > c.Prefix {
						c.Prefix, c.Used = prefix, h.used[j]
					}
				}
			}
		}
		mu.RUnlock()
	}
	best := -1
	for i := range cands {
		c := &cands[i]
		if c.Prefix > 0 && (best < 0 || c.Prefix > cands[best].Prefix ||
			c.Prefix == cands[best].Prefix && c.Used > cands[best].Used) {
			best = i
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	return cands[best].Target, cands[best].Prefix, true
}

// find returns the place of key in st, or -1.
func (x *Index) find(st *set, key uint64) int {
	t := tagOf(key) * lsb
	for half, tags := range st.tags {
		v := tags ^ t
		// Bytes of v that are zero: every one is flagged, and a flag above a zero byte may
		// be false, which the key comparison settles.
		for m := (v - lsb) &^ v & msb; m != 0; m &= m - 1 {
			w := half*8 + bits.TrailingZeros64(m)/8
			if st.keys[w] == key {
				return w
			}
		}
	}
	return -1
}

// Learn records that target t served a request with fingerprint p in scope s: every
// checkpoint of p now leads to t (besides up to MaxTargetsPerHint-1 other targets), with its
// time renewed. Call it after a response, when the target holds the prefix in its cache.
// A hint t learned less than a second ago, and not among the last quarter of its set, is
// left as it is: a follow-up then writes nothing and the index stays shared between cores.
// It allocates nothing.
func (x *Index) Learn(s Scope, p *Print, t Target) {
	if len(p.Checkpoints) == 0 {
		return
	}
	now := x.clock()
	var b batch
	x.group(&b, s, p)
	for j := range x.shards {
		si := (b.start + j) & x.shardMask
		lo, hi := b.run(si)
		if lo == hi {
			continue
		}
		mu := &x.shards[si].mu
		// A follow-up request mostly renews what it learned a moment ago: check under the
		// shared lock first, so that such a Learn writes nothing and the cores serving
		// lookups keep their copies of the sets.
		mu.RLock()
		stale := false
		for _, k := range b.cps[lo:hi] {
			if !x.fresh(&x.sets[b.sets[k]], b.keys[k], t, now) {
				stale = true
				break
			}
		}
		mu.RUnlock()
		if !stale {
			continue
		}
		mu.Lock()
		for _, k := range b.cps[lo:hi] {
			x.learn(&x.sets[b.sets[k]], b.keys[k], t, now)
		}
		mu.Unlock()
	}
}

// refreshAfter is how old a hint must be before Learn renews it: renewing a hint learned
// less than a second ago (and not among the last quarter of its set, the next to be
// evicted) would change its expiry and rank by nothing that matters, and cost a write.
const refreshAfter = int64(time.Second)

// fresh reports whether key already leads to t in st, learned less than refreshAfter ago,
// and does not rank among the last quarter of its set.
func (x *Index) fresh(st *set, key uint64, t Target, now int64) bool {
	w := x.find(st, key)
	return w >= 0 && x.freshAt(st, w, t, now)
}

// freshAt is fresh for the key at place w.
func (x *Index) freshAt(st *set, w int, t Target, now int64) bool {
	if rank(st.order, w) >= x.ways-x.ways/4 {
		return false
	}
	h := &st.hints[w]
	for j := 0; j < int(h.n); j++ {
		if h.targets[j] == t {
			return now-h.used[j] < refreshAfter
		}
	}
	return false
}

// learn makes key lead to t in st, learned now, unless it is fresh. A new key takes the
// place ranked last: an empty one, else the least recently learned (an expired key is older
// than any live one).
func (x *Index) learn(st *set, key uint64, t Target, now int64) {
	w := x.find(st, key)
	if w >= 0 && x.freshAt(st, w, t, now) {
		return
	}
	if w < 0 {
		w = int(st.order >> (4 * (x.ways - 1)) & 0xf)
		st.keys[w], st.hints[w] = key, hint{}
		st.setTag(w, tagOf(key))
	}
	st.order = promote(st.order, w)
	h := &st.hints[w]
	oldest := 0
	for j := 0; j < int(h.n); j++ {
		if h.targets[j] == t {
			h.used[j] = now
			return
		}
		if h.used[j] < h.used[oldest] {
			oldest = j
		}
	}
	if h.n < MaxTargetsPerHint {
		oldest = int(h.n)
		h.n++
	}
	h.targets[oldest], h.used[oldest] = t, now
}

// Forget drops the hints that p's checkpoints lead to target t in scope s. Call it when t
// reports a full cache miss (no cached prompt tokens) for a request routed there by a hint:
// the hint outlived the cache entry (evicted, or the server restarted). Whether to Learn
// the request afterwards, now that t computed the prefix, is the caller's choice.
func (x *Index) Forget(s Scope, p *Print, t Target) {
	if len(p.Checkpoints) == 0 {
		return
	}
	var b batch
	x.group(&b, s, p)
	for j := range x.shards {
		si := (b.start + j) & x.shardMask
		lo, hi := b.run(si)
		if lo == hi {
			continue
		}
		mu := &x.shards[si].mu
		mu.Lock()
		for _, k := range b.cps[lo:hi] {
			st := &x.sets[b.sets[k]]
			w := x.find(st, b.keys[k])
			if w < 0 {
				continue
			}
			h := &st.hints[w]
			for j := 0; j < int(h.n); j++ {
				if h.targets[j] == t {
					last := h.n - 1
					h.targets[j], h.used[j] = h.targets[last], h.used[last]
					h.n = last
					break
				}
			}
			if h.n == 0 {
				st.keys[w] = 0
				st.setTag(w, 0)
				st.order = demote(st.order, w, x.ways-1)
			}
		}
		mu.Unlock()
	}
}

// Len returns the number of checkpoint hashes held that have a target not yet expired.
func (x *Index) Len() int {
	now := x.clock()
	n := 0
	for si := range x.shards {
		mu := &x.shards[si].mu
		mu.RLock()
		for i := si; i < len(x.sets); i += len(x.shards) {
			st := &x.sets[i]
			for w := 0; w < x.ways; w++ {
				if st.keys[w] != 0 && st.hints[w].live(now, x.ttl) {
					n++
				}
			}
		}
		mu.RUnlock()
	}
	return n
}
