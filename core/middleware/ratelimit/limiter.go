// Package ratelimit is the rate-limit middleware ([middlewares.<name>] type = "rate-limit"): a
// token bucket per key (the client's network, the authenticated consumer or a header's value)
// that holds burst tokens and gains rate tokens a minute. A request takes a token or is
// refused with 429, Retry-After and the RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset fields of draft-ietf-httpapi-ratelimit-headers, which admitted requests get
// too.
//
// Each bucket is kept as one number, its theoretical arrival time (the generic cell rate
// algorithm, ITU-T I.371, which is a token bucket): the instant at which the bucket will be
// full again, given the requests it admitted. A key whose instant is past holds no state, so
// forgetting it changes nothing; that makes bounded memory cheap.
package ratelimit

import (
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// Limiter holds the buckets of one rate-limit middleware. It is safe for concurrent use:
// keys are spread over shards, each with its own lock held for a map lookup and a few
// arithmetic operations. Taking a token for a key already tracked allocates nothing.
//
// Memory is bounded by maxKeys: each shard holds at most its share of them. A new key that
// finds its shard full takes the place of a key whose bucket is full again (no state is
// lost); when the few keys looked at are all still refilling, it takes the place of the one
// closest to full, which then starts over with a full bucket: past maxKeys active keys the
// limiter errs towards admitting, never towards growing. A tracked key costs about 100 bytes
// (keys longer than maxKeyLen bytes are tracked by a 128-bit keyed hash of themselves).
type Limiter struct {
	interval int64 // ns between tokens: one minute / rate
	depth    int64 // ns of credit a full bucket holds: burst × interval
	burst    int64
	maxKeys  int
	perShard int
	mask     uint64
	seed     maphash.Seed
	seed2    maphash.Seed // the second half of the hash of long keys
	shards   []shard
	now      func() int64 // monotonic ns; a field so that tests can drive the clock
}

// shard is one lock's share of the keys. Shards sit in one slice: the padding keeps their
// locks on separate cache lines, so that cores limiting different keys do not contend.
type shard struct {
	mu   sync.Mutex
	idx  map[string]int32 // key -> index in ents
	ents []entry
	hand int // where the next eviction search starts (a clock hand)
	_    [64]byte
}

type entry struct {
	key string
	tat int64 // theoretical arrival time, monotonic ns: when the bucket is full again
}

// maxShards bounds the shards; fewer are used for small maxKeys, so that each holds at least
// minPerShard keys.
const (
	maxShards   = 64
	minPerShard = 16
	// evictProbes bounds the keys one insertion into a full shard looks at.
	evictProbes = 8
	// maxKeyLen is the longest key stored as is; longer keys (a long header value) are
	// tracked by a hash, so that a key's memory is bounded whatever clients send.
	maxKeyLen = 64
)

// Decision is what one request got from its bucket.
type Decision struct {
	// Allowed reports whether the request took a token.
	Allowed bool
	// Remaining is the number of whole tokens left in the bucket after this request.
	Remaining int64
	// RetryAfter is the time until the bucket has a token again (0 when Allowed).
	RetryAfter time.Duration
	// Reset is the time until the bucket is full again.
	Reset time.Duration
}

// epoch anchors the monotonic clock of buckets.
var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// NewLimiter returns a limiter of burst tokens per key refilled at rate tokens a minute,
// tracking at most maxKeys keys. rate must be positive, burst and maxKeys at least 1 (Load
// checks the configured ranges).
func NewLimiter(rate float64, burst, maxKeys int) *Limiter {
	interval := int64(math.Round(float64(time.Minute) / rate))
	interval = max(interval, 1)
	burst = max(burst, 1)
	maxKeys = max(maxKeys, 1)
	n := 1
	for n < maxShards && maxKeys/(2*n) >= minPerShard {
		n *= 2
	}
	l := &Limiter{
		interval: interval,
		depth:    interval * int64(burst),
		burst:    int64(burst),
		maxKeys:  maxKeys,
		perShard: maxKeys / n,
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		seed2:    maphash.MakeSeed(),
		shards:   make([]shard, n),
		now:      monoNow,
	}
	for i := range l.shards {
		l.shards[i].idx = map[string]int32{}
	}
	return l
}

// Burst returns the bucket size, in requests.
func (l *Limiter) Burst() int64 { return l.burst }

// MaxKeys returns the most keys the limiter tracks at once.
func (l *Limiter) MaxKeys() int { return l.maxKeys }

// Len returns the number of keys tracked now.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.ents)
		s.mu.Unlock()
	}
	return n
}

// Take takes a token from the bucket of key in namespace ns (a byte that keeps keys of
// different kinds apart), if it has one. key is not kept: it is copied when new. A key longer
// than maxKeyLen is tracked by a 128-bit keyed hash of it.
func (l *Limiter) Take(ns byte, key []byte) Decision {
	var buf [2 + maxKeyLen]byte
	k := append(buf[:0], ns)
	if len(key) <= maxKeyLen {
		k = append(k, key...)
	} else {
		// The long form is 18 bytes and the short one at most 1+maxKeyLen; the marker keeps
		// a short key from matching a hashed one.
		k = append(k, 0xff)
		k = appendUint64(k, maphash.Bytes(l.seed, key))
		k = appendUint64(k, maphash.Bytes(l.seed2, key))
	}
	return l.take(k, l.now())
}

func (l *Limiter) take(key []byte, now int64) Decision {
	s := &l.shards[maphash.Bytes(l.seed, key)&l.mask]
	s.mu.Lock()
	i, ok := s.idx[string(key)]
	tat := now // a key not tracked has a full bucket
	if ok {
		tat = s.ents[i].tat
	}
	t0 := max(tat, now)
	next := t0 + l.interval
	if next-now > l.depth {
		s.mu.Unlock()
		return Decision{RetryAfter: time.Duration(next - now - l.depth), Reset: time.Duration(t0 - now)}
	}
	if ok {
		s.ents[i].tat = next
	} else {
		s.insert(string(key), next, now, l.perShard)
	}
	s.mu.Unlock()
	return Decision{Allowed: true, Remaining: (l.depth - (next - now)) / l.interval, Reset: time.Duration(next - now)}
}

// insert tracks key with tat, in place of another key when the shard holds perShard.
func (s *shard) insert(key string, tat, now int64, perShard int) {
	if len(s.ents) < perShard {
		s.idx[key] = int32(len(s.ents))
		s.ents = append(s.ents, entry{key: key, tat: tat})
		return
	}
	victim, oldest := -1, int64(math.MaxInt64)
	for range min(evictProbes, len(s.ents)) {
		j := s.hand
		s.hand++
		if s.hand == len(s.ents) {
			s.hand = 0
		}
		if t := s.ents[j].tat; t <= now {
			victim = j // a full bucket: forgetting it loses nothing
			break
		} else if t < oldest {
			victim, oldest = j, t
		}
	}
	delete(s.idx, s.ents[victim].key)
	s.ents[victim] = entry{key: key, tat: tat}
	s.idx[key] = int32(victim)
}

// CarryOver gives l, a limiter not in use yet, the buckets of prev, the limiter of the same
// keys under other limits that l replaces: each key keeps the tokens it has spent, as many
// of l's as it spent of prev's, at most l's burst (a key that spent more than l's burst finds
// its bucket empty), and regains them at l's rate from now on. A key whose bucket is full
// holds no state and is not carried. l takes prev's clock and hash seeds, so that a long key
// (tracked by its hash) keeps its bucket. prev may serve requests meanwhile: the tokens they
// take after their shard is copied stay with prev.
func (l *Limiter) CarryOver(prev *Limiter) {
	l.now, l.seed, l.seed2 = prev.now, prev.seed, prev.seed2
	// A bucket's state moves from prev's clock to l's (the same clock, read twice).
	pnow := prev.now()
	now := l.now()
	ratio := float64(l.interval) / float64(prev.interval)
	var ents []entry
	for i := range prev.shards {
		ps := &prev.shards[i]
		ps.mu.Lock()
		ents = append(ents[:0], ps.ents...)
		ps.mu.Unlock()
		for _, e := range ents {
			if e.tat <= pnow {
				continue // a full bucket
			}
			// The time the key's spent tokens take to come back, at l's rate, and at most a
			// whole bucket of l's: float64, since the product may not fit in an int64.
			credit := min(float64(e.tat-pnow)*ratio, float64(l.depth))
			s := &l.shards[maphash.String(l.seed, e.key)&l.mask]
			s.mu.Lock()
			if _, ok := s.idx[e.key]; !ok {
				s.insert(e.key, now+int64(credit), now, l.perShard)
			}
			s.mu.Unlock()
		}
	}
}

func appendUint64(b []byte, v uint64) []byte {
	for i := range 8 {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}
