package pd

import (
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/core/openai"
)

// prefixIndex is prompt_cache_affinity's memory of which prefill worker computed which
// prompt prefixes (affinity.Index, keyed by the worker_id's hash so that every replica
// names a worker alike), and the epoch of each worker of the target's group its hints were
// learned in: a worker that restarted has its hints dropped (affinity.Epochs).
type prefixIndex struct {
	idx    *affinity.Index
	epochs *affinity.Epochs
}

// newPrefixIndex returns the prefix index of a target whose workers are at urls (by member
// index): idx's hints when idx is not nil (a reload keeps them), with the epochs they were
// learned in, else an empty index.
func newPrefixIndex(idx *affinity.Index, urls []string) *prefixIndex {
	if idx == nil {
		idx = affinity.NewIndex(affinity.Config{})
	}
	keys := make([]uint64, len(urls))
	for i, u := range urls {
		keys[i] = xxhash.Sum64String(u)
	}
	return &prefixIndex{idx: idx, epochs: idx.Epochs(keys)}
}

// affinityReq is one request's fingerprint and scope for prefill choice.
type affinityReq struct {
	scope  affinity.Scope
	print  affinity.Print
	cands  [maxCandidates]affinity.Candidate
	chosen affinity.Target
	member int   // the chosen worker's member index
	epoch  int64 // its epoch when chosen
	hinted bool  // the prefill worker was chosen for its hint
}

var affinityReqs = sync.Pool{New: func() any { return new(affinityReq) }}

// workerTarget names worker id in the index.
func workerTarget(id string) affinity.Target { return affinity.Target(xxhash.Sum64String(id)) }

// fingerprint returns the affinity state of a request, or nil when its body cannot be
// fingerprinted (then the prefill worker is chosen by load alone). Release it with
// releaseAffinity.
func fingerprint(d affinity.Domain, body []byte, peek *openai.Request) *affinityReq {
	a := affinityReqs.Get().(*affinityReq)
	if affinity.Fingerprint(openai.ChatCompletions, body, peek.Prompt, peek.System, &a.print) != nil || len(a.print.Checkpoints) == 0 {
		affinityReqs.Put(a)
		return nil
	}
	a.scope, a.hinted = d.Scope(), false
	return a
}

func releaseAffinity(a *affinityReq) {
	if a != nil {
		affinityReqs.Put(a)
	}
}

// choose returns the index in cs (not empty) of the prefill candidate prefix affinity picks
// (affinity.Index.Choose, the choice of the model router's prefix_affinity): within
// affinity.LoadBand of the least load, the longest hint covering at least half the request,
// the first user message and the previous turn; else the highest rendezvous weight for the
// conversation.
func (x *prefixIndex) choose(cs []candidate, a *affinityReq) int {
	cands := a.cands[:len(cs)]
	for i, c := range cs {
		cands[i] = affinity.Candidate{Target: workerTarget(c.id), Load: int(c.load)}
		x.epochs.See(x.idx, c.i, cands[i].Target, c.epoch)
	}
	ch := x.idx.Choose(a.scope, &a.print, cands)
	c := &cs[ch.Index]
	a.chosen, a.hinted = cands[ch.Index].Target, ch.Outcome == affinity.OutcomeHit
	a.member, a.epoch = c.i, c.epoch
	return ch.Index
}

// learned records that the prefill worker chosen for a computed the request's prompt;
// cached is the prompt tokens it found cached. A worker chosen for its hint that found
// nothing cached had lost the prefix (evicted, restarted): the stale hint goes first. Nothing
// is learned when the worker's epoch changed since it was chosen: its hints were dropped for
// a restart, and whether the prefill ran before it is not known.
func (x *prefixIndex) learned(a *affinityReq, cached int64) {
	if a.hinted && cached == 0 {
		x.idx.Forget(a.scope, &a.print, a.chosen)
	}
	if !x.epochs.Current(a.member, a.epoch) {
		return
	}
	x.idx.Learn(a.scope, &a.print, a.chosen)
}
