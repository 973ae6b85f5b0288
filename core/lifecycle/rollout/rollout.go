// Package rollout splits a service's requests over its revisions and moves the traffic from
// one revision to another step by step, judging the new one by what its own requests met in
// the current step, and moving everything back at once when it misbehaves.
//
// The split is smooth weighted round-robin over the revisions' shares (share.Split): exact
// over every 100 requests, evenly spread. A request's revision is chosen once, when it
// reaches the service (pipeline.ServiceHook); the other revisions' servers are left out of
// its backend choice.
//
// The decision loop runs in the gateway and is driven by events, not by polling: each
// completed request of the new revision is a sample of the current step (counted, its
// latency, time to first token and inter-token gaps kept in histograms for the percentiles
// shown, and counted against their thresholds, which judge the p99 exactly); the step's timer
// marks the end of its interval. A threshold crossed with at least min_samples samples rolls
// back at once (the new revision's share goes to the old one, which then has it all, and the
// rollout stops); a step whose interval has passed with at least min_samples samples and no
// threshold crossed advances by step_percent (the next sample or the timer, whichever comes
// first after both hold); a step with fewer samples waits, however long. The state, the
// history of decisions and the reason of a rollback are in Status (the admin API) and
// metrics.
package rollout

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/core/lifecycle/share"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Revision is one revision of a service: its name, its configured share and the IDs of its
// backends in the service.
type Revision struct {
	Name     string
	Percent  float64
	Backends []int
}

// Config is a rollout ([services.<name>.rollout], docs/config.md), with From and To as
// indexes into the revisions.
type Config struct {
	From, To       int
	StepPercent    float64
	StepInterval   time.Duration
	MaxErrorRate   float64
	MaxLatencyP99  time.Duration // 0: not checked
	MaxTTFTP99     time.Duration // 0: not checked
	MaxITLP99      time.Duration // 0: not checked
	MinSamples     int
	HistoryEntries int // decisions kept for Status; 0: DefaultHistoryEntries
}

// DefaultHistoryEntries is how many decisions Status keeps by default.
const DefaultHistoryEntries = 64

// States of a rollout.
const (
	StateProgressing = "progressing"
	StateCompleted   = "completed"
	StateRolledBack  = "rolled_back"
)

// Split is a service's split over its revisions, with its rollout when it has one. It
// implements pipeline.ServiceHook. Safe for concurrent use.
type Split struct {
	service string
	m       *metrics.Split // the gauges of the revisions and the rollout
	revs    []*revision
	split   *share.Split
	slot    pipeline.Slot
	ctl     *controller // nil without a rollout
}

type revision struct {
	Revision
	others []int // the backends of the other revisions
	m      *metrics.Revision
	to     bool // the rollout's new revision: its requests are samples
}

// New returns the split of service over revs, with its rollout when rc is not nil. The
// rollout's first step starts now.
func New(service string, revs []Revision, rc *Config) *Split {
	s := &Split{service: service, m: metrics.ForSplit(service), split: share.NewSplit(len(revs))}
	for i, r := range revs {
		rv := &revision{Revision: r, m: s.m.Revision(r.Name)}
		for j, o := range revs {
			if j != i {
				rv.others = append(rv.others, o.Backends...)
			}
		}
		s.revs = append(s.revs, rv)
	}
	w := make([]int64, len(revs))
	for i, r := range revs {
		w[i] = share.BasisPoints(r.Percent)
	}
	s.setWeights(w)
	if rc != nil {
		s.revs[rc.To].to = true
		s.ctl = newController(s, *rc, w)
	}
	return s
}

// setWeights puts weights in force (basis points) and publishes them.
func (s *Split) setWeights(w []int64) {
	s.split.Set(w)
	for i, r := range s.revs {
		r.m.SetPercent(float64(w[i]) * 100 / share.Scale)
	}
}

// ErrNoRevision answers a request when no revision has a share (cannot happen with a valid
// configuration, whose shares add up to 100).
var ErrNoRevision = &pipeline.GatewayError{Status: 503, Type: pipeline.ServerError, Code: "no_backend", Message: "no revision of the service takes requests", RetryAfter: 1}

// OnService implements pipeline.ServiceHook: it chooses the request's revision and leaves
// the other revisions' servers out of its backend choice.
func (s *Split) OnService(rc *pipeline.RequestCtx) error {
	i := s.split.Pick()
	if i < 0 {
		return ErrNoRevision
	}
	r := s.revs[i]
	for _, id := range r.others {
		rc.Exclude(id)
	}
	rc.Set(&s.slot, r)
	if r.to && s.ctl != nil && s.ctl.watchesGaps() {
		rc.WatchGaps(s.ctl.gapsOf(rc))
	}
	return nil
}

// LoopSafe implements pipeline.LoopSafe for a fixed split: a weighted pick and a counter.
// A split under a progressive rollout is not: its controller watches each stream's gaps and
// samples every completion.
func (s *Split) LoopSafe() bool { return s.ctl == nil }

// OnServiceDone implements pipeline.ServiceHook: it counts the request for its revision and
// gives the rollout its sample.
func (s *Split) OnServiceDone(rc *pipeline.RequestCtx) {
	r, _ := rc.Get(&s.slot).(*revision)
	if r == nil {
		return
	}
	o := rc.Outcome()
	if o.Canceled {
		return // the client left: says nothing of the revision
	}
	// A request that left for another service (a model's next target) did so because this
	// revision's servers could not take it: a failure of the revision, whatever answered.
	// An answer fails the revision as it fails a server to passive health and the circuit
	// breaker (pipeline.ServerFailure): a 501 or 505 is the client's doing, and a flood of
	// them must not roll back a good revision.
	failed := o.UpstreamError != "" || pipeline.ServerFailure(o.Status) || !rc.AnsweredByService()
	r.m.Request(failed)
	if r.to && s.ctl != nil {
		// The revision is judged by its own time with the request, not the wait before it
		// reached the service (a model's admission queue), which other traffic causes.
		entered := rc.ServiceEntered()
		ttft := o.TTFT
		if ttft > 0 {
			ttft = max(ttft-entered.Sub(rc.Start()), time.Nanosecond)
		}
		s.ctl.sample(failed, time.Since(entered), ttft, rc)
	}
}

// InForce makes the split's gauges (its revisions' shares, its rollout's state) the service's,
// in place of those of the split it replaces: until then a reload that is refused, or that
// replaces the split, would have two splits write the same series. Idempotent.
func (s *Split) InForce() { s.m.InForce() }

// Metrics returns the split's metrics, for the configurations that have the split to hold
// while in force (metrics.InForce).
func (s *Split) Metrics() *metrics.Split { return s.m }

// Close stops the rollout's timer and removes the service's split gauges when they are this
// split's (a split in force that is closed is one whose service no longer has it). The split
// keeps serving (a reload that keeps the same revisions and rollout takes it over instead).
func (s *Split) Close() {
	if s.ctl != nil {
		s.ctl.close()
	}
	s.m.Retire()
}

// RevisionStatus is a revision as Status shows it.
type RevisionStatus struct {
	Name string `json:"name"`
	// TrafficPercent is its share now; ConfiguredPercent the one configured.
	TrafficPercent    float64 `json:"traffic_percent"`
	ConfiguredPercent float64 `json:"configured_percent"`
}

// Revisions returns the revisions and their shares now.
func (s *Split) Revisions() []RevisionStatus {
	w := s.split.Weights()
	out := make([]RevisionStatus, len(s.revs))
	for i, r := range s.revs {
		out[i] = RevisionStatus{Name: r.Name, TrafficPercent: float64(w[i]) * 100 / share.Scale, ConfiguredPercent: r.Percent}
	}
	return out
}

// Rollout returns the rollout's state, nil for a split without one.
func (s *Split) Rollout() *Status {
	if s.ctl == nil {
		return nil
	}
	return s.ctl.status()
}

// Status is a rollout as the admin API shows it.
type Status struct {
	From  string `json:"from"`
	To    string `json:"to"`
	State string `json:"state"`
	// ToPercent is the new revision's share now; Step counts the steps passed.
	ToPercent float64 `json:"to_percent"`
	Step      int     `json:"step"`
	// StepStarted is when the current step began; Waiting that its interval has passed
	// with too few samples.
	StepStarted time.Time `json:"step_started"`
	Waiting     bool      `json:"waiting_for_samples"`
	// The current step's samples of the new revision.
	Samples    int64   `json:"samples"`
	Errors     int64   `json:"errors"`
	ErrorRate  float64 `json:"error_rate"`
	LatencyP99 float64 `json:"latency_p99_ms"`
	TTFTP99    float64 `json:"ttft_p99_ms"`
	ITLP99     float64 `json:"itl_p99_ms"`
	// Reason says why the rollout rolled back ("" otherwise).
	Reason  string  `json:"reason,omitempty"`
	History []Event `json:"history"`
}

// Event is one decision of the rollout.
type Event struct {
	At        time.Time `json:"at"`
	Event     string    `json:"event"` // a metrics.Rollout* event, or "started"
	ToPercent float64   `json:"to_percent"`
	Detail    string    `json:"detail"`
}

// controller is the decision loop of one rollout.
type controller struct {
	s   *Split
	cfg Config
	m   *metrics.Rollout

	mu        sync.Mutex
	w         []int64 // weights in force, basis points
	state     string
	step      int
	stepStart time.Time
	waiting   bool
	n, errs   int64
	lat, ttft hist
	itl       hist
	timer     *time.Timer
	history   []Event
	reason    string
	closed    bool

	// The step's latencies, times to first token and gaps over their thresholds: the
	// thresholds judge the samples themselves (p99Over); the histograms report percentiles.
	latOver, ttftOver, itlOver int64
}

func newController(s *Split, cfg Config, w []int64) *controller {
	if cfg.HistoryEntries <= 0 {
		cfg.HistoryEntries = DefaultHistoryEntries
	}
	c := &controller{s: s, cfg: cfg, m: s.m.Rollout(), w: append([]int64(nil), w...), state: StateProgressing}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.SetState(metrics.RolloutProgressing)
	if c.w[cfg.To] == 0 && c.w[cfg.From] > 0 {
		// A revision without traffic yields no samples, so its first step could never pass:
		// it starts with one step's share.
		moved := min(share.BasisPoints(cfg.StepPercent), c.w[cfg.From])
		c.w[cfg.From] -= moved
		c.w[cfg.To] += moved
		s.setWeights(c.w)
	}
	c.record("started", fmt.Sprintf("from %s to %s, %v%% a step every %v", s.revs[cfg.From].Name, s.revs[cfg.To].Name, cfg.StepPercent, cfg.StepInterval))
	if c.w[cfg.From] == 0 {
		// Nothing left to move: the new revision has all of the old one's share already.
		c.complete()
		return c
	}
	c.newStep(time.Now())
	return c
}

// record appends a decision to the history (bounded: the oldest go first). c.mu is held.
func (c *controller) record(event, detail string) {
	if len(c.history) >= c.cfg.HistoryEntries {
		c.history = append(c.history[:0], c.history[1:]...)
	}
	c.history = append(c.history, Event{At: time.Now(), Event: event, ToPercent: c.toPercent(), Detail: detail})
	// The log tells an operator what the admin API's history does, as it happens; a rollback
	// is a warning.
	level := slog.LevelInfo
	if event == metrics.RolloutRollback {
		level = slog.LevelWarn
	}
	slog.Log(context.Background(), level, "rollout", "service", c.s.service, "event", event,
		"from", c.s.revs[c.cfg.From].Name, "to", c.s.revs[c.cfg.To].Name, "to_percent", c.toPercent(), "detail", detail)
}

func (c *controller) toPercent() float64 { return float64(c.w[c.cfg.To]) * 100 / share.Scale }

// newStep starts a step at now: empty samples, the timer armed for its interval. c.mu is held.
func (c *controller) newStep(now time.Time) {
	c.stepStart, c.waiting = now, false
	c.n, c.errs = 0, 0
	c.latOver, c.ttftOver, c.itlOver = 0, 0, 0
	c.lat.reset()
	c.ttft.reset()
	c.itl.reset()
	if c.timer == nil {
		c.timer = time.AfterFunc(c.cfg.StepInterval, c.intervalEnded)
	} else {
		c.timer.Reset(c.cfg.StepInterval)
	}
}

// intervalEnded runs on the step timer: the step is judged now if it has its samples, or
// marked waiting.
func (c *controller) intervalEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.state != StateProgressing {
		return
	}
	now := time.Now()
	if now.Sub(c.stepStart) < c.cfg.StepInterval {
		return // a firing of the previous step's timer
	}
	c.judge(now)
}

func (c *controller) watchesGaps() bool { return c.cfg.MaxITLP99 > 0 }

// gaps collects one request's inter-token gaps, and counts those over the ITL threshold; they
// join the step's when the request completes (a request's stream does not lock the
// controller per token).
type gaps struct {
	h     hist
	limit time.Duration // Config.MaxITLP99
	over  int64
}

var gapsSlot pipeline.Slot

// gapsOf returns the gap collector of rc's request, kept in its slot.
func (c *controller) gapsOf(rc *pipeline.RequestCtx) *gaps {
	g, _ := rc.Get(&gapsSlot).(*gaps)
	if g == nil {
		g = new(gaps)
		rc.Set(&gapsSlot, g)
	}
	g.h.reset()
	g.limit, g.over = c.cfg.MaxITLP99, 0
	return g
}

// OnGap implements pipeline.GapWatcher.
func (g *gaps) OnGap(d time.Duration) {
	g.h.add(d)
	if d > g.limit {
		g.over++
	}
}

// sample adds a completed request of the new revision to the current step and judges the step
// when a threshold is crossed or its interval has passed.
func (c *controller) sample(failed bool, latency, ttft time.Duration, rc *pipeline.RequestCtx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.state != StateProgressing {
		return
	}
	c.n++
	if failed {
		c.errs++
	}
	c.lat.add(latency)
	if c.cfg.MaxLatencyP99 > 0 && latency > c.cfg.MaxLatencyP99 {
		c.latOver++
	}
	if ttft > 0 {
		c.ttft.add(ttft)
		if c.cfg.MaxTTFTP99 > 0 && ttft > c.cfg.MaxTTFTP99 {
			c.ttftOver++
		}
	}
	if g, _ := rc.Get(&gapsSlot).(*gaps); g != nil && c.watchesGaps() {
		for i, k := range g.h.buckets {
			c.itl.buckets[i] += k
		}
		c.itl.n += g.h.n
		c.itlOver += g.over
		g.h.reset()
		g.over = 0
	}
	if c.n < int64(c.cfg.MinSamples) {
		return
	}
	if why := c.crossed(); why != "" {
		c.rollback(why)
		return
	}
	if now := time.Now(); now.Sub(c.stepStart) >= c.cfg.StepInterval {
		c.judge(now)
	}
}

// crossed returns which threshold the step's samples cross ("" for none). c.mu is held.
func (c *controller) crossed() string {
	step := c.step + 1
	if rate := float64(c.errs) / float64(c.n); rate > c.cfg.MaxErrorRate {
		return fmt.Sprintf("error rate %.3f > %.3f (%d of %d requests) in step %d", rate, c.cfg.MaxErrorRate, c.errs, c.n, step)
	}
	// The p99 shown is its histogram bucket's upper bound, above the true p99 and so above
	// the threshold too once the true one is.
	if c.cfg.MaxLatencyP99 > 0 && p99Over(c.n, c.latOver) {
		return fmt.Sprintf("latency p99 %v > %v (%d of %d requests over it) in step %d", c.lat.quantile(.99).Round(time.Millisecond), c.cfg.MaxLatencyP99, c.latOver, c.n, step)
	}
	if c.cfg.MaxTTFTP99 > 0 && p99Over(c.ttft.n, c.ttftOver) {
		return fmt.Sprintf("TTFT p99 %v > %v (%d of %d streams over it) in step %d", c.ttft.quantile(.99).Round(time.Millisecond), c.cfg.MaxTTFTP99, c.ttftOver, c.ttft.n, step)
	}
	if c.cfg.MaxITLP99 > 0 && p99Over(c.itl.n, c.itlOver) {
		return fmt.Sprintf("ITL p99 %v > %v (%d of %d gaps over it) in step %d", c.itl.quantile(.99).Round(time.Millisecond), c.cfg.MaxITLP99, c.itlOver, c.itl.n, step)
	}
	return ""
}

// p99Over reports whether the p99 of n values, over of which exceed a threshold, exceeds it.
// The p99 is the value of rank ⌈0.99·n⌉ in increasing order (as hist.quantile takes it), so it
// exceeds the threshold when more than the n − ⌈0.99·n⌉ values above it do: with fewer than
// 100 values, any one.
func p99Over(n, over int64) bool {
	return over > n-(99*n+99)/100
}

// judge decides a step whose interval has passed: too few samples wait, a crossed threshold
// rolls back, otherwise the step passes. c.mu is held.
func (c *controller) judge(now time.Time) {
	if c.n < int64(c.cfg.MinSamples) {
		if !c.waiting {
			c.waiting = true
			c.m.Event(metrics.RolloutWaiting)
			c.record(metrics.RolloutWaiting, fmt.Sprintf("step %d has %d of %d samples after %v", c.step+1, c.n, c.cfg.MinSamples, c.cfg.StepInterval))
		}
		return
	}
	if why := c.crossed(); why != "" {
		c.rollback(why)
		return
	}
	c.advance(now)
}

// advance moves step_percent of the traffic from the old revision to the new one. c.mu is held.
func (c *controller) advance(now time.Time) {
	from, to := c.cfg.From, c.cfg.To
	moved := min(share.BasisPoints(c.cfg.StepPercent), c.w[from])
	c.w[from] -= moved
	c.w[to] += moved
	c.s.setWeights(c.w)
	c.step++
	detail := fmt.Sprintf("step %d passed: %d requests, error rate %.3f, latency p99 %v", c.step, c.n, float64(c.errs)/float64(c.n), c.lat.quantile(.99).Round(time.Millisecond))
	c.m.Event(metrics.RolloutAdvanced)
	c.record(metrics.RolloutAdvanced, detail)
	if c.w[from] == 0 {
		c.complete()
		return
	}
	c.newStep(now)
}

// complete ends a rollout whose old revision has no share left. c.mu is held.
func (c *controller) complete() {
	c.state, c.waiting = StateCompleted, false
	c.m.SetState(metrics.RolloutCompleted)
	c.m.Event(metrics.RolloutDone)
	c.record(metrics.RolloutDone, fmt.Sprintf("%s has %v%% of the traffic", c.s.revs[c.cfg.To].Name, c.toPercent()))
	if c.timer != nil {
		c.timer.Stop()
	}
}

// rollback gives the new revision's share back to the old one and stops. c.mu is held.
func (c *controller) rollback(why string) {
	from, to := c.cfg.From, c.cfg.To
	c.w[from] += c.w[to]
	c.w[to] = 0
	c.s.setWeights(c.w)
	c.state, c.reason, c.waiting = StateRolledBack, why, false
	c.m.SetState(metrics.RolloutRolledBack)
	c.m.Event(metrics.RolloutRollback)
	c.record(metrics.RolloutRollback, why)
	if c.timer != nil {
		c.timer.Stop()
	}
}

func (c *controller) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000 }

func (c *controller) status() *Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &Status{
		From: c.s.revs[c.cfg.From].Name, To: c.s.revs[c.cfg.To].Name, State: c.state,
		ToPercent: c.toPercent(), Step: c.step, StepStarted: c.stepStart, Waiting: c.waiting,
		Samples: c.n, Errors: c.errs, Reason: c.reason,
		LatencyP99: ms(c.lat.quantile(.99)), TTFTP99: ms(c.ttft.quantile(.99)), ITLP99: ms(c.itl.quantile(.99)),
		History: append([]Event(nil), c.history...),
	}
	if c.n > 0 {
		st.ErrorRate = float64(c.errs) / float64(c.n)
	}
	return st
}
