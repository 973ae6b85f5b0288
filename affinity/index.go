package affinity

import (
	"math"
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
	// readLocks is how many read locks the index spreads its readers over.
	readLocks = 8
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
	// OnEvict, when set, is called once for every live key a new key displaces (the index
	// was full in that key's set): for an evictions metric. It runs under the index's
	// exclusive lock and must be quick and must not call the index.
	OnEvict func()
}

// Index is the in-process prefix index: checkpoint hashes, scoped by domain, each mapped to
// the targets that were last seen serving a request with that prefix. It stores no prompt
// text and no caller cache key: only 64-bit keys (a checkpoint hash mixed with the domain's
// scope and a per-index random seed), targets and times.
//
// It is a set-associative cache, as CPU caches are: a key belongs to one set of 16 places,
// and a new key takes the place of the least recently learned key of its set (an expired
// one first), unless that key was learned within the last second. Eviction is thus LRU per
// set and approximately LRU overall, and finding a key compares a tag byte of each of the
// set's places in two words instead of chasing a hash chain and an LRU list: a lookup and a
// learn of 128 checkpoints take a few microseconds.
//
// It is safe for concurrent use. Readers (Lookup, and Learn until it finds something to
// change) take one of 8 read locks at random, so that cores serving lookups do not write a
// common lock word; a writer takes all 8. Learn renews a hint at most once a second, so the
// follow-up turns of known conversations, the common case, write once a second at most.
type Index struct {
	ttl   int64 // ns
	now   func() time.Time
	epoch time.Time
	seed  uint64
	ways  int
	evict func()
	sets  []set
	locks [readLocks]readLock
	// epochs is the restart epoch of each backend the index's hints name (Index.Epochs).
	epochs epochBook
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

// last returns when h was last learned, in ns on the index's clock.
func (h *hint) last() int64 {
	t := int64(math.MinInt64)
	for j := 0; j < int(h.n); j++ {
		t = max(t, h.used[j])
	}
	return t
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

// readLock is one of the index's read locks, padded so that two never share a cache line.
type readLock struct {
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
	x := &Index{ttl: int64(cfg.TTL), now: cfg.Now, epoch: cfg.Now(), seed: rand.Uint64(),
		ways: nways, sets: make([]set, nsets), evict: cfg.OnEvict}
	for i := range x.sets {
		x.sets[i].order = initialOrder
	}
	return x
}

// rlock takes one of the read locks, chosen at random: two cores reading the index rarely
// write the same lock word, where one shared read lock would bounce between their caches on
// every call. It returns the lock to give to runlock.
func (x *Index) rlock() *sync.RWMutex {
	mu := &x.locks[rand.IntN(readLocks)].mu
	mu.RLock()
	return mu
}

// lock takes every read lock for writing, in order, so that a writer excludes every reader
// and every other writer.
func (x *Index) lock() {
	for i := range x.locks {
		x.locks[i].mu.Lock()
	}
}

func (x *Index) unlock() {
	for i := len(x.locks) - 1; i >= 0; i-- {
		x.locks[i].mu.Unlock()
	}
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

// key returns the index key of checkpoint hash h under scope key sk, and its set (chosen by
// the key's top 32 bits, for any number of sets).
func (x *Index) key(sk, h uint64) (uint64, *set) {
	key := fmix64(h^sk) | 1
	return key, &x.sets[(key>>32)*uint64(len(x.sets))>>32]
}

// checkpoints returns the checkpoints of p the index uses: all of a print Fingerprint made,
// the longest MaxCheckpoints of one made by hand.
func checkpoints(p *Print) []Checkpoint {
	return p.Checkpoints[max(len(p.Checkpoints)-MaxCheckpoints, 0):]
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
// Lookup does not change the index and takes one shared lock. It allocates nothing.
func (x *Index) Lookup(s Scope, p *Print, cands []Candidate) (t Target, prefix int, ok bool) {
	for i := range cands {
		cands[i].Prefix, cands[i].Used = 0, 0
	}
	if len(p.Checkpoints) == 0 || len(cands) == 0 {
		return 0, 0, false
	}
	now := x.clock()
	sk, cps := x.scopeKey(s), checkpoints(p)
	found := 0
	mu := x.rlock()
	// Longest first: a candidate's first hint is its longest.
	for k := len(cps) - 1; k >= 0 && found < len(cands); k-- {
		key, st := x.key(sk, cps[k].Hash)
		pl := x.find(st, key)
		if pl < 0 {
			continue
		}
		h := &st.hints[pl]
		for j := 0; j < int(h.n); j++ {
			if now-h.used[j] >= x.ttl {
				continue
			}
			for ci := range cands {
				c := &cands[ci]
				if c.Target == h.targets[j] && c.Prefix == 0 {
					c.Prefix, c.Used = cps[k].Prefix, h.used[j]
					found++
				}
			}
		}
	}
	mu.RUnlock()
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
			pl := half*8 + bits.TrailingZeros64(m)/8
			if st.keys[pl] == key {
				return pl
			}
		}
	}
	return -1
}

// Learn records that target t served a request with fingerprint p in scope s: every
// checkpoint of p now leads to t (besides up to MaxTargetsPerHint-1 other targets), with its
// time renewed. Call it after a response, when the target holds the prefix in its cache.
// A hint t learned less than refreshAfter (1 s) ago is left as it is: a follow-up turn
// then writes nothing and takes one shared lock, and cores serving follow-ups do not wait
// for each other. Learn allocates nothing.
func (x *Index) Learn(s Scope, p *Print, t Target) {
	if len(p.Checkpoints) == 0 {
		return
	}
	now := x.clock()
	sk, cps := x.scopeKey(s), checkpoints(p)
	mu := x.rlock()
	stale := false
	for k := range cps {
		key, st := x.key(sk, cps[k].Hash)
		if pl := x.find(st, key); pl >= 0 && !x.fresh(st, pl, t, now) || pl < 0 && x.admits(st, now) {
			stale = true
			break
		}
	}
	mu.RUnlock()
	if !stale {
		return
	}
	x.lock()
	for k := range cps {
		key, st := x.key(sk, cps[k].Hash)
		x.learn(st, key, t, now)
	}
	x.unlock()
}

// refreshAfter is how old a hint must be before Learn renews it. The recency the index
// evicts by is thus kept to the second, which is nothing against a 5-minute TTL, and a
// renewal costs the exclusive lock.
const refreshAfter = int64(time.Second)

// admits reports whether a new key may enter st: its least recently learned place is empty
// or was learned at least refreshAfter ago. A key learned within the last second is not
// displaced: when new keys arrive faster than a set can age, the newest are dropped rather
// than churning the set (and the exclusive lock) on every Learn.
func (x *Index) admits(st *set, now int64) bool {
	lru := int(st.order >> (4 * (x.ways - 1)) & 0xf)
	return st.keys[lru] == 0 || now-st.hints[lru].last() >= refreshAfter
}

// fresh reports whether the key at place pl of st leads to t, learned less than
// refreshAfter ago.
func (x *Index) fresh(st *set, pl int, t Target, now int64) bool {
	h := &st.hints[pl]
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
	if w >= 0 && x.fresh(st, w, t, now) {
		return
	}
	if w < 0 {
		if !x.admits(st, now) {
			return
		}
		w = int(st.order >> (4 * (x.ways - 1)) & 0xf)
		if x.evict != nil && st.keys[w] != 0 && st.hints[w].live(now, x.ttl) {
			x.evict()
		}
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
	sk, cps := x.scopeKey(s), checkpoints(p)
	x.lock()
	defer x.unlock()
	for k := range cps {
		key, st := x.key(sk, cps[k].Hash)
		pl := x.find(st, key)
		if pl < 0 {
			continue
		}
		x.drop(st, pl, t)
	}
}

// ForgetTarget drops every hint that leads to target t, in every scope. Call it when t lost
// its whole cache: the backend restarted (its epoch changed), so that no conversation is sent
// to an empty cache for a prefix it held before. It takes the index's exclusive lock and
// reads every place of the index (DefaultMaxEntries of them: tens of microseconds,
// BenchmarkIndexForgetTarget), once per restart; it allocates nothing.
func (x *Index) ForgetTarget(t Target) {
	x.lock()
	defer x.unlock()
	for i := range x.sets {
		st := &x.sets[i]
		for pl := 0; pl < x.ways; pl++ {
			if st.keys[pl] != 0 {
				x.drop(st, pl, t)
			}
		}
	}
}

// drop removes t from the targets of the key at place pl of st, and the key when it leads
// nowhere then. The caller holds the exclusive lock.
func (x *Index) drop(st *set, pl int, t Target) {
	h := &st.hints[pl]
	for j := 0; j < int(h.n); j++ {
		if h.targets[j] == t {
			last := h.n - 1
			h.targets[j], h.used[j] = h.targets[last], h.used[last]
			h.n = last
			break
		}
	}
	if h.n == 0 {
		st.keys[pl] = 0
		st.setTag(pl, 0)
		st.order = demote(st.order, pl, x.ways-1)
	}
}

// Len returns the number of checkpoint hashes held that have a target not yet expired.
func (x *Index) Len() int {
	now := x.clock()
	n := 0
	mu := x.rlock()
	defer mu.RUnlock()
	for i := range x.sets {
		st := &x.sets[i]
		for pl := 0; pl < x.ways; pl++ {
			if st.keys[pl] != 0 && st.hints[pl].live(now, x.ttl) {
				n++
			}
		}
	}
	return n
}
