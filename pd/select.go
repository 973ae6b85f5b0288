package pd

import (
	"github.com/sluice-gw/sluice/core/workers"
)

// Worker roles of disaggregated serving, as workers report them in their observation.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// RequestKey returns the key a request is ranked by: the FNV-1a hash of its body as it goes
// to the workers. Two gateway processes that get the same request compute the same key.
func RequestKey(body []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range body {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// Rank returns the rendezvous (highest random weight) score of worker workerID for a
// request of key key: among equally loaded workers the highest score is chosen. It depends on
// nothing but its arguments, so every gateway replica ranks alike, and removing a worker
// moves only the requests that ranked it first.
func Rank(key uint64, workerID string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(workerID); i++ {
		h ^= uint64(workerID[i])
		h *= fnvPrime
	}
	return mix(h ^ mix(key))
}

// mix is splitmix64's finaliser: every input bit moves every output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// excluded is the set of a target's workers (by index) a request no longer tries.
type excluded struct{ bits [4]uint64 }

func (e *excluded) add(i int) {
	if i < len(e.bits)*64 {
		e.bits[i/64] |= 1 << uint(i%64)
	}
}

func (e *excluded) has(i int) bool { return i < len(e.bits)*64 && e.bits[i/64]&(1<<uint(i%64)) != 0 }

// candidate is one eligible worker of a pair choice.
type candidate struct {
	i    int
	load int64
	id   string
	down bool // passive health keeps it out after a failed connect
}

// pair is a chosen prefill worker and decode worker (member indices of the target's group).
type pair struct{ p, d int }

// pickPair chooses the prefill and decode workers of a request with key key among the
// target's workers not in ex. It reports ok false when either role has no eligible worker,
// and then full when a worker not in ex was left out for being at capacity (max_active
// sequences running). With aff (prompt_cache_affinity), the prefill worker is chosen by
// cached prefix within the load band (affinity.Select).
func (t *Target) pickPair(key uint64, ex *excluded, aff *affinityReq) (pr pair, ok, full bool) {
	g := t.workers
	var ps, ds [maxCandidates]candidate
	np, nd := 0, 0
	for i := 0; i < g.Len(); i++ {
		if ex.has(i) {
			continue
		}
		down := g.Member(i).LB.Down()
		r, load := g.Judge(i, &t.prefillNeeds)
		if r == workers.Eligible && np < len(ps) {
			ps[np] = candidate{i, load, g.Member(i).Worker.ID(), down}
			np++
			continue
		}
		full = full || r == workers.AtCapacity
		if r, load = g.Judge(i, &t.decodeNeeds); r == workers.Eligible && nd < len(ds) {
			ds[nd] = candidate{i, load, g.Member(i).Worker.ID(), down}
			nd++
		}
		full = full || r == workers.AtCapacity
	}
	np, nd = preferUp(ps[:np]), preferUp(ds[:nd])
	if np == 0 || nd == 0 {
		return pair{}, false, full
	}
	d := byLoadThenRank(ds[:nd], key)
	var p candidate
	if aff != nil {
		p = t.affinity.choose(ps[:np], aff)
	} else {
		p = byLoadThenRank(ps[:np], key)
	}
	if p.id == d.id { // one process reporting both roles cannot be both halves of a pair
		return pair{}, false, false
	}
	return pair{p.i, d.i}, true, false
}

// preferUp moves the candidates passive health does not keep out to the front and returns
// their number; when every one is out, it keeps them all (a worker that failed a connect is
// tried again rather than refusing every request).
func preferUp(cs []candidate) int {
	n := 0
	for i := range cs {
		if !cs[i].down {
			cs[n], cs[i] = cs[i], cs[n]
			n++
		}
	}
	if n == 0 {
		return len(cs)
	}
	return n
}

// maxCandidates bounds the workers of one role a choice considers (on the stack).
const maxCandidates = 64

// byLoadThenRank returns the least loaded candidate, ties broken by the highest Rank (then
// by the lower worker_id, for equal scores).
func byLoadThenRank(cs []candidate, key uint64) candidate {
	best := cs[0]
	bestRank := Rank(key, best.id)
	for _, c := range cs[1:] {
		switch {
		case c.load < best.load:
		case c.load > best.load:
			continue
		default:
			r := Rank(key, c.id)
			if r < bestRank || r == bestRank && c.id > best.id {
				continue
			}
		}
		best, bestRank = c, Rank(key, c.id)
	}
	return best
}
