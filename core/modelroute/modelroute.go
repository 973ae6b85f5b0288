// Package modelroute is the model router: the stage of a router with models = true that turns
// an OpenAI-compatible request into a request for one model target. In the order the model
// gateway applies them: the endpoint and the caller's grant for it (403), the body's
// validation (400, naming the parameter), the model alias and the caller's grant for it (404
// for both, so an alias a caller may not use is not disclosed), on a phase "decode" alias an
// endpoint other than chat completions (400 unsupported_endpoint), fair admission of the alias's
// pool (429 when its queue is full, 503 after the queue timeout), then the target by priority
// and weight, with the request's "model" rewritten to the target's upstream model. A target
// whose servers all fail before answering gives way to the next target of its priority, then
// to the next priority. When the target's service is observed (core/workers), each choice of
// a server first leaves out the workers the target must not use and those more loaded than
// the least loaded one; a target left with none gives way in the same manner. With
// scheduling.prefix_affinity, the server is chosen by prefix-cache affinity instead
// (prefix.go). An alias with scheduling phase "decode" runs each request on a prefill and a
// decode worker of its target instead (package pd), giving way to the next target when no
// pair of one could serve it. GET /v1/models lists the aliases the caller may use.
package modelroute

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/core/admission"
	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/workers"
	"github.com/sluice-gw/sluice/pd"
)

// Table holds the model aliases of one configuration. It is immutable once built.
type Table struct {
	aliases map[string]*Alias
	names   []string // sorted, for /v1/models
}

// Alias is one compiled [models.<alias>].
type Alias struct {
	Name    string
	ModelID string
	// tiers are the targets by priority, lowest first.
	tiers [][]*Target
	// pool admits the alias's requests; nil when unbounded.
	pool *admission.Pool
	// resize holds the limits a reload gives the pool it took over, applied when its table
	// goes into force (Table.Commit); nil when they did not change.
	resize *admission.Config
	// Limits are the alias's admission keys as configured.
	Limits config.Scheduling
	m      *metrics.Model
	prefix *prefixConf // nil without scheduling.prefix_affinity
}

// Tiers returns the alias's targets by priority, lowest first (shared: do not modify).
func (a *Alias) Tiers() [][]*Target { return a.tiers }

// Pool returns the alias's admission pool (nil when max_concurrent_requests is 0).
func (a *Alias) Pool() *admission.Pool { return a.pool }

// Target is one compiled target of an alias.
type Target struct {
	Name          string
	Service       *pipeline.Service
	UpstreamModel string
	Priority      int
	Weight        int
	// Workers observes the servers of Service (nil when they are not observed); Needs is
	// what the target asks of them.
	Workers *workers.Group
	Needs   workers.Needs
	// PD serves the target's requests on prefill/decode worker pairs (phase "decode");
	// nil for a target whose servers serve whole requests.
	PD *pd.Target
	// epochs is the epoch of each observed server its prefix hints were learned in (nil
	// without prefix affinity or observation): a server that restarted has its hints dropped.
	// It is the process's prefix index's (prefixEpochs), which a reload keeps.
	epochs     *affinity.Epochs
	next       atomic.Uint64  // smooth share within the tier, by weight
	m          *metrics.Model // the alias's
	byConsumer sync.Map       // consumer name -> *metrics.Tokens
}

// Judge says whether server i of the target's service may take the target's requests now
// (for a P/D target, the half of a pair its role makes it), and why not. Workers must not be
// nil.
func (t *Target) Judge(i int) workers.Reason {
	if t.PD != nil {
		return t.PD.Judge(i)
	}
	r, _ := t.Workers.Judge(i, &t.Needs)
	return r
}

// tokens returns the token counters of the target for consumer.
func (t *Target) tokens(consumer string) *metrics.Tokens {
	if m, ok := t.byConsumer.Load(consumer); ok {
		return m.(*metrics.Tokens)
	}
	m, _ := t.byConsumer.LoadOrStore(consumer, t.m.Tokens(t.Name, consumer))
	return m.(*metrics.Tokens)
}

// consumerLabel names the caller in metrics: anonymous on a router without an api-key
// middleware.
func consumerLabel(c *consumer.Consumer) string {
	if c == nil {
		return "anonymous"
	}
	return c.Name
}

// NewTable compiles the models of cfg over the compiled services and the groups observing
// their servers (both by service name; a service without a group is not observed). A bounded
// alias of the same name as one of prev (the running table, nil for the first) takes over its
// pool, so that a reload neither frees the slots of the requests in flight nor sends
// newcomers past the callers waiting in its queue; changed limits are applied to that pool by
// Commit, once the table goes into force, so that a reload refused later changes nothing.
func NewTable(models map[string]*config.Model, services map[string]*pipeline.Service, groups map[string]*workers.Group, prev *Table) (*Table, error) {
	t := &Table{aliases: map[string]*Alias{}}
	for name, m := range models {
		a := &Alias{Name: name, ModelID: m.ModelID, Limits: m.Scheduling,
			m: metrics.ForModel(name, admission.ReasonQueueFull, admission.ReasonQueueTimeout), prefix: newPrefixConf(name, m.Scheduling)}
		byPrio := map[int][]*Target{}
		for id, ct := range m.Targets {
			svc := services[ct.Service]
			if svc == nil {
				continue // reported by the service's own compile errors
			}
			t := &Target{
				Name: id, Service: svc, UpstreamModel: ct.UpstreamModel, Priority: ct.Priority, Weight: ct.Weight,
				Workers: groups[ct.Service], m: a.m,
				Needs: workers.Needs{Role: workers.RoleAggregated, Generation: int64(ct.DeploymentGeneration), Digest: ct.ExecutionConfigDigest},
			}
			if a.prefix != nil && t.Workers != nil {
				t.epochs = prefixEpochs(svc)
			}
			if ds := m.Scheduling.DistributedServing; m.Scheduling.Phase == config.PhaseDecode && ds != nil && t.Workers != nil {
				t.PD = pd.NewTarget(pd.Options{
					Alias: name, APIKey: ds.APIKey, ExecutionTimeout: time.Duration(ds.ExecutionTimeoutMs) * time.Millisecond,
					PrepareBatchSize: ds.PrepareBatchSize, PromptCacheAffinity: m.Scheduling.PromptCacheAffinity,
				}, id, svc, t.Workers, t.Needs.Generation, t.Needs.Digest)
				if old := prev.Alias(name).target(id); old != nil {
					t.PD.KeepHints(old.PD)
				}
			}
			byPrio[ct.Priority] = append(byPrio[ct.Priority], t)
		}
		prios := make([]int, 0, len(byPrio))
		for p := range byPrio {
			prios = append(prios, p)
		}
		sort.Ints(prios)
		for _, p := range prios {
			tier := byPrio[p]
			sort.Slice(tier, func(i, j int) bool { return tier[i].Name < tier[j].Name })
			a.tiers = append(a.tiers, tier)
		}
		pool, err := a.admissionPool(prev.Alias(name))
		if err != nil {
			return nil, err
		}
		a.pool = pool
		t.aliases[name] = a
		t.names = append(t.names, name)
	}
	sort.Strings(t.names)
	return t, nil
}

// Alias returns the alias named name, or nil (also on a nil table).
func (t *Table) Alias(name string) *Alias {
	if t == nil {
		return nil
	}
	return t.aliases[name]
}

// target returns the alias's target named id, or nil (also on a nil alias).
func (a *Alias) target(id string) *Target {
	if a == nil {
		return nil
	}
	for _, tier := range a.tiers {
		for _, t := range tier {
			if t.Name == id {
				return t
			}
		}
	}
	return nil
}

// admissionPool returns the pool that admits a's requests: old's when old was bounded too
// (with a.resize set when the limits changed), a new one when old is nil or was unbounded,
// nil when a is unbounded.
func (a *Alias) admissionPool(old *Alias) (*admission.Pool, error) {
	s := a.Limits
	if s.MaxConcurrentRequests <= 0 {
		return nil, nil
	}
	c := admission.Config{
		MaxConcurrent: s.MaxConcurrentRequests,
		MaxQueued:     s.MaxQueuedRequests,
		QueueTimeout:  time.Duration(s.QueueTimeoutMs) * time.Millisecond,
		OnWait:        a.m.Waited,
	}
	if old == nil || old.pool == nil {
		return admission.New(c)
	}
	if !sameAdmission(old.Limits, s) {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		a.resize = &c
	}
	return old.pool, nil
}

// Commit applies to the pools the table took over the limits its configuration changed. The
// gateway calls it once, as the table goes into force.
func (t *Table) Commit() {
	if t == nil {
		return
	}
	for _, a := range t.aliases {
		if a.resize != nil {
			_ = a.pool.SetLimits(*a.resize) // validated by NewTable
			a.resize = nil
		}
	}
}

// sameAdmission says whether two aliases' scheduling gives the same admission limits.
func sameAdmission(a, b config.Scheduling) bool {
	return a.MaxConcurrentRequests == b.MaxConcurrentRequests && a.MaxQueuedRequests == b.MaxQueuedRequests &&
		a.QueueTimeoutMs == b.QueueTimeoutMs
}

// Close releases what the table's prefill/decode targets hold for calls to their workers
// (idle connections), once its configuration is retired.
func (t *Table) Close() {
	for _, a := range t.aliases {
		for _, tier := range a.tiers {
			for _, tg := range tier {
				if tg.PD != nil {
					tg.PD.Close()
				}
			}
		}
	}
}

// Metrics returns the metrics the table's aliases name, for metrics.InForce.
func (t *Table) Metrics() []metrics.Named {
	var out []metrics.Named
	for _, a := range t.aliases {
		out = append(out, a.m)
		if a.prefix != nil {
			out = append(out, a.prefix.m)
		}
		for _, tier := range a.tiers {
			for _, tg := range tier {
				if tg.PD != nil {
					out = append(out, tg.PD.Metrics())
				}
			}
		}
	}
	return out
}

// Aliases returns every alias sorted by name.
func (t *Table) Aliases() []*Alias {
	out := make([]*Alias, 0, len(t.names))
	for _, n := range t.names {
		out = append(out, t.aliases[n])
	}
	return out
}

// Stage is the model router's stage: a pipeline.RequestStage, PickStage, FallbackStage and
// CompletionStage.
type Stage struct {
	table *Table
}

// NewStage returns the stage of a model router over t.
func NewStage(t *Table) *Stage { return &Stage{table: t} }

// state is one request's model routing, kept in a request slot from OnRequest to OnComplete.
type state struct {
	ep     openai.Endpoint
	peek   openai.Request
	alias  *Alias
	target *Target // the target the request is sent to now
	tier   int
	tried  []*Target // targets of the current tier already used
	ticket admission.Ticket
	orig   []byte // the body as the client sent it (when a target rewrote it)
	buf    []byte
	use    usageState
	pfx    prefixState
}

var states = sync.Pool{New: func() any { return new(state) }}

var stateSlot pipeline.Slot

// OnRequest implements pipeline.RequestStage.
func (s *Stage) OnRequest(rc *pipeline.RequestCtx) error {
	path := rc.Req.Path
	id, one := strings.CutPrefix(string(path), config.EndpointModels+"/")
	if one || string(path) == config.EndpointModels {
		if m := string(rc.Req.Method); m != "GET" && m != "HEAD" {
			rc.AddResponseHeader([]byte("Allow"), []byte("GET, HEAD"))
			return errModelsMethod
		}
		if one {
			return s.retrieveModel(rc, id)
		}
		return s.listModels(rc)
	}
	ep, ok := openai.EndpointForPath(path)
	if !ok {
		if openai.AnthropicPath(path) {
			rc.SetErrorShape(pipeline.AnthropicErrors)
		}
		return errUnknownEndpoint
	}
	if ep.AnthropicErrors() {
		rc.SetErrorShape(pipeline.AnthropicErrors)
	}
	if string(rc.Req.Method) != "POST" {
		rc.AddResponseHeader([]byte("Allow"), []byte("POST"))
		return replyError(rc, ep, errMethod)
	}
	caller := consumer.From(rc)
	if caller != nil && !caller.MayCall(ep.Path()) {
		return consumer.EndpointForbidden(rc)
	}
	if err := checkBodyType(&rc.Req); err != nil {
		return replyError(rc, ep, err)
	}
	st := states.Get().(*state)
	st.ep, st.alias, st.target, st.tier, st.tried, st.orig = ep, nil, nil, 0, st.tried[:0], st.orig[:0]
	st.use.reset()
	st.pfx.reset()
	rc.Set(&stateSlot, st)
	if err := openai.Peek(ep, rc.Req.Body, &st.peek); err != nil {
		return st.invalid(rc, err)
	}
	a := s.table.aliases[string(st.peek.Model)]
	if a == nil || caller != nil && !caller.MayUseModel(a.Name) {
		return st.modelNotFound(rc)
	}
	st.alias = a
	o := rc.Outcome()
	o.Model = a.Name
	if caller != nil {
		o.Consumer = caller.Name
	}
	// A P/D alias serves chat completions only: another endpoint is refused before it takes
	// a slot or a place in the queue, which a request no target can serve must not hold.
	if a.Limits.Phase == config.PhaseDecode && ep != openai.ChatCompletions {
		return replyError(rc, ep, pd.ErrEndpoint)
	}
	if a.prefix != nil {
		st.fingerprint(rc, caller)
	}
	if err := st.admit(rc); err != nil {
		return err
	}
	if !st.nextTarget(rc) {
		return pipeline.ErrNoBackend
	}
	if st.target.PD != nil {
		return st.serveDisaggregated(rc)
	}
	return nil
}

// serveDisaggregated runs a phase "decode" request on the prefill/decode workers of its
// target (package pd), falling back to the next target while a target's worker pairs fail
// before any response byte. The request is a chat completion (OnRequest refused the others).
func (st *state) serveDisaggregated(rc *pipeline.RequestCtx) error {
	full := false // a target had no pair because its workers were at capacity
	busy := false // a target's workers refused the request for want of room (429)
	for {
		sent := st.orig // the body as sent, which st.peek describes, when it was rewritten
		if len(sent) == 0 {
			sent = rc.Req.Body
		}
		err := st.target.PD.Serve(rc, &st.peek, sent)
		var ex *pd.Exhausted
		if !errors.As(err, &ex) {
			return err
		}
		full = full || ex.Answer == pipeline.ErrAtCapacity
		busy = busy || ex.Answer == pd.ErrWorkersBusy
		if !st.nextTarget(rc) {
			// Busy workers anywhere make the model busy, not broken, whatever the target
			// tried last answered.
			switch {
			case busy:
				return pd.ErrWorkersBusy
			case full && ex.Answer == pipeline.ErrNoBackend:
				return pipeline.ErrAtCapacity
			}
			return ex.Answer
		}
	}
}

// admit takes a slot of the alias's pool: at once when one is free, else in its queue,
// leaving it when the client does.
func (st *state) admit(rc *pipeline.RequestCtx) error {
	p := st.alias.pool
	if p == nil {
		return nil
	}
	if t, ok := p.TryAcquire(); ok {
		st.ticket = t
		return nil
	}
	t, err := p.Acquire(rc.Done())
	if err != nil {
		if r := admission.Reason(err); r != admission.ReasonCanceled {
			st.alias.m.Rejected(r)
		}
		return replyError(rc, st.ep, admission.GatewayError(err))
	}
	st.ticket = t
	return nil
}

// nextTarget sends the request to the next target: another of the current priority not tried
// yet, by weight, else the first of the next priority. It reports false when none is left.
func (st *state) nextTarget(rc *pipeline.RequestCtx) bool {
	for ; st.tier < len(st.alias.tiers); st.tier, st.tried = st.tier+1, st.tried[:0] {
		if t := pickByWeight(st.alias.tiers[st.tier], st.tried); t != nil {
			st.tried = append(st.tried, t)
			st.route(rc, t)
			return true
		}
	}
	return false
}

// pickByWeight picks among the targets of a tier not in tried, each in proportion to its
// weight (a rotating counter per target keeps the share exact over many requests).
func pickByWeight(tier []*Target, tried []*Target) *Target {
	var best *Target
	var bestScore uint64
	for _, t := range tier {
		if contains(tried, t) {
			continue
		}
		// The target with the fewest picks per unit of weight goes next.
		score := t.next.Load() * 1_000_000 / uint64(t.Weight)
		if best == nil || score < bestScore {
			best, bestScore = t, score
		}
	}
	if best != nil {
		best.next.Add(1)
	}
	return best
}

func contains(ts []*Target, t *Target) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// route points the request at target t, rewriting "model" to its upstream model.
func (st *state) route(rc *pipeline.RequestCtx, t *Target) {
	st.target = t
	rc.SetService(t.Service)
	if len(st.orig) == 0 && t.UpstreamModel == string(st.peek.Model) {
		return // the body goes as sent
	}
	if len(st.orig) == 0 {
		st.orig = append(st.orig[:0], rc.Req.Body...)
		// The body is rewritten in place below: what st.peek read from it must stay
		// readable (the prompt_cache_key a P/D target derives its key from).
		st.peek.Rebase(st.orig)
	}
	st.buf = openai.RewriteModel(st.orig, &st.peek, t.UpstreamModel, st.buf[:0])
	rc.Req.Body = append(rc.Req.Body[:0], st.buf...)
}

// OnPick implements pipeline.PickStage: with prefix affinity, every server but the one it
// chooses is left out (pickPrefix); otherwise, when the target's servers are observed, the
// workers it must not use now and those more loaded than the least loaded one are
// (workers.Group.Exclude). When the target's servers are observed, the server chosen is
// judged again as it is counted (pipeline.RequestCtx.TakePick, workers.Group.Take): were it
// counted after this judgement, requests choosing at once would all find a worker's last
// free sequence free and all be sent to it, beyond its max_active.
func (s *Stage) OnPick(rc *pipeline.RequestCtx, c *balancer.Choice) {
	st, _ := rc.Get(&stateSlot).(*state)
	if st == nil || st.target == nil {
		return
	}
	t := st.target
	switch {
	case st.pfx.on:
		st.pickPrefix(rc, c)
	case t.Workers != nil:
		switch full, short := t.Workers.Exclude(c, &t.Needs); {
		case full:
			rc.RefusePick(pipeline.ErrAtCapacity)
		case short:
			rc.RefusePick(pipeline.ErrGatewayResources)
		}
	}
	if t.Workers != nil {
		rc.TakePick((*taker)(t))
	}
	if h := pickHook.Load(); h != nil {
		(*h)()
	}
}

// taker counts a request on a server of its target when the target may still use it on the
// count the request joins (pipeline.Taker).
type taker Target

// Take implements pipeline.Taker: the server is judged as OnPick judged it (workers.Group.Take).
func (t *taker) Take(b *balancer.Backend) bool {
	r, _ := t.Workers.Take(b.ID, &t.Needs)
	return r == workers.Eligible
}

// pickHook, when set (by tests), runs in each request once OnPick has judged the servers of
// its target, before the server is chosen and counted.
var pickHook atomic.Pointer[func()]

// OnExhausted implements pipeline.FallbackStage: the current target's servers all failed
// before answering, so the next target takes the request.
func (s *Stage) OnExhausted(rc *pipeline.RequestCtx) bool {
	st, _ := rc.Get(&stateSlot).(*state)
	if st == nil || st.alias == nil {
		return false
	}
	return st.nextTarget(rc)
}

// OnComplete implements pipeline.CompletionStage: the admission slot is released (also when
// the client left mid-stream) and the request's state goes back to its pool.
func (s *Stage) OnComplete(rc *pipeline.RequestCtx) {
	st, _ := rc.Get(&stateSlot).(*state)
	if st == nil {
		return
	}
	if st.alias != nil && !rc.Replied() {
		st.account(rc, consumerLabel(consumer.From(rc)))
	}
	pd.Complete(rc)
	if st.alias != nil {
		st.prefixComplete(rc)
	}
	st.ticket.Release()
	st.ticket = admission.Ticket{}
	st.alias, st.target = nil, nil
	rc.Set(&stateSlot, nil)
	states.Put(st)
}

// retrieveModel answers GET /v1/models/{alias}: the model object when the caller may use the
// alias, else 404 as for an alias that does not exist.
func (s *Stage) retrieveModel(rc *pipeline.RequestCtx, id string) error {
	caller := consumer.From(rc)
	if caller != nil && !caller.MayCall(config.EndpointModels) {
		return consumer.EndpointForbidden(rc)
	}
	if s.table.aliases[id] == nil || caller != nil && !caller.MayUseModel(id) {
		ge := &pipeline.GatewayError{Status: 404, Type: pipeline.InvalidRequest, Code: "model_not_found",
			Message: "The model `" + id + "` does not exist or you do not have access to it."}
		return ge
	}
	body := []byte(`{"id":`)
	body = strconv.AppendQuote(body, id)
	body = append(body, `,"object":"model","created":0,"owned_by":"sluice"}`+"\n"...)
	return rc.Reply(200, "application/json", body)
}

// listModels answers GET /v1/models with the aliases the caller may use, in OpenAI's list
// shape.
func (s *Stage) listModels(rc *pipeline.RequestCtx) error {
	caller := consumer.From(rc)
	if caller != nil && !caller.MayCall(config.EndpointModels) {
		return consumer.EndpointForbidden(rc)
	}
	body := []byte(`{"object":"list","data":[`)
	n := 0
	for _, name := range s.table.names {
		if caller != nil && !caller.MayUseModel(name) {
			continue
		}
		if n > 0 {
			body = append(body, ',')
		}
		n++
		body = append(body, `{"id":`...)
		body = strconv.AppendQuote(body, name)
		body = append(body, `,"object":"model","created":0,"owned_by":"sluice"}`...)
	}
	body = append(body, "]}\n"...)
	return rc.Reply(200, "application/json", body)
}
