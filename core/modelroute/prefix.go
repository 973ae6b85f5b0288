package modelroute

import (
	"strconv"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/workers"
)

// Prefix affinity (scheduling.prefix_affinity) chooses, among the servers of the target the
// request goes to, the one most likely to hold the request's prompt prefix in its KV cache
// (package affinity): the request is fingerprinted in OnRequest (on the request's worker
// goroutine, never on an event loop), the server is chosen in OnPick among the target's
// eligible servers within the load band, and the index learns the server in OnComplete after
// a successful answer; when the server a hint chose reports a full cache miss, the hint is
// dropped first, and the answer learned as any other.

// CacheStateHeaders are the response fields that report an upstream's prefix-cache state
// for the request, with the value that means a full miss: llmsim's X-Llmsim-Cache. vLLM and
// SGLang send no such field; they report cached prompt tokens in the usage
// (usage.prompt_tokens_details.cached_tokens, when asked to: vLLM's
// --enable-prompt-tokens-details, SGLang's --enable-cache-report), and a usage that counts
// them as 0 for a non-empty prompt is the other full-miss signal (fullMissInUsage).
var CacheStateHeaders = []struct{ Name, FullMiss string }{
	{"X-Llmsim-Cache", "miss"},
}

// Response fields of routed requests when scheduling.prefix_affinity_headers is set.
const (
	headerMatchedBytes = "X-Sluice-Prefix-Matched-Bytes"
	headerEstimatedMs  = "X-Sluice-Prefix-Estimated-Ms"
)

// prefixBytesPerToken converts matched canonical bytes to tokens for the estimate: about four
// bytes of English text make a token.
const prefixBytesPerToken = 4

// prefixConf is an alias's prefix affinity (nil when off).
type prefixConf struct {
	headers    bool
	usPerToken int
	m          *metrics.Prefix
}

var (
	prefixOnce sync.Once
	prefixIdx  *affinity.Index
)

// prefixIndex returns the process's prefix index, made on first use: one for every
// configuration and alias (hints are scoped by route, environment, credential generation,
// alias and endpoint), so that a reload keeps what it learned and the 4,096-entry bound holds
// for the process.
func prefixIndex() *affinity.Index {
	prefixOnce.Do(func() {
		prefixIdx = affinity.NewIndex(affinity.Config{OnEvict: metrics.PrefixEvicted})
		metrics.PrefixIndex(prefixIdx.Len)
	})
	return prefixIdx
}

func newPrefixConf(alias string, s config.Scheduling) *prefixConf {
	if !s.PrefixAffinity {
		return nil
	}
	prefixIndex()
	return &prefixConf{headers: s.PrefixAffinityHeaders, usPerToken: s.PrefixPrefillUsPerToken, m: metrics.ForPrefix(alias)}
}

// prefixEpochs returns the restart epochs of svc's servers for the process's prefix index,
// which every configuration shares, named as the index names them (targetOf): a reload goes
// on from the epochs its hints were learned in.
func prefixEpochs(svc *pipeline.Service) *affinity.Epochs {
	keys := make([]uint64, len(svc.Backends))
	for i, b := range svc.Backends {
		keys[i] = uint64(targetOf(b))
	}
	return prefixIndex().Epochs(keys)
}

// prefixState is one request's prefix affinity, part of its state.
type prefixState struct {
	on     bool // the alias has prefix affinity and the request was fingerprinted
	picked bool // a pick chose by affinity
	print  affinity.Print
	scope  affinity.Scope
	cands  []affinity.Candidate
	ids    []int // balancer IDs of cands
	choice affinity.Choice
	chosen int             // the chosen server's index in the service
	epoch  int64           // its epoch when chosen (observed servers)
	hinted affinity.Target // the server a hint chose (choice.Outcome hit)
	miss   bool            // that server reported a full cache miss
	hdr    []byte
}

func (p *prefixState) reset() { p.on, p.picked, p.miss = false, false, false }

// targetOf identifies a server to the index and to rendezvous hashing: the hash of its URL as
// configured, the same in every gateway replica that shares the configuration.
func targetOf(b *pipeline.Backend) affinity.Target { return affinity.Target(xxhash.Sum64String(b.URL)) }

// fingerprint prepares prefix affinity for the request: its fingerprint (before the model is
// rewritten, over the body as the client sent it) and its domain. A body the fingerprint
// cannot walk goes without affinity.
func (st *state) fingerprint(rc *pipeline.RequestCtx, caller *consumer.Consumer) {
	p := &st.pfx
	switch st.ep {
	case openai.ChatCompletions, openai.Responses, openai.Messages:
	default:
		return
	}
	if affinity.Fingerprint(st.ep, rc.Req.Body, st.peek.Prompt, st.peek.System, &p.print) != nil {
		return
	}
	d := affinity.Domain{Model: st.alias.Name, Endpoint: st.ep}
	if rt := rc.Route(); rt != nil {
		d.Route = rt.Name
	}
	if caller != nil {
		d.Environment, d.Generation = caller.Environment, uint64(caller.Generation)
	}
	p.scope, p.on = d.Scope(), true
}

// pickPrefix leaves out of c every server of the current target but the one prefix affinity
// chooses: among the servers the target may use (workers.Group.Judge when observed; up ones
// before ones passive health ejected), the one affinity.Index.Choose picks by hint (hints of
// the conversation, not of a prefix conversations share), load band and rendezvous hashing
// of the conversation key. Loads are the workers' (active plus waiting
// sequences) when observed, else the gateway's requests in flight.
func (st *state) pickPrefix(rc *pipeline.RequestCtx, c *balancer.Choice) {
	p, t := &st.pfx, st.target
	svc := t.Service
	p.cands, p.ids = p.cands[:0], p.ids[:0]
	up, full, short := false, false, false
	for i, b := range svc.Backends {
		if c.Exclude.Has(i) {
			continue
		}
		ejected := b.LB.Ejected()
		if b.LB.Down() && !ejected {
			continue // marked down: the balancer skips it anyway
		}
		var load int64
		tg := targetOf(b)
		if t.Workers != nil {
			r, l := t.Workers.Judge(i, &t.Needs)
			if r != workers.Eligible {
				c.Exclude.Add(i)
				full = full || r == workers.AtCapacity
				short = t.Workers.LeftOut(i, r) || short
				continue
			}
			load = l
			// A server that restarted since its hints were learned lost its cache.
			t.epochs.See(prefixIdx, i, tg, t.Workers.Member(i).Worker.Epoch())
		} else {
			load = max(b.LB.Active(), 0)
		}
		if !ejected && !up {
			// The first up server: the ejected ones seen before are left out.
			for _, id := range p.ids {
				c.Exclude.Add(id)
			}
			p.cands, p.ids, up = p.cands[:0], p.ids[:0], true
		} else if ejected && up {
			c.Exclude.Add(i)
			continue
		}
		p.cands = append(p.cands, affinity.Candidate{Target: tg, Load: int(load)})
		p.ids = append(p.ids, i)
	}
	if len(p.cands) == 0 {
		switch {
		case full:
			rc.RefusePick(pipeline.ErrAtCapacity)
		case short:
			rc.RefusePick(pipeline.ErrGatewayResources)
		}
		return
	}
	p.choice = prefixIdx.Choose(p.scope, &p.print, p.cands)
	for k, id := range p.ids {
		if k != p.choice.Index {
			c.Exclude.Add(id)
		}
	}
	p.picked = true
	p.chosen = p.ids[p.choice.Index]
	if t.Workers != nil {
		p.epoch = t.Workers.Member(p.chosen).Worker.Epoch()
	}
	p.hinted = 0
	if p.choice.Outcome == affinity.OutcomeHit {
		p.hinted = p.cands[p.choice.Index].Target
	}
	o := &rc.Outcome().Prefix
	o.Routed, o.Outcome, o.MatchedBytes = true, p.choice.Outcome.String(), p.choice.Prefix
	o.EstimatedMs = float64(p.choice.Prefix/prefixBytesPerToken*st.alias.prefix.usPerToken) / 1000
}

// prefixResponse notes a full cache miss of the server a hint chose and adds the response
// fields of prefix_affinity_headers.
func (st *state) prefixResponse(rc *pipeline.RequestCtx) {
	p := &st.pfx
	if !p.on || !p.picked {
		return
	}
	if p.choice.Outcome == affinity.OutcomeHit {
		for _, h := range CacheStateHeaders {
			if v, ok := rc.UpstreamHeader(h.Name); ok && string(v) == h.FullMiss {
				p.miss = true
			}
		}
	}
	if st.alias.prefix.headers {
		o := &rc.Outcome().Prefix
		p.hdr = strconv.AppendInt(p.hdr[:0], int64(o.MatchedBytes), 10)
		rc.AddResponseHeader([]byte(headerMatchedBytes), p.hdr)
		p.hdr = strconv.AppendFloat(p.hdr[:0], o.EstimatedMs, 'f', -1, 64)
		rc.AddResponseHeader([]byte(headerEstimatedMs), p.hdr)
	}
}

// fullMissInUsage reports that the response's usage counted its cached prompt tokens and
// found none (OpenAI's usage.prompt_tokens_details.cached_tokens, or input_tokens_details on
// the Responses API, equal to 0 with prompt tokens). A server that does not report cached
// tokens leaves the member out and says nothing.
func (st *state) fullMissInUsage() bool {
	u := &st.use
	return u.gotUse && u.cachedKnown && u.usage.Cached == 0 && u.usage.Prompt > 0
}

// prefixComplete counts the request's selection, drops the hints that chose a server which
// reported a full cache miss, then learns the server for the request's checkpoints after a
// successful answer (not after a shed, failed, cancelled or gateway-answered request).
func (st *state) prefixComplete(rc *pipeline.RequestCtx) {
	p := &st.pfx
	if !p.on || !p.picked {
		return
	}
	st.alias.prefix.m.Selected(uint8(p.choice.Outcome), p.choice.Prefix, p.print.Scanned)
	b := rc.Backend()
	if b == nil {
		return
	}
	o := rc.Outcome()
	t := targetOf(b)
	if (p.miss || st.fullMissInUsage()) && p.choice.Outcome == affinity.OutcomeHit && t == p.hinted {
		// The hint outlived the server's cache entry (evicted, or the server restarted): it
		// goes. A successful answer is learned below all the same, as after any miss: the
		// server has just computed the prompt and holds it now, so the next turn goes back
		// to it, where rendezvous hashing could send it to a server that holds none of it.
		prefixIdx.Forget(p.scope, &p.print, t)
		st.alias.prefix.m.Invalidated()
		o.Prefix.Invalidated = true
	}
	switch {
	case st.target != nil && !st.target.epochs.Current(p.chosen, p.epoch):
		// The server restarted since it was chosen: its hints were dropped, and whether it
		// answered before the restart is not known.
	case !rc.Replied() && !o.GatewayReply && !o.Canceled && o.UpstreamError == "" && o.Status >= 200 && o.Status < 300:
		prefixIdx.Learn(p.scope, &p.print, t)
	}
}
