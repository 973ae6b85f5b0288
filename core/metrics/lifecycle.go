package metrics

import (
	"slices"
	"sync"

	vm "github.com/VictoriaMetrics/metrics"
)

// lifecycleFamilies are the model lifecycle's families: traffic mirroring, revisions and
// rollout, scaling.
var lifecycleFamilies = []Family{
	{"sluice_mirror_sent_total", "counter", "Copies of requests queued for the shadow service of a mirror."},
	{"sluice_mirror_dropped_total", "counter", "Copies of requests a mirror dropped instead of sending, by reason: queue_full (its queue was full), no_backend (the shadow had none when the copy was to be sent), stopped (a reload replaced or removed the mirror while the copy was queued), max_bytes (the copies held would have gone over max_bytes)."},
	{"sluice_mirror_responses_total", "counter", "Answers of a mirror's shadow service, read and discarded, by status class (1xx to 5xx, other) or error (no answer: connect failure, timeout, cut)."},
	{"sluice_mirror_queue_depth", "gauge", "Copies waiting in a mirror's queue for a sender."},
	{"sluice_revision_traffic_percent", "gauge", "Share of the service's requests the revision gets now, in percent (a rollout moves it)."},
	{"sluice_revision_requests_total", "counter", "Requests of the service sent to the revision, by result: success, or error (5xx, gateway error, upstream failure; client cancellations are not counted)."},
	{"sluice_rollout_state", "gauge", "State of the service's rollout: 0 progressing, 1 completed (all traffic on the new revision), 2 rolled back."},
	{"sluice_scaling_desired_replicas", "gauge", "Replicas the service's load asks for now: ⌈(in flight + queued) / (container_concurrency × target_utilization)⌉, clamped to min..max replicas."},
	{"sluice_scaling_replicas", "gauge", "Replicas of the scaled service by state: starting (started, not ready yet) or ready (taking requests)."},
	{"sluice_scaling_in_flight", "gauge", "Requests of the scaled service being served by its replicas."},
	{"sluice_scaling_queue_depth", "gauge", "Requests of the scaled service waiting for a replica (cold-start buffer)."},
	{"sluice_scaling_buffer_rejected_total", "counter", "Requests of the scaled service refused by its buffer, by reason: queue_full (503 at once), timeout (504 after buffer_timeout), no_replica (503, buffering off and none ready)."},
	{"sluice_scaling_replica_failures_total", "counter", "Replicas of the scaled service (exec executor) that failed, by reason: start (the command could not be started), not_ready (it ended, or was stopped at startup_timeout, before it was ready), exited (it ended while ready), port_taken (another process held its port, and it was not started). Each is started again after a backoff."},
	{"sluice_rollout_events_total", "counter", "Decisions of the service's rollout, by event: advanced (a step passed), waiting (a step's interval ended with too few samples), completed, rolled_back."},
}

// init adds the lifecycle families to Families and their help texts (which the package's
// variables were initialised from before init runs).
func init() {
	Families = append(Families, lifecycleFamilies...)
	for _, f := range lifecycleFamilies {
		helpText[f.Name] = f.Help
	}
}

// Mirror reasons for a dropped copy (sluice_mirror_dropped_total).
const (
	MirrorQueueFull = "queue_full"
	MirrorNoBackend = "no_backend"
	MirrorStopped   = "stopped"
	// MirrorMaxBytes: the copy would have taken the bytes the mirror holds over max_bytes.
	MirrorMaxBytes = "max_bytes"
)

// Mirror holds the metrics of one mirror (a service and its shadow). The series survive
// reloads that keep the mirror (InForce); its methods are safe for concurrent use.
type Mirror struct {
	series    *series
	sent      *vm.Counter
	dropped   map[string]*vm.Counter
	responses [len(classes) + 1]*vm.Counter // by class, then "error"
	queue     *vm.Gauge
}

// ForMirror returns the metrics of the mirror of service to shadow, creating them on first
// use; they are exposed from Publish on.
func ForMirror(service, shadow string) *Mirror {
	l := labels("service", service, "shadow", shadow)
	x := seriesOf("mirror{" + l + "}")
	m := &Mirror{
		series:  x,
		sent:    x.s.GetOrCreateCounter(`sluice_mirror_sent_total{` + l + `}`),
		dropped: map[string]*vm.Counter{},
		queue:   x.s.GetOrCreateGauge(`sluice_mirror_queue_depth{`+l+`}`, nil),
	}
	for _, r := range []string{MirrorQueueFull, MirrorNoBackend, MirrorStopped, MirrorMaxBytes} {
		m.dropped[r] = x.s.GetOrCreateCounter(`sluice_mirror_dropped_total{` + l + `,reason="` + r + `"}`)
	}
	for i, c := range classes {
		m.responses[i] = x.s.GetOrCreateCounter(`sluice_mirror_responses_total{` + l + `,code="` + c + `"}`)
	}
	m.responses[len(classes)] = x.s.GetOrCreateCounter(`sluice_mirror_responses_total{` + l + `,code="error"}`)
	return m
}

// Publish exposes the mirror's series once a configuration that has it is in force.
// Idempotent.
func (m *Mirror) Publish() { m.series.publish() }

func (m *Mirror) groups() []*series { return []*series{m.series} }

// Sent counts a copy queued; the queue depth goes up by one until Dequeued.
func (m *Mirror) Sent() { m.sent.Inc(); m.queue.Inc() }

// Dequeued counts a copy taken off the queue (sent or dropped).
func (m *Mirror) Dequeued() { m.queue.Dec() }

// Dropped counts a copy dropped for reason (a Mirror* constant).
func (m *Mirror) Dropped(reason string) { m.dropped[reason].Inc() }

// Answered counts a shadow answer of status, or a failure to get one (status 0).
func (m *Mirror) Answered(status int) {
	if status == 0 {
		m.responses[len(classes)].Inc()
		return
	}
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	m.responses[c].Inc()
}

// Split holds the gauges of a service's split over its revisions and of its rollout. Each
// split writes gauges of its own, exposed as the service's only while the split is in force
// (InForce): a split a reload replaced may still write, and a service that no longer has
// revisions, or a rollout, has no such series. Safe for concurrent use.
type Split struct {
	service string
	g       *ownedGauges
	mu      sync.Mutex
	counted []*series // the revisions' and the rollout's counters
}

// ForSplit returns the gauges of a new split of service, not exposed until InForce.
func ForSplit(service string) *Split {
	return &Split{service: service, g: newOwnedGauges("split\x00" + service)}
}

// InForce exposes the split's gauges as its service's, in place of those of the split it
// replaces, and its counters. Idempotent.
func (s *Split) InForce() {
	s.g.inForce()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.counted {
		x.publish()
	}
}

// groups returns the groups of the split's counters; its gauges follow InForce and Retire.
func (s *Split) groups() []*series {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.counted)
}

// counters returns the group of the split's counters of key, which InForce publishes.
func (s *Split) counters(key string) *series {
	x := seriesOf(key)
	s.mu.Lock()
	s.counted = append(s.counted, x)
	s.mu.Unlock()
	return x
}

// Retire removes the service's split gauges when they are this split's: its service no
// longer has revisions. Idempotent.
func (s *Split) Retire() { s.g.retire() }

// Revision holds the metrics of one revision of a service. Safe for concurrent use.
type Revision struct {
	percent          *vm.Gauge
	success, failure *vm.Counter
}

// Revision returns the metrics of revision of the split's service: its traffic share, a
// gauge of the split, and its request counters, which survive reloads that keep the revision
// (InForce).
func (s *Split) Revision(revision string) *Revision {
	l := labels("service", s.service, "revision", revision)
	x := s.counters("revision{" + l + "}")
	return &Revision{
		percent: s.g.s.GetOrCreateGauge(`sluice_revision_traffic_percent{`+l+`}`, nil),
		success: x.s.GetOrCreateCounter(`sluice_revision_requests_total{` + l + `,result="success"}`),
		failure: x.s.GetOrCreateCounter(`sluice_revision_requests_total{` + l + `,result="error"}`),
	}
}

// SetPercent sets the revision's share of the traffic, in percent.
func (r *Revision) SetPercent(p float64) { r.percent.Set(p) }

// Request counts a request of the revision.
func (r *Revision) Request(failed bool) {
	if failed {
		r.failure.Inc()
	} else {
		r.success.Inc()
	}
}

// Rollout states, the values of sluice_rollout_state.
const (
	RolloutProgressing = 0
	RolloutCompleted   = 1
	RolloutRolledBack  = 2
)

// Rollout events (sluice_rollout_events_total).
const (
	RolloutAdvanced = "advanced"
	RolloutWaiting  = "waiting"
	RolloutDone     = "completed"
	RolloutRollback = "rolled_back"
)

// Rollout holds the metrics of a service's rollout. Safe for concurrent use.
type Rollout struct {
	state  *vm.Gauge
	events map[string]*vm.Counter
}

// Rollout returns the metrics of the rollout of the split's service: its state, a gauge of
// the split, and its event counters, which survive reloads that keep the rollout (InForce).
func (s *Split) Rollout() *Rollout {
	l := labels("service", s.service)
	x := s.counters("rollout{" + l + "}")
	r := &Rollout{state: s.g.s.GetOrCreateGauge(`sluice_rollout_state{`+l+`}`, nil), events: map[string]*vm.Counter{}}
	for _, e := range []string{RolloutAdvanced, RolloutWaiting, RolloutDone, RolloutRollback} {
		r.events[e] = x.s.GetOrCreateCounter(`sluice_rollout_events_total{` + l + `,event="` + e + `"}`)
	}
	return r
}

// SetState sets the rollout's state (a Rollout* state constant).
func (r *Rollout) SetState(s int) { r.state.Set(float64(s)) }

// Event counts a decision of the rollout (a Rollout* event constant).
func (r *Rollout) Event(e string) { r.events[e].Inc() }

// Scaling buffer rejection reasons (sluice_scaling_buffer_rejected_total).
const (
	ScalingQueueFull = "queue_full"
	ScalingTimeout   = "timeout"
	ScalingNoReplica = "no_replica"
)

// Scaling replica failure reasons (sluice_scaling_replica_failures_total).
const (
	ScalingFailedStart    = "start"
	ScalingFailedNotReady = "not_ready"
	ScalingFailedExited   = "exited"
	// ScalingFailedPortTaken: the slot's port was held by another process when its replica
	// was to start, which was then not started.
	ScalingFailedPortTaken = "port_taken"
)

// Scaling holds the metrics of a scaled service's scaler. Each scaler writes gauges of its
// own, exposed as the service's only while the scaler is in force (InForce): a scaler a
// reload replaced goes on writing while it stops its replicas, and a service that no longer
// scales has no gauges. Safe for concurrent use.
type Scaling struct {
	g                                          *ownedGauges
	counted                                    *series // the rejection and failure counters
	desired, starting, ready, inFlight, queued *vm.Gauge
	rejected, failed                           map[string]*vm.Counter
}

// ForScaling returns the metrics of a new scaler of service: its gauges, not exposed until
// InForce, and its rejection counters, which survive reloads that keep the service scaled
// (metrics.InForce).
func ForScaling(service string) *Scaling {
	l := labels("service", service)
	g := newOwnedGauges("scaling\x00" + service)
	x := seriesOf("scaling{" + l + "}")
	s := &Scaling{
		g:        g,
		counted:  x,
		desired:  g.s.GetOrCreateGauge(`sluice_scaling_desired_replicas{`+l+`}`, nil),
		starting: g.s.GetOrCreateGauge(`sluice_scaling_replicas{`+l+`,state="starting"}`, nil),
		ready:    g.s.GetOrCreateGauge(`sluice_scaling_replicas{`+l+`,state="ready"}`, nil),
		inFlight: g.s.GetOrCreateGauge(`sluice_scaling_in_flight{`+l+`}`, nil),
		queued:   g.s.GetOrCreateGauge(`sluice_scaling_queue_depth{`+l+`}`, nil),
		rejected: map[string]*vm.Counter{},
		failed:   map[string]*vm.Counter{},
	}
	for _, r := range []string{ScalingQueueFull, ScalingTimeout, ScalingNoReplica} {
		s.rejected[r] = x.s.GetOrCreateCounter(`sluice_scaling_buffer_rejected_total{` + l + `,reason="` + r + `"}`)
	}
	for _, r := range []string{ScalingFailedStart, ScalingFailedNotReady, ScalingFailedExited, ScalingFailedPortTaken} {
		s.failed[r] = x.s.GetOrCreateCounter(`sluice_scaling_replica_failures_total{` + l + `,reason="` + r + `"}`)
	}
	return s
}

// InForce exposes the scaler's gauges as its service's, in place of those of the scaler it
// replaces, and its counters. Idempotent.
func (s *Scaling) InForce() {
	s.g.inForce()
	s.counted.publish()
}

// groups returns the group of the rejection counters; the gauges follow InForce and Retire.
func (s *Scaling) groups() []*series { return []*series{s.counted} }

// Retire removes the service's scaling gauges when they are this scaler's: its service no
// longer scales. Idempotent.
func (s *Scaling) Retire() { s.g.retire() }

// Set publishes the scaler's state.
func (s *Scaling) Set(desired, starting, ready, inFlight, queued int) {
	s.desired.Set(float64(desired))
	s.starting.Set(float64(starting))
	s.ready.Set(float64(ready))
	s.inFlight.Set(float64(inFlight))
	s.queued.Set(float64(queued))
}

// Rejected counts a request the buffer refused for reason (a Scaling* constant).
func (s *Scaling) Rejected(reason string) { s.rejected[reason].Inc() }

// Failed counts a replica that failed for reason (a ScalingFailed* constant).
func (s *Scaling) Failed(reason string) { s.failed[reason].Inc() }

// ownedGauges is a set of gauges that one object writes (a scaler, a split) and that are
// exposed under key only while that object is in force: another object's set under the same
// key replaces them, and retiring the object in force removes them. Objects a reload
// replaced may outlive their replacement for a while (a scaler stopping its replicas); they
// write to sets nobody scrapes.
type ownedGauges struct {
	key string
	s   *vm.Set
}

// owners holds the set exposed under each key.
var owners struct {
	mu sync.Mutex
	m  map[string]*vm.Set
}

func newOwnedGauges(key string) *ownedGauges { return &ownedGauges{key: key, s: vm.NewSet()} }

// inForce exposes g under its key in place of the set exposed there.
func (g *ownedGauges) inForce() {
	owners.mu.Lock()
	defer owners.mu.Unlock()
	cur := owners.m[g.key]
	if cur == g.s {
		return
	}
	if owners.m == nil {
		owners.m = map[string]*vm.Set{}
	}
	// The old set goes first: a scrape between the two misses the series rather than seeing
	// each twice.
	if cur != nil {
		vm.UnregisterSet(cur, false)
	}
	vm.RegisterSet(g.s)
	owners.m[g.key] = g.s
}

// retire removes g's gauges when they are the ones exposed under its key.
func (g *ownedGauges) retire() {
	owners.mu.Lock()
	defer owners.mu.Unlock()
	if owners.m[g.key] == g.s {
		vm.UnregisterSet(g.s, false)
		delete(owners.m, g.key)
	}
}
