// Package breaker is the circuit-breaker middleware ([middlewares.<name>] type =
// "circuit-breaker"): a breaker per backend that opens after failure_threshold consecutive
// failed requests, keeps the backend out of every request's choice for cooldown_secs, then
// lets one probe request at a time through (half-open) and closes after success_threshold
// consecutive successful probes.
//
// An open backend is not answered for: it is left out of the request's backend choice (a
// pipeline.VetStage), so the request goes to a healthy backend of the service, or to the
// next target of a model router, and only a request that finds every backend open is answered
// 503 circuit_open with Retry-After (the time until the first of them takes a probe). A
// fast-failing breaker would refuse requests a healthy neighbour could serve.
//
// Each try of a request counts against the backend it went to: a failure is a 5xx answer
// other than 501 and 505 (pipeline.ServerFailure: those two answer a method or version the
// client chose, which any client can provoke), an upstream error (unreachable, timeout,
// malformed or closed response) or a stream that fails after its head; a success is any other
// answer the upstream gave. A request whose client left first, or that the gateway or a stage
// answered instead of the upstream, counts neither way; so does a backend that refused the
// request for now (Retry-After). The backend that answers counts
// when the request completes; one the request left for another try (it could not be reached,
// or the retry middleware sent the request again) counts at the next backend choice.
package breaker

import (
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// A breaker's state is one word, changed by compare-and-swap: the state, whether a probe is
// in flight, a count (consecutive failures while closed, successful probes while half-open)
// and the instant it opened, in ms on the breaker's clock.
const (
	stateMask  = 0b11
	probeBit   = 1 << 2
	countShift = 3
	countMask  = 1<<20 - 1
	timeShift  = 23 // 41 bits of ms: 69 years
)

// States, as the sluice_circuit_breaker_state gauge shows them.
const (
	closed   = metrics.BreakerClosed
	open     = metrics.BreakerOpen
	halfOpen = metrics.BreakerHalfOpen
)

func pack(state int, probe bool, count int, at int64) uint64 {
	w := uint64(state) | uint64(min(count, countMask))<<countShift | uint64(at)<<timeShift
	if probe {
		w |= probeBit
	}
	return w
}

func stateOf(w uint64) int    { return int(w & stateMask) }
func probing(w uint64) bool   { return w&probeBit != 0 }
func countOf(w uint64) int    { return int(w >> countShift & countMask) }
func openedAt(w uint64) int64 { return int64(w >> timeShift) }

// Breaker is the breaker of one backend. Its word is the state of the backend's server,
// shared with the breakers of the stages before and after a reload that keep the server
// (pipeline.Backend.Key), so that the server has one state whatever form its URL is written
// in. The word is written only on failures and state changes: requests that succeed against
// a closed breaker with no failure streak only read it, so cores serving one backend do not
// contend for its cache line.
type Breaker struct {
	w        *atomic.Uint64
	service  string
	backend  string // the backend's URL as configured
	probeTag probe  // kept in a request that holds the probe, to tell it from a plain one
}

// newBreaker returns the breaker of the backend shown as backend of service, over the state
// word w.
func newBreaker(w *atomic.Uint64, service, backend string) *Breaker {
	b := &Breaker{w: w, service: service, backend: backend}
	b.probeTag.b = b
	return b
}

// probe marks a request holding its breaker's probe.
type probe struct{ b *Breaker }

// State returns closed (0), open (1) or half-open (2).
func (b *Breaker) State() int { return stateOf(b.w.Load()) }

// verdict is a pick's fate under a breaker.
type verdict uint8

const (
	pass       verdict = iota // closed: the request may go
	passProbe                 // the request is the probe of a half-open breaker
	firstProbe                // passProbe, and the breaker just turned half-open
	refuse                    // open, or half-open with its probe in flight
)

// admit decides whether a request may go to b at now (ms), turning an open breaker whose
// cooldown is over into a half-open one with this request as its probe.
func (b *Breaker) admit(now, cooldown int64) verdict {
	for {
		w := b.w.Load()
		var nw uint64
		switch stateOf(w) {
		case closed:
			return pass
		case open:
			if now < openedAt(w)+cooldown {
				return refuse
			}
			nw = pack(halfOpen, true, 0, openedAt(w))
		default:
			if probing(w) {
				return refuse
			}
			nw = w | probeBit
		}
		if b.w.CompareAndSwap(w, nw) {
			if stateOf(w) == open {
				return firstProbe
			}
			return passProbe
		}
	}
}

// result is how a request ended for its backend.
type result uint8

const (
	succeeded result = iota
	failed
	neither // the client left, or a stage answered: the backend was not judged
)

// record counts a request's result against b: isProbe when it held b's probe. It returns the
// state b moved to, or -1 when it did not change state.
func (b *Breaker) record(r result, isProbe bool, now int64, o *config.CircuitBreakerOptions) int {
	for {
		w := b.w.Load()
		var nw uint64
		switch st := stateOf(w); {
		case st == open:
			return -1 // a request admitted before the breaker opened
		case st == halfOpen && !isProbe:
			return -1 // likewise: only the probe speaks for a half-open backend
		case r == neither && !isProbe:
			return -1
		case r == neither:
			nw = w &^ probeBit // the next request probes instead
		case st == closed && r == succeeded:
			if countOf(w) == 0 {
				return -1
			}
			nw = pack(closed, false, 0, 0)
		case st == closed:
			if n := countOf(w) + 1; n < o.FailureThreshold {
				nw = pack(closed, false, n, 0)
			} else {
				nw = pack(open, false, 0, now)
			}
		case r == succeeded: // the probe of a half-open breaker
			if n := countOf(w) + 1; n < o.SuccessThreshold {
				nw = pack(halfOpen, false, n, openedAt(w))
			} else {
				nw = pack(closed, false, 0, 0)
			}
		default: // the probe failed
			nw = pack(open, false, 0, now)
		}
		if b.w.CompareAndSwap(w, nw) {
			if stateOf(nw) != stateOf(w) {
				return stateOf(nw)
			}
			return -1
		}
	}
}

// retryAfter returns how long until b may take a request: the rest of an open breaker's
// cooldown, or a second for a half-open one whose probe is in flight; 0 when closed.
func (b *Breaker) retryAfter(now, cooldown int64) time.Duration {
	w := b.w.Load()
	switch stateOf(w) {
	case open:
		return time.Duration(max(openedAt(w)+cooldown-now, 0)) * time.Millisecond
	case halfOpen:
		return time.Second
	}
	return 0
}

// epoch anchors the breakers' clock.
var epoch = time.Now()

func nowMs() int64 { return time.Since(epoch).Milliseconds() }

// Stage is the circuit-breaker middleware: a pipeline.VetStage that keeps backends whose
// breaker is open out of the request's choice, and a pipeline.CompletionStage that counts the
// request against the backend it went to. One Stage serves every router that lists its
// middleware.
type Stage struct {
	name     string
	opts     config.CircuitBreakerOptions
	cooldown int64               // ms
	byKey    map[string]*Breaker // by pipeline.Backend.Key
	breakers map[*pipeline.Backend]*Breaker
	// slot keeps, per request, the breaker of the backend it was let through to: a
	// *Breaker, or a *probe when it holds that breaker's probe. A field, so that two
	// breaker middlewares on one router keep apart.
	slot pipeline.Slot
	now  func() int64 // ms; a field so that tests can drive the clock
}

// New returns the stage of circuit-breaker middleware name with options o, over the backends
// of services (those its routers can send requests to). The state of each backend's breaker
// is that of the breaker prev (the stage of the configuration being replaced, or nil) had
// for the same server (pipeline.Backend.Key), however its URL is now written: a reload does
// not forget which servers are failing, and o applies to them from now on.
func New(name string, o config.CircuitBreakerOptions, services []*pipeline.Service, prev *Stage) *Stage {
	s := &Stage{
		name:     name,
		opts:     o,
		cooldown: max(o.Cooldown.Milliseconds(), 1),
		byKey:    map[string]*Breaker{},
		breakers: map[*pipeline.Backend]*Breaker{},
		now:      nowMs,
	}
	if prev != nil {
		s.now = prev.now
	}
	for _, svc := range services {
		for _, b := range svc.Backends {
			var br *Breaker
			if prev != nil {
				br = prev.byKey[b.Key]
			}
			switch {
			case br == nil:
				br = newBreaker(new(atomic.Uint64), svc.Name, b.URL)
			case br.backend != b.URL:
				// The server written another way: shown as written now, in the state it is in.
				br = newBreaker(br.w, svc.Name, b.URL)
			}
			s.byKey[b.Key] = br
			s.breakers[b] = br
		}
	}
	return s
}

// Name returns the middleware's name.
func (s *Stage) Name() string { return s.name }

// Breakers returns the stage's breakers sorted by service and backend, for metrics.
func (s *Stage) Breakers() []*Breaker {
	out := make([]*Breaker, 0, len(s.byKey))
	for _, b := range s.byKey {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].service != out[j].service {
			return out[i].service < out[j].service
		}
		return out[i].backend < out[j].backend
	})
	return out
}

// Service returns the name of the service of b's backend.
func (b *Breaker) Service() string { return b.service }

// Backend returns the URL of b's backend as configured.
func (b *Breaker) Backend() string { return b.backend }

// LoopSafe implements pipeline.LoopSafe: a breaker's state is an atomic word, read at the
// backend choice and updated at completion; only its rare transitions log a line.
func (s *Stage) LoopSafe() bool { return true }

// errOpen is the answer of a request that found every backend open: 503, which the OpenAI and
// Anthropic SDKs retry after its Retry-After.
var errOpen = consumer.NewAnswer(503, "server_error", "overloaded_error", "circuit_open",
	"every backend of this service is failing: the gateway stopped sending it requests for now; retry after the time given in Retry-After")

// OnVet implements pipeline.VetStage: the request may go to b unless b's breaker is open
// (or half-open with its probe in flight). When the request was let through to another
// backend before and is choosing again, that backend's try is over and counts as the
// pipeline judged it (RequestCtx.LastTry).
func (s *Stage) OnVet(rc *pipeline.RequestCtx, b *pipeline.Backend) error {
	if prev := rc.Get(&s.slot); prev != nil {
		s.settle(prev, tried(rc.LastTry()))
		rc.Set(&s.slot, nil)
	}
	br := s.breakers[b]
	if br == nil {
		return nil
	}
	if stateOf(br.w.Load()) == closed {
		// The common case, without reading the clock.
		rc.Set(&s.slot, br)
		return nil
	}
	now := s.now()
	switch br.admit(now, s.cooldown) {
	case pass:
		rc.Set(&s.slot, br)
		return nil
	case firstProbe:
		slog.Info("circuit breaker half-open: one request probes the backend", "middleware", s.name, "service", br.service, "backend", br.backend)
		rc.Set(&s.slot, &br.probeTag)
		return nil
	case passProbe:
		rc.Set(&s.slot, &br.probeTag)
		return nil
	}
	return s.refusal(rc, now)
}

// refusal answers a request whose choice found no backend to take it: 503 with Retry-After,
// the time until the first breaker of the service takes a request again.
func (s *Stage) refusal(rc *pipeline.RequestCtx, now int64) error {
	wait := time.Duration(-1)
	if svc := rc.Service(); svc != nil {
		for _, b := range svc.Backends {
			if br := s.breakers[b]; br != nil {
				if d := br.retryAfter(now, s.cooldown); d > 0 && (wait < 0 || d < wait) {
					wait = d
				}
			}
		}
	}
	r := errOpen.Reply(rc)
	r.RetryAfter = int(max((wait+time.Second-1)/time.Second, 1))
	return r
}

// OnComplete implements pipeline.CompletionStage: the request counts against the backend it
// was let through to last: by how that backend's try ended when the request left it, else
// by the request's outcome.
func (s *Stage) OnComplete(rc *pipeline.RequestCtx) {
	v := rc.Get(&s.slot)
	if v == nil {
		return
	}
	if t := rc.LastTry(); t != pipeline.TryInFlight {
		s.settle(v, tried(t))
		return
	}
	s.settle(v, ended(rc.Outcome()))
}

// tried maps the pipeline's verdict on a try the request left to a result (a verdict of
// TryInFlight, which a try the request left never has, judges nobody).
func tried(t pipeline.TryVerdict) result {
	switch t {
	case pipeline.TryFailed:
		return failed
	case pipeline.TrySucceeded:
		return succeeded
	}
	return neither
}

// ended returns the result of a request that ended with o at the backend it was let through
// to last.
func ended(o *pipeline.Outcome) result {
	switch {
	case o.Canceled:
		return neither
	case o.UpstreamError != "":
		return failed
	case o.GatewayReply:
		return neither
	case pipeline.ServerFailure(o.Status):
		return failed
	}
	return succeeded
}

// settle records r against the breaker kept in a request slot.
func (s *Stage) settle(v any, r result) {
	var br *Breaker
	isProbe := false
	switch x := v.(type) {
	case *Breaker:
		br = x
	case *probe:
		br, isProbe = x.b, true
	}
	if br == nil {
		return
	}
	if r == succeeded && !isProbe && br.w.Load() == pack(closed, false, 0, 0) {
		return // nothing to count, and no clock to read
	}
	switch br.record(r, isProbe, s.now(), &s.opts) {
	case open:
		slog.Warn("circuit breaker opened: the backend is kept out of requests", "middleware", s.name, "service", br.service, "backend", br.backend, "cooldown", s.opts.Cooldown)
	case closed:
		slog.Info("circuit breaker closed: the backend takes requests again", "middleware", s.name, "service", br.service, "backend", br.backend)
	}
}
