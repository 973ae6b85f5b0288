package health

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/metrics"
)

// Defaults of passive health, as the seed document states them for AI backends: 5
// consecutive 5xx or timeouts eject a server, 2 consecutive successes readmit it.
const (
	DefaultConsecutiveFailures  = 5
	DefaultConsecutiveSuccesses = 2
	DefaultErrorRate            = 0.5
	DefaultErrorWindow          = 60 * time.Second
	DefaultMinRequests          = 20
	DefaultEjection             = 10 * time.Second
	DefaultMaxEjection          = 5 * time.Minute
	// windowBuckets divide the error-rate window: the rate covers the window to within a
	// bucket.
	windowBuckets = 10
)

// PassiveSpec says when request outcomes eject a server.
type PassiveSpec struct {
	// ConsecutiveFailures failed requests in a row eject a server.
	ConsecutiveFailures int
	// ConsecutiveSuccesses successful requests in a row after an ejection readmit the server
	// for good; a failure before that ejects it again, for twice as long.
	ConsecutiveSuccesses int
	// ErrorRate, when above 0, ejects a server whose failed share of the requests in the last
	// ErrorWindow exceeds it, once MinRequests were made in the window.
	ErrorRate   float64
	ErrorWindow time.Duration
	MinRequests int
	// Ejection is how long the first ejection lasts; each further one without a readmission
	// between doubles it, up to MaxEjection.
	Ejection, MaxEjection time.Duration
}

// DefaultPassive returns the passive health every service has unless configured otherwise.
func DefaultPassive() PassiveSpec {
	return PassiveSpec{
		ConsecutiveFailures: DefaultConsecutiveFailures, ConsecutiveSuccesses: DefaultConsecutiveSuccesses,
		ErrorRate: DefaultErrorRate, ErrorWindow: DefaultErrorWindow, MinRequests: DefaultMinRequests,
		Ejection: DefaultEjection, MaxEjection: DefaultMaxEjection,
	}
}

// Member is one server of a Passive's service.
type Member struct {
	LB *balancer.Backend
	// Metrics count its ejections (nil: none).
	Metrics *metrics.Health
	// State is the server's judgement so far (its runs of failures and successes, its
	// ejections); nil starts afresh. The Passive of a reloaded configuration shares it with
	// the one it replaces, whose requests still in flight go on to count in it, and LB shares
	// the server's balancer.State, which holds the ejection itself.
	State *PassiveState
}

// Passive judges the servers of one service by the outcomes of their requests. Observe is
// safe for concurrent use and allocates nothing.
type Passive struct {
	spec    PassiveSpec
	service string
	members []Member
	states  []*PassiveState
	log     *slog.Logger
	bucket  time.Duration
	// retired: a newer configuration judges the servers. This one goes on counting the
	// outcomes of the requests it sent into the shared states, but ejects nobody: whether
	// a server is the last one in rotation is for the configuration in force to say.
	retired atomic.Bool
}

// Retire stops p ejecting servers, once the configuration it belongs to is replaced; the
// outcomes it still observes count toward the next judgement of the configuration in force.
func (p *Passive) Retire() {
	if p != nil {
		p.retired.Store(true)
	}
}

// PassiveState is what passive health has learnt of one server. The zero value is a server
// with no outcome seen. Several Passives (one per configuration) may share it; it must not be
// copied after first use.
type PassiveState struct {
	mu        sync.Mutex
	failRun   int
	okRun     int
	probation bool // ejected before, not yet readmitted for good
	ejections int  // in a row, without a readmission between
	refused   bool // a refused ejection was logged since the last success
	buckets   [windowBuckets]bucket
	_         [64]byte // states allocated together sit side by side: no false sharing
}

type bucket struct {
	epoch         int64 // the window bucket number it counts
	total, failed int32
}

// NewPassive returns the passive health of service over members (indexed by their
// balancer.Backend ID), each judged on from its State. log nil uses slog.Default().
func NewPassive(spec PassiveSpec, service string, members []Member, log *slog.Logger) *Passive {
	if log == nil {
		log = slog.Default()
	}
	p := &Passive{spec: spec, service: service, members: members, states: make([]*PassiveState, len(members)), log: log}
	for i, m := range members {
		p.states[i] = m.State
		if p.states[i] == nil {
			p.states[i] = new(PassiveState)
		}
	}
	p.bucket = max(spec.ErrorWindow/windowBuckets, time.Millisecond)
	return p
}

// Observe records the outcome of one request to the member with balancer ID id: failed for a
// 5xx, a timeout, a reset or a stream cut after its head. It may eject the member.
func (p *Passive) Observe(id int, failed bool) { p.ObserveAt(id, failed, time.Now()) }

// ObserveAt is Observe for a caller that read the clock already: now is when the request
// ended, which places it in the failure-rate window.
func (p *Passive) ObserveAt(id int, failed bool, now time.Time) {
	if p == nil || id < 0 || id >= len(p.states) {
		return
	}
	m, st := &p.members[id], p.states[id]
	if failed && m.LB.Ejected() {
		return // a request that was sent before the ejection: the same failure
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	rate := st.count(now, p.bucket, failed)
	if !failed {
		st.failRun, st.okRun, st.refused = 0, st.okRun+1, false
		if st.probation && st.okRun >= p.spec.ConsecutiveSuccesses {
			st.probation, st.ejections = false, 0
			p.log.Info("backend readmitted", "service", p.service, "backend", m.LB.Name)
		}
		return
	}
	st.failRun, st.okRun = st.failRun+1, 0
	reason := ""
	switch {
	case st.probation:
		reason = "failed again after an ejection"
	case st.failRun >= p.spec.ConsecutiveFailures:
		reason = "consecutive failures"
	case p.spec.ErrorRate > 0 && rate.total >= p.spec.MinRequests && float64(rate.failed) > p.spec.ErrorRate*float64(rate.total):
		reason = "error rate"
	default:
		return
	}
	if p.retired.Load() {
		return
	}
	if !p.othersUp(id) {
		// Ejecting it would leave the service no server: a failing one beats none.
		m.Metrics.EjectionRefused()
		if !st.refused {
			st.refused = true
			p.log.Warn("backend failing but not ejected: it is the last one of its service in rotation", "service", p.service, "backend", m.LB.Name, "reason", reason, "consecutive_failures", st.failRun)
		}
		return
	}
	d := p.spec.Ejection << min(st.ejections, 20)
	if d > p.spec.MaxEjection || d <= 0 {
		d = p.spec.MaxEjection
	}
	m.LB.EjectFor(d)
	st.ejections++
	st.probation, st.failRun = true, 0
	st.buckets = [windowBuckets]bucket{}
	m.Metrics.Ejected(false)
	p.log.Warn("backend ejected", "service", p.service, "backend", m.LB.Name, "reason", reason, "for", d)
}

// othersUp reports whether a member other than id is in rotation.
func (p *Passive) othersUp(id int) bool {
	for i := range p.members {
		if i != id && !p.members[i].LB.Down() {
			return true
		}
	}
	return false
}

// windowCount is the requests and failures of the error-rate window.
type windowCount struct{ total, failed int }

// count adds one outcome to the window and returns the window's counts.
func (st *PassiveState) count(now time.Time, width time.Duration, failed bool) windowCount {
	epoch := now.UnixNano() / int64(width)
	b := &st.buckets[epoch%windowBuckets]
	if b.epoch != epoch {
		*b = bucket{epoch: epoch}
	}
	b.total++
	if failed {
		b.failed++
	}
	var w windowCount
	for i := range st.buckets {
		if x := &st.buckets[i]; epoch-x.epoch < windowBuckets {
			w.total += int(x.total)
			w.failed += int(x.failed)
		}
	}
	return w
}
