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
	i     int
	load  int64
	id    string
	epoch int64 // a prefill worker's restarts, with prompt_cache_affinity (its hints go when this changes)
	down  bool  // passive health keeps it out after a failed connect
}

// pair is a chosen prefill worker and decode worker (member indices of the target's group).
type pair struct{ p, d int }

// pickPair chooses the prefill and decode workers of a request with key key among the
// target's workers not in ex, and counts the request in flight on both (their balancer
// entries: release each when its leg ends). It reports ok false, having counted nothing,
// when no pair can be made (a role has no eligible worker, or none left once those filled
// by other requests meanwhile are dropped), and then full when a worker not in ex was left
// out for being at capacity (max_active sequences running). With aff
// (prompt_cache_affinity), the prefill worker is chosen by cached prefix within the load
// band (affinity.Index.Choose).
//
// A worker is counted in the same step as it is judged (workers.Group.Take): were the count
// taken after the choice, requests choosing at once would all find a worker's last free
// sequence free, and every one but the first would be sent to a worker that must refuse it
// (a decode worker, after a prefill computed for it in vain). A chosen worker that another
// request filled since the candidates were judged is left out, and the choice made again
// among the rest.
func (t *Target) pickPair(key uint64, ex *excluded, aff *affinityReq) (pr pair, ok, full bool) {
	g := t.workers
	var ps, ds [maxCandidates]candidate
	np, nd := 0, 0
	for i := 0; i < g.Len(); i++ {
		if ex.has(i) {
			continue
		}
		m := g.Member(i)
		down := m.LB.Down()
		r, load := g.Judge(i, &t.prefillNeeds)
		if r == workers.Eligible && np < len(ps) {
			ps[np] = candidate{i: i, load: load, id: m.Worker.ID(), down: down}
			if t.affinity != nil {
				ps[np].epoch = m.Worker.Epoch()
			}
			np++
			continue
		}
		full = full || r == workers.AtCapacity
		if r, load = g.Judge(i, &t.decodeNeeds); r == workers.Eligible && nd < len(ds) {
			ds[nd] = candidate{i: i, load: load, id: m.Worker.ID(), down: down}
			nd++
		}
		full = full || r == workers.AtCapacity
	}
	if np == 0 || nd == 0 {
		return pair{}, false, full
	}
	pr, ok, lost, same := t.takePair(ps[:np], ds[:nd], key, aff)
	return pr, ok, !ok && !same && (full || lost)
}

// takePair chooses a pair among the eligible prefill candidates ps and decode candidates ds
// (both not empty; reordered) and counts the request on both, as pickPair says. It reports
// ok false, having counted nothing, when no candidate of a role could be taken, then lost
// when one was dropped for being at capacity, and same when a prefill candidate was dropped
// for having the decode worker's worker_id.
func (t *Target) takePair(ps, ds []candidate, key uint64, aff *affinityReq) (pr pair, ok, lost, same bool) {
	// The decode worker first: the prefill choice leaves out its worker_id.
	d, taken, lost, _ := t.take(ds, &t.decodeNeeds, key, nil, "")
	if !taken {
		return pair{}, false, lost, false
	}
	p, taken, lostP, same := t.take(ps, &t.prefillNeeds, key, aff, d.id)
	if !taken {
		// The decode worker's count is given back: this request will not use it.
		t.workers.Member(d.i).LB.Release()
		return pair{}, false, lost || lostP, same
	}
	return pair{p.i, d.i}, true, false, false
}

// take chooses among cs, the eligible candidates of one role (n), the one a pair choice
// prefers (up before down, then least loaded, ties by rendezvous rank of key; with aff, by
// cached prefix within the load band) and counts the request in flight on it, judging it
// again on the count it joins (workers.Group.Take). A candidate found ineligible then (most
// often another request took its last free sequence) is dropped and the choice made again
// among the rest, as is one whose worker_id is not ("" leaves none out): one process
// reporting both roles cannot be both halves of a pair. cs is reordered. It reports taken
// false when none is left; lost when a candidate was dropped for being at capacity, and same
// when one was dropped for its worker_id.
func (t *Target) take(cs []candidate, n *workers.Needs, key uint64, aff *affinityReq, not string) (c candidate, taken, lost, same bool) {
	for len(cs) > 0 {
		up := cs[:preferUp(cs)]
		var k int
		if aff != nil {
			k = t.affinity.choose(up, aff)
		} else {
			k = byLoadThenRank(up, key)
		}
		c = cs[k]
		if not != "" && c.id == not {
			same = true
		} else {
			r, _ := t.workers.Take(c.i, n)
			if r == workers.Eligible {
				return c, true, lost, same
			}
			lost = lost || r == workers.AtCapacity
		}
		cs[k] = cs[len(cs)-1]
		cs = cs[:len(cs)-1]
	}
	return candidate{}, false, lost, same
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

// byLoadThenRank returns the index in cs (not empty) of the least loaded candidate, ties
// broken by the highest Rank (then by the lower worker_id, for equal scores).
func byLoadThenRank(cs []candidate, key uint64) int {
	best := 0
	bestRank := Rank(key, cs[0].id)
	for i := 1; i < len(cs); i++ {
		c := &cs[i]
		switch b := &cs[best]; {
		case c.load < b.load:
		case c.load > b.load:
			continue
		default:
			r := Rank(key, c.id)
			if r < bestRank || r == bestRank && c.id > b.id {
				continue
			}
		}
		best, bestRank = i, Rank(key, c.id)
	}
	return best
}
