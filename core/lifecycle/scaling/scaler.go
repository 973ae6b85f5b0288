// Package scaling runs a service's replicas to follow its load and holds its requests while
// none is ready: scale from zero with cold-start buffering.
//
// # Decisions
//
// The number of replicas asked for is Desired's formula over the requests in flight and the
// requests queued, recomputed at every event that changes them (a request arrives, is
// admitted, completes, leaves the queue) and at every replica that becomes ready: there is no
// polling loop. More replicas than are running or starting are started at once. Fewer are
// stopped only when the formula has asked for fewer for ScaleDownDelay (the most it asked for
// meanwhile is kept), and the last one only when the service has been idle (nothing in flight
// or queued) for ScaleToZeroAfter. A stopped replica first leaves the balancer's choice, then
// its requests in flight finish (those sent under a configuration a reload replaced too, however
// long they take), then its process is stopped.
//
// # The buffer
//
// The ready replicas take ContainerConcurrency requests each; a request beyond that (every
// request, while none is ready) waits in a bounded FIFO queue. It is admitted the moment a
// replica becomes ready or a request of the service completes, in the order of arrival. It
// keeps its own deadline, BufferTimeout from its arrival in the gateway; a full queue refuses
// at once (503), a wait past the deadline gets 504, and a client that leaves is taken out of
// the queue at once. Both answers are OpenAI-shaped errors.
//
// # Readiness
//
// A started replica is ready when GET ReadyPath on its port answers 2xx: it is probed every
// ReadyInterval from its start, for at most StartupTimeout. A replica whose process ends is
// taken out and started again when the load still asks for it, after a backoff of the whole
// service (restartDelay) that a command failing at once cannot outrun by trying every slot,
// nor a command that crashes soon after it is ready (stableReady).
//
// # Ports
//
// Each replica slot of the exec executor has a loopback port of its own for the scaler's life
// (the service's servers are those ports). While no replica of the slot runs, the scaler holds
// the port with a listener of its own (portHold), so that no other process takes it meanwhile;
// it lets the port go just before the replica starts and takes it back once the replica's
// process has ended. A port it could not take back is tried again at the slot's next start,
// which fails (ScalingFailedPortTaken) while another process holds it: that slot alone is then
// left out for a backoff of its own (portTaken), the other slots starting as usual, as the
// port is the slot's fault and not the command's.
package scaling

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Options configure a Scaler ([services.<name>.scaling], docs/config.md). The fields of
// Policy (Min, Concurrency, Utilization, Buffer, ScaleDownDelay, ScaleToZeroAfter,
// BufferSize, BufferTimeout, KeepAlive) can change while the scaler runs (SetPolicy); the
// others define its replicas, and a change of any of them takes a new scaler.
type Options struct {
	Service                          string
	Min, Max, Concurrency            int
	Utilization                      float64
	Buffer                           bool
	ScaleDownDelay, ScaleToZeroAfter time.Duration
	BufferSize                       int
	BufferTimeout                    time.Duration
	KeepAlive                        time.Duration // between the SSE comments of a waiting streaming caller
	ReadyPath                        string
	ReadyInterval, StartupTimeout    time.Duration
	StopTimeout                      time.Duration
	// Executor starts local replicas (exec); Kube, when set instead, scales a Deployment.
	Executor Executor
	Kube     *Kube
	Log      *slog.Logger
	// Mask returns a text the scaler logs (an error that quotes the command it ran or the URL
	// it requested, a Deployment's name) with every value the configuration took from the
	// environment shown as its ${NAME} reference; nil logs the text as it is.
	Mask func(string) string
}

// Policy is how a scaler follows the load and buffers its requests: the keys of
// [services.<name>.scaling] that a reload changes in place, its replicas running. Its fields
// are those of Options of the same names.
type Policy struct {
	Min, Concurrency                 int
	Utilization                      float64
	Buffer                           bool
	ScaleDownDelay, ScaleToZeroAfter time.Duration
	BufferSize                       int
	BufferTimeout                    time.Duration
	KeepAlive                        time.Duration
}

// Policy returns o's policy fields.
func (o Options) Policy() Policy {
	return Policy{
		Min: o.Min, Concurrency: o.Concurrency, Utilization: o.Utilization, Buffer: o.Buffer,
		ScaleDownDelay: o.ScaleDownDelay, ScaleToZeroAfter: o.ScaleToZeroAfter,
		BufferSize: o.BufferSize, BufferTimeout: o.BufferTimeout, KeepAlive: o.KeepAlive,
	}
}

// setPolicy sets o's policy fields to p's.
func (o *Options) setPolicy(p Policy) {
	o.Min, o.Concurrency, o.Utilization, o.Buffer = p.Min, p.Concurrency, p.Utilization, p.Buffer
	o.ScaleDownDelay, o.ScaleToZeroAfter = p.ScaleDownDelay, p.ScaleToZeroAfter
	o.BufferSize, o.BufferTimeout, o.KeepAlive = p.BufferSize, p.BufferTimeout, p.KeepAlive
}

// Gateway errors of the buffer.
var (
	ErrBufferFull    = &pipeline.GatewayError{Status: 503, Type: pipeline.ServerError, Code: "cold_start_queue_full", Message: "the service is starting replicas and its request buffer is full; retry later", RetryAfter: 1}
	ErrBufferTimeout = &pipeline.GatewayError{Status: 504, Type: pipeline.ServerError, Code: "cold_start_timeout", Message: "no replica of the service could take the request within its buffer_timeout"}
	ErrNoReplica     = &pipeline.GatewayError{Status: 503, Type: pipeline.ServerError, Code: "no_ready_replica", Message: "no replica of the service is ready; one is starting", RetryAfter: 1}
)

// Replica states.
const (
	stateStopped  = "stopped"
	stateStarting = "starting"
	stateReady    = "ready"
	stateStopping = "stopping"
)

// restartBackoff is how long the service waits, after a replica failed to start or died,
// before it starts a replica again, so that a command that fails at once does not spin. The
// wait holds for every slot (a failing command fails on all of them), and doubles with each
// further failure in a row, up to maxRestartBackoff. A slot found with its port taken is no
// such failure: it waits alone, by the same rule over its own port failures in a row
// (portTaken).
//
// Failures are in a row until a replica that became ready after the last of them has stayed
// ready for stableReady (it ran on, it was stopped by a scale-down, or it ended then); one
// that was already serving when another failed shows nothing of the command's state since,
// and would reset the count of a slot that crash-loops beside it: one that ends sooner,
// a command that crashes on its first requests say, is one more failure in a row, so that a
// crash loop that passes readiness backs off as one that does not. They are forgotten too once
// the last is forgetFailures old, twice the longest wait: a failure after a quiet spell (the
// service scaled to zero, say) waits restartBackoff, not what the failures before the spell
// had come to.
const (
	restartBackoff    = time.Second
	maxRestartBackoff = 30 * time.Second
	stableReady       = 10 * time.Second
	forgetFailures    = 2 * maxRestartBackoff
)

// restartDelay is the wait after the n-th failure in a row (n >= 1).
func restartDelay(n int) time.Duration {
	if n > 6 { // 1 s << 5 = 32 s is past the cap already
		return maxRestartBackoff
	}
	return min(restartBackoff<<(n-1), maxRestartBackoff)
}

// maxProbeBody is how much of a readiness probe's answer is read, in bytes; the rest is
// discarded with its connection.
const maxProbeBody = 64 << 10

// probeTimeout bounds one readiness probe.
const probeTimeout = time.Second

// newProbeClient returns the client of a scaler's readiness probes, sent every interval: a
// transport of its own, not http.DefaultTransport, whose idle connections would outlive the
// scaler by 90 s and are shared with the rest of the process. A connection stays idle for two
// intervals (at least probeTimeout), long enough for the next probe of a starting replica to
// reuse it and short enough that one to a replica no longer probed (ready, or stopped) goes
// soon after; the scaler's Close closes those left. A reload that keeps the scaler keeps its
// client; one that replaces it gives the new scaler new ports, where no connection of the
// old one could be reused.
func newProbeClient(interval time.Duration) *http.Client {
	return &http.Client{
		Timeout: probeTimeout,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 1, // a replica has one probe at a time
			IdleConnTimeout:     max(2*interval, probeTimeout),
		},
	}
}

type replica struct {
	slot  int
	state string
	gen   uint64 // bumped when the replica is stopped: its start goroutine's view is stale
	proc  Process
	// failedAt is when its replica last failed to start or died, or its port was last found
	// taken (zero: never).
	failedAt time.Time
	readyAt  time.Time // when its replica last became ready
	// portRetryAt is when the slot may be tried again after its port was found taken, and
	// portFailures how many of its starts in a row found it so (zero once its port is free
	// at a start).
	portRetryAt  time.Time
	portFailures int
	// hold is the slot's port held while no replica of the slot runs (stopped), nil while
	// one starts or runs, or when another process took the port.
	hold *portHold
	// launched is closed by the start goroutine once its process is in proc, or stopped (or
	// never started, the replica being stopped first); nil before the first start. Close and
	// a stop wait for it: a process whose start was under way is not left running.
	launched chan struct{}
}

// waiter is a request in the queue.
type waiter struct {
	ch       chan struct{} // receives when admitted
	b        *bound        // the backends it will choose from
	deadline time.Time     // BufferTimeout after the request's arrival, as it was when queued
	admitted bool
	gone     bool
}

// Scaler is a scaled service's replicas and buffer. It implements pipeline.ServiceHook. Make
// it with New, give it the service's backends with Bind, start it with Start, stop it with
// Close.
type Scaler struct {
	o     Options // its Policy fields are read and written with mu held (SetPolicy)
	ports []int
	m     *metrics.Scaling
	probe *http.Client
	slot  pipeline.Slot // holds the request's *bound once it is admitted
	held  pipeline.Slot // holds the waiter of a streaming caller between keep-alives

	mu  sync.Mutex
	cur *bound // the backends of the snapshot in force
	// earlier are the backends of snapshots a reload replaced that requests still choose from:
	// a request holds its snapshot however long it takes to reach the service (a model's
	// admission queue, a retry's backoff, the buffer), and picks from that snapshot's
	// backends, which must say which replicas are ready then.
	earlier   []*bound
	reps      []*replica
	ready     int
	starting  int
	inFlight  int
	queue     []*waiter // FIFO; gone waiters are skipped
	queued    int
	target    int
	desired   int
	downTimer *time.Timer
	downArmed bool
	windowMax int
	lastBusy  time.Time
	retry     *time.Timer
	// restartAt is when a replica may start again after a failure, failures the failures in a
	// row (each counted once per backoff) and lastFailure when the last one was.
	restartAt   time.Time
	failures    int
	lastFailure time.Time
	// stableReady and forgetFailures are the constants of the same names (tests shorten them).
	stableReady, forgetFailures time.Duration
	started                     bool
	closed                      bool

	kube *kubeRunner // the kube executor's writer and watcher (nil for exec)
	// stops counts the stops of processes no replica holds any more (one that failed its
	// start or exited), which Close waits for: each is added under mu before Close sets closed.
	stops sync.WaitGroup

	// readyHook, when set, is called with a replica's slot once it passes its readiness
	// probe and before any request goes to it (SetReadyHook).
	readyHook atomic.Pointer[func(slot int)]
}

// SetReadyHook makes f (nil: nothing) called with a replica's slot when the replica has
// passed its readiness probe, before the requests the buffer holds are admitted to it: the
// snapshot in force polls the replica's worker observation there, so that a model router
// does not leave a ready replica out for the state it reported while it started. f runs on
// the replica's own goroutine and may block for a poll.
func (s *Scaler) SetReadyHook(f func(slot int)) {
	if f == nil {
		s.readyHook.Store(nil)
		return
	}
	s.readyHook.Store(&f)
}

// Serving reports whether replica slot i has a replica that passed its readiness probe and
// has not begun to stop; for the kube executor (one server, the Kubernetes Service) whether
// any replica is ready. A workers group polls only such slots (workers.Group.SetServing).
func (s *Scaler) Serving(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kube != nil {
		return s.ready > 0
	}
	return i >= 0 && i < len(s.reps) && s.reps[i].state == stateReady
}

// New returns the scaler of a service with o.Max replica slots, each on a port of its own.
func New(o Options) (*Scaler, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Scaler{
		o: o, m: metrics.ForScaling(o.Service), probe: newProbeClient(o.ReadyInterval), lastBusy: time.Now(),
		stableReady: stableReady, forgetFailures: forgetFailures,
	}
	if o.Kube != nil {
		s.kube = newKubeRunner(o.Kube, s.kubeReady, o.Log)
		s.kube.mask = o.Mask
		return s, nil
	}
	lns, err := reservePorts(o.Max)
	if err != nil {
		return nil, err
	}
	for i, ln := range lns {
		s.ports = append(s.ports, ln.Addr().(*net.TCPAddr).Port)
		s.reps = append(s.reps, &replica{slot: i, state: stateStopped, hold: newPortHold(ln)})
	}
	return s, nil
}

// shown is s as the scaler logs it (Options.Mask).
func (s *Scaler) shown(text string) string {
	if s.o.Mask == nil {
		return text
	}
	return s.o.Mask(text)
}

// kubeReady takes the ready replicas the kube executor's watch counted.
func (s *Scaler) kubeReady(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || n == s.ready {
		return
	}
	s.ready = n
	s.starting = max(s.target-n, 0)
	s.setAllDown(n == 0)
	s.dispatch()
	s.recompute()
}

// URLs returns the servers of the service: one per replica slot, http://127.0.0.1:<port>.
func (s *Scaler) URLs() []string {
	if s.kube != nil {
		return []string{s.o.Kube.URL}
	}
	out := make([]string, len(s.ports))
	for i, p := range s.ports {
		out[i] = "http://127.0.0.1:" + strconv.Itoa(p)
	}
	return out
}

// bound is one snapshot's backends of the service, one per replica slot, kept in step with
// the replicas: those of the snapshot in force, and those of a replaced one while a request
// that entered the scaler with them has not completed, or one of them carries a request
// counted nowhere else.
type bound struct {
	backends []*pipeline.Backend
	refs     int // requests that entered with these backends (queued or admitted), not completed
}

// busy reports whether a request is in flight on one of e's backends that keeps its own
// count: one that shares the count of the backend in force for its slot (the same replica,
// balancer.State) is counted there.
func (e *bound) busy(cur *bound) bool {
	for i, b := range e.backends {
		if cur != nil && i < len(cur.backends) && b.LB.SharesState(cur.backends[i].LB) {
			continue
		}
		if b.LB.Active() > 0 {
			return true
		}
	}
	return false
}

// boundOf returns the bound of backends, the backends a request entering the scaler chooses
// from: the snapshot in force's, or a replaced snapshot's. A replaced snapshot's backends that
// no request used since the reload were let go, and are marked afresh, since a request may
// hold its snapshot for any time before it reaches the service. s.mu is held.
func (s *Scaler) boundOf(backends []*pipeline.Backend) *bound {
	if s.cur != nil && sameBackends(s.cur.backends, backends) {
		return s.cur
	}
	for _, e := range s.earlier {
		if sameBackends(e.backends, backends) {
			return e
		}
	}
	e := &bound{backends: backends}
	s.mark(backends)
	s.earlier = append(s.earlier, e)
	return e
}

// sameBackends reports whether a and b are one snapshot's backends: each snapshot makes its own.
func sameBackends(a, b []*pipeline.Backend) bool {
	return len(a) == len(b) && (len(a) == 0 || a[0] == b[0])
}

// release ends a request's use of b. s.mu is held.
func (s *Scaler) release(b *bound) {
	b.refs--
	if b.refs == 0 && b != s.cur {
		s.pruneEarlier()
	}
}

// mark marks each of backends down unless its replica is ready. s.mu is held.
func (s *Scaler) mark(backends []*pipeline.Backend) {
	if s.kube != nil {
		for _, b := range backends {
			b.LB.SetDown(s.ready == 0)
		}
		return
	}
	for i, r := range s.reps {
		if i < len(backends) {
			backends[i].LB.SetDown(r.state != stateReady)
		}
	}
}

// setDown marks the backend of slot down or up, in the snapshot in force and in the replaced
// ones that requests still choose from. s.mu is held.
func (s *Scaler) setDown(slot int, down bool) {
	if s.cur != nil && slot < len(s.cur.backends) {
		s.cur.backends[slot].LB.SetDown(down)
	}
	s.pruneEarlier()
	for _, e := range s.earlier {
		if slot < len(e.backends) {
			e.backends[slot].LB.SetDown(down)
		}
	}
}

// pruneEarlier lets go of the replaced snapshots' backends that no request uses. s.mu is held.
func (s *Scaler) pruneEarlier() {
	keep := s.earlier[:0]
	for _, e := range s.earlier {
		if e.refs > 0 || e.busy(s.cur) {
			keep = append(keep, e)
		}
	}
	clear(s.earlier[len(keep):])
	s.earlier = keep
}

// slotActive is the number of requests in flight on the replica of slot, over the snapshot in
// force and the replaced ones. Their backends for one replica normally share one count
// (balancer.State), which is taken once; a backend with a count of its own adds it. s.mu is
// held.
func (s *Scaler) slotActive(slot int) int64 {
	var n int64
	var cur *balancer.Backend
	if s.cur != nil && slot < len(s.cur.backends) {
		cur = s.cur.backends[slot].LB
		n += cur.Active()
	}
	for i, e := range s.earlier {
		if slot >= len(e.backends) {
			continue
		}
		b := e.backends[slot].LB
		counted := cur != nil && b.SharesState(cur)
		for _, o := range s.earlier[:i] {
			counted = counted || slot < len(o.backends) && b.SharesState(o.backends[slot].LB)
		}
		if !counted {
			n += b.Active()
		}
	}
	return n
}

// setAllDown marks every backend down or up, as setDown does. s.mu is held.
func (s *Scaler) setAllDown(down bool) {
	if s.cur == nil {
		return
	}
	for i := range s.cur.backends {
		s.setDown(i, down)
	}
}

// Bind makes backends (one per slot, in URLs order) the service's backends in force: each is
// marked down unless its replica is ready. A reload that takes the scaler over binds the new
// snapshot's backends when that snapshot goes in force, not before: a configuration that is
// refused leaves the scaler on the backends that still serve.
func (s *Scaler) Bind(backends []*pipeline.Backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.earlier = append(s.earlier, s.cur)
	}
	s.cur = &bound{backends: backends}
	s.mark(backends)
	s.pruneEarlier()
}

// Metrics returns the scaler's metrics, for the configurations that have the scaler to hold
// while in force (metrics.InForce).
func (s *Scaler) Metrics() *metrics.Scaling { return s.m }

// Start puts the scaler in force (its gauges become the service's) and begins running
// replicas: min_replicas at once. Idempotent.
func (s *Scaler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	// In force from here: the service's gauges are this scaler's, not those of the one it
	// replaces, which goes on writing its own while it stops.
	s.m.InForce()
	if s.started {
		return
	}
	s.started = true
	if s.kube != nil {
		s.kube.start()
	}
	s.recompute()
}

// SetPolicy makes p the scaler's policy, its replicas running: a reload that changes only
// policy keys takes the scaler over and applies them here when its configuration goes in
// force. The target is recomputed at once (a larger Min starts replicas, a smaller one may
// stop some after ScaleDownDelay), and the queue admits what a larger capacity or a buffer
// turned off lets through. A queue longer than a smaller BufferSize keeps its waiters (new
// requests are refused until it is shorter); a request already queued keeps the deadline it
// was given; a scale-down delay under way starts again with the new ScaleDownDelay.
func (s *Scaler) SetPolicy(p Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.o.Policy() == p {
		return
	}
	s.o.setPolicy(p)
	if s.closed {
		return
	}
	s.cancelDown()
	s.dispatch()
	s.recompute()
}

// capacity is how many requests the ready replicas take at once.
func (s *Scaler) capacity() int { return s.ready * s.o.Concurrency }

// OnService implements pipeline.ServiceHook: the request is admitted when the ready replicas
// have room and nobody waits; otherwise it waits in the queue (or is refused).
func (s *Scaler) OnService(rc *pipeline.RequestCtx) error {
	if w, _ := rc.Get(&s.held).(*waiter); w != nil {
		return s.wait(rc, w) // a held streaming caller, back from a keep-alive
	}
	s.mu.Lock()
	if s.closed {
		// A retired scaler: its replicas are stopped, and the request finds no backend. Its
		// snapshot's backends may be ones no request used when the scaler closed, which were
		// not marked down then.
		s.mark(rc.Service().Backends)
		s.mu.Unlock()
		return nil
	}
	s.lastBusy = time.Now()
	if !s.o.Buffer {
		if s.ready == 0 {
			s.queued++ // counted for the formula while it decides, not kept
			s.recompute()
			s.queued--
			s.publish()
			s.mu.Unlock()
			s.m.Rejected(metrics.ScalingNoReplica)
			return ErrNoReplica
		}
		s.admit(rc, s.boundOf(rc.Service().Backends))
		s.mu.Unlock()
		return nil
	}
	if s.queued == 0 && s.inFlight < s.capacity() {
		s.admit(rc, s.boundOf(rc.Service().Backends))
		s.mu.Unlock()
		return nil
	}
	if s.queued >= s.o.BufferSize {
		s.mu.Unlock()
		s.m.Rejected(metrics.ScalingQueueFull)
		return ErrBufferFull
	}
	w := s.enqueue(rc)
	s.mu.Unlock()
	return s.wait(rc, w)
}

// enqueue puts rc at the end of the queue. s.mu is held.
func (s *Scaler) enqueue(rc *pipeline.RequestCtx) *waiter {
	w := &waiter{ch: make(chan struct{}, 1), b: s.boundOf(rc.Service().Backends), deadline: rc.Start().Add(s.o.BufferTimeout)}
	w.b.refs++
	s.queue = append(s.queue, w)
	s.queued++
	s.recompute()
	return w
}

// WouldWait implements pipeline.HoldHook: a request waits when the buffer queues it (not when
// it is full, which refuses it at once). One that waits is queued now, before the head of its
// event stream goes out, so that callers arriving meanwhile find the queue as it will be and
// are refused, before any byte, when it is full; OnService then waits on its place.
func (s *Scaler) WouldWait(rc *pipeline.RequestCtx) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.o.Buffer || s.closed || s.queued == 0 && s.inFlight < s.capacity() || s.queued >= s.o.BufferSize {
		return s.o.KeepAlive, false
	}
	s.lastBusy = time.Now()
	rc.Set(&s.held, s.enqueue(rc))
	return s.o.KeepAlive, true
}

// admit counts rc in flight, choosing from the backends of b. s.mu is held.
func (s *Scaler) admit(rc *pipeline.RequestCtx, b *bound) {
	s.inFlight++
	b.refs++
	rc.Set(&s.slot, b)
	s.recompute()
}

// wait holds a queued request until it is admitted, its deadline passes or its client
// leaves.
func (s *Scaler) wait(rc *pipeline.RequestCtx, w *waiter) error {
	t := time.NewTimer(max(time.Until(w.deadline), 0))
	defer t.Stop()
	var why error
	select {
	case <-w.ch:
		rc.Set(&s.held, (*waiter)(nil))
		rc.Set(&s.slot, w.b)
		return nil
	case <-rc.KeepAliveTick():
		rc.Set(&s.held, w)
		return pipeline.ErrStillWaiting
	case <-rc.Done():
		why = pipeline.ErrClientGone
	case <-t.C:
		why = ErrBufferTimeout
	}
	rc.Set(&s.held, (*waiter)(nil))
	s.mu.Lock()
	if w.admitted {
		// Admitted as it gave up: it holds its place in flight until it completes.
		s.mu.Unlock()
		rc.Set(&s.slot, w.b)
		return why
	}
	s.leave(w)
	s.recompute()
	s.mu.Unlock()
	if why == ErrBufferTimeout {
		s.m.Rejected(metrics.ScalingTimeout)
	}
	return why
}

// leave takes w, a waiter that gave up, out of the queue. It is counted out at once; the
// waiters that gave up are dropped from the queue once they are as many as those still
// waiting, so that the queue holds at most about twice buffer_size waiters even while no
// replica gets ready to admit its head. s.mu is held.
func (s *Scaler) leave(w *waiter) {
	w.gone = true
	s.queued--
	s.release(w.b)
	if len(s.queue) <= 2*s.queued {
		return
	}
	keep := s.queue[:0]
	for _, q := range s.queue {
		if !q.gone {
			keep = append(keep, q)
		}
	}
	clear(s.queue[len(keep):])
	s.queue = keep
}

// OnServiceDone implements pipeline.ServiceHook: an admitted request gives its place to the
// head of the queue.
func (s *Scaler) OnServiceDone(rc *pipeline.RequestCtx) {
	if w, _ := rc.Get(&s.held).(*waiter); w != nil {
		// A held streaming caller that ended between keep-alives: out of the queue, or, when
		// it was admitted meanwhile, out of flight.
		rc.Set(&s.held, (*waiter)(nil))
		s.mu.Lock()
		if w.admitted {
			s.inFlight--
			s.release(w.b)
			s.dispatch()
		} else if !w.gone {
			s.leave(w)
		}
		s.recompute()
		s.mu.Unlock()
		return
	}
	b, _ := rc.Get(&s.slot).(*bound)
	if b == nil {
		return
	}
	s.mu.Lock()
	s.inFlight--
	s.release(b)
	s.lastBusy = time.Now()
	s.dispatch()
	s.recompute()
	s.mu.Unlock()
}

// dispatch admits queued requests, oldest first, while the ready replicas have room. s.mu is
// held.
func (s *Scaler) dispatch() {
	for s.queued > 0 && (s.inFlight < s.capacity() || !s.o.Buffer) {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if w.gone {
			continue
		}
		w.admitted = true
		s.queued--
		s.inFlight++
		w.ch <- struct{}{}
	}
	if len(s.queue) == 0 {
		s.queue = s.queue[:0:0] // let the backing array go once drained
	}
}

// recompute applies the formula: up at once, down after the delays. s.mu is held.
func (s *Scaler) recompute() {
	defer s.publish()
	if !s.started || s.closed {
		return
	}
	d := Desired(s.inFlight, s.queued, s.o.Concurrency, s.o.Utilization, s.o.Min, s.o.Max)
	s.desired = d
	switch {
	case d > s.target:
		s.cancelDown()
		s.setTarget(d)
	case d == s.target:
		s.cancelDown()
		s.reconcile()
	default:
		if !s.downArmed {
			s.downArmed, s.windowMax = true, d
			s.armDown(s.o.ScaleDownDelay)
		} else {
			s.windowMax = max(s.windowMax, d)
		}
		s.reconcile()
	}
}

func (s *Scaler) armDown(d time.Duration) {
	if s.downTimer == nil {
		s.downTimer = time.AfterFunc(d, s.downFired)
	} else {
		s.downTimer.Reset(d)
	}
}

func (s *Scaler) cancelDown() {
	if s.downArmed {
		s.downArmed = false
		s.downTimer.Stop()
	}
}

// downFired ends a scale-down delay: the replicas go down to the most the formula asked for
// during it, and to zero only after the idle time.
func (s *Scaler) downFired() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.downArmed || s.closed {
		return
	}
	s.downArmed = false
	d := Desired(s.inFlight, s.queued, s.o.Concurrency, s.o.Utilization, s.o.Min, s.o.Max)
	to := max(s.windowMax, d, s.o.Min)
	if to == 0 && s.target > 0 {
		if idle := time.Since(s.lastBusy); idle < s.o.ScaleToZeroAfter {
			to = 1
			s.downArmed, s.windowMax = true, 0
			s.armDown(s.o.ScaleToZeroAfter - idle)
		}
	}
	if to < s.target {
		s.setTarget(to)
	}
	if !s.downArmed && d < s.target {
		// Still more than the load asks for: the next delay starts now.
		s.downArmed, s.windowMax = true, d
		s.armDown(s.o.ScaleDownDelay)
	}
	s.publish()
}

// setTarget sets how many replicas run and starts or stops them. s.mu is held.
func (s *Scaler) setTarget(n int) {
	if n != s.target {
		s.o.Log.Info("scaling", "service", s.o.Service, "from", s.target, "to", n, "in_flight", s.inFlight, "queued", s.queued)
	}
	s.target = n
	s.reconcile()
}

// reconcile starts or stops replicas until target run (starting or ready). s.mu is held.
func (s *Scaler) reconcile() {
	if !s.started || s.closed {
		return
	}
	if s.kube != nil {
		s.starting = max(s.target-s.ready, 0)
		s.kube.setTarget(s.target)
		return
	}
	running := s.starting + s.ready
	if round := time.Now(); running < s.target && round.Before(s.restartAt) {
		s.retryAt(s.restartAt) // a replica failed lately: none starts before the backoff ends
	} else {
		for running < s.target {
			r := s.nextToStart(round)
			if r == nil {
				break
			}
			if s.startReplica(r, round) {
				running++
			}
		}
		if running < s.target {
			// The free slots were started: a slot whose port was found taken waits.
			if t := s.nextPortRetry(round); !t.IsZero() {
				s.retryAt(t)
			}
		}
	}
	for running > s.target {
		r := s.victim()
		if r == nil {
			break
		}
		s.stopReplica(r)
		running--
	}
}

// nextToStart chooses the stopped replica to start at round: one that never failed, or else
// the one that failed longest ago; none whose slot waits after its port was found taken
// (portRetryAt), as one that the reconcile under way found so does. s.mu is held.
func (s *Scaler) nextToStart(round time.Time) *replica {
	var best *replica
	for _, r := range s.reps {
		if s.startable(r, round) && (best == nil || r.failedAt.Before(best.failedAt)) {
			best = r
		}
	}
	return best
}

// startable reports whether r may be started at round: it is stopped, and its slot does not
// wait after its port was found taken. s.mu is held.
func (s *Scaler) startable(r *replica, round time.Time) bool {
	return r.state == stateStopped && !round.Before(r.portRetryAt)
}

// nextPortRetry is the earliest time after round when a stopped slot that waits after its port
// was found taken may be tried again (zero: none waits). s.mu is held.
func (s *Scaler) nextPortRetry(round time.Time) time.Time {
	var next time.Time
	for _, r := range s.reps {
		if r.state == stateStopped && round.Before(r.portRetryAt) && (next.IsZero() || r.portRetryAt.Before(next)) {
			next = r.portRetryAt
		}
	}
	return next
}

// portTaken notes that r's port was found taken by another process at round (err, the failed
// listen) and logs it: the slot is left out until its own backoff ends, restartDelay of its
// port failures in a row (forgotten, as the service's failures are, once the last is
// forgetFailures old), while the other slots start as usual and the service's backoff is left
// as it was: another process's socket says nothing of the command. s.mu is held.
func (s *Scaler) portTaken(r *replica, round time.Time, err error) {
	now := time.Now()
	// A slot whose port was found taken has not started since (a start finds its port free
	// and forgets the count), so failedAt is its last port failure.
	if now.Sub(r.failedAt) >= s.forgetFailures {
		r.portFailures = 0
	}
	r.failedAt = now
	r.portFailures++
	wait := restartDelay(r.portFailures)
	r.portRetryAt = now.Add(wait)
	msg := "scaling: replica port is taken by another process; this slot is tried again after its backoff"
	for _, o := range s.reps {
		if o != r && s.startable(o, round) {
			msg = "scaling: replica port is taken by another process; another slot is tried, this one again after its backoff"
			break
		}
	}
	s.o.Log.Warn(msg, "service", s.o.Service, "port", s.ports[r.slot], "retry_in", wait, "error", err)
	s.m.Failed(metrics.ScalingFailedPortTaken)
}

// backOff notes that r failed to start or died: no replica starts before the backoff ends.
// Replicas started together that fail together count as one failure. A replica that dies
// while ready is still ready here, and its own time ready counts (stableReady). s.mu is held.
func (s *Scaler) backOff(r *replica) {
	now := time.Now()
	r.failedAt = now
	if now.Before(s.restartAt) {
		s.lastFailure = now
		return
	}
	if now.Sub(s.lastFailure) >= s.forgetFailures || s.anyStable(now) {
		s.failures = 0
	}
	s.lastFailure = now
	s.failures++
	s.restartAt = now.Add(restartDelay(s.failures))
}

// stable reports whether r became ready after the last failure and has been so for
// stableReady: the command works, and the failures before are forgotten. s.mu is held.
func (s *Scaler) stable(r *replica, now time.Time) bool {
	return r.state == stateReady && r.readyAt.After(s.lastFailure) && now.Sub(r.readyAt) >= s.stableReady
}

// anyStable reports whether a replica is stable. s.mu is held.
func (s *Scaler) anyStable(now time.Time) bool {
	for _, r := range s.reps {
		if s.stable(r, now) {
			return true
		}
	}
	return false
}

// retryAt reconciles again at t (the end of a backoff after a failure).
func (s *Scaler) retryAt(t time.Time) {
	d := time.Until(t)
	if s.retry == nil {
		s.retry = time.AfterFunc(d, func() {
			s.mu.Lock()
			s.reconcile()
			s.publish()
			s.mu.Unlock()
		})
		return
	}
	s.retry.Reset(d)
}

// victim chooses the replica to stop: a starting one (the last started) before a ready one,
// and among ready ones the one with the fewest requests in flight, whichever snapshot sent
// them. s.mu is held.
func (s *Scaler) victim() *replica {
	var best *replica
	var bestActive int64
	for i := len(s.reps) - 1; i >= 0; i-- {
		r := s.reps[i]
		switch r.state {
		case stateStarting:
			return r
		case stateReady:
			a := s.slotActive(r.slot)
			if best == nil || a < bestActive {
				best, bestActive = r, a
			}
		}
	}
	return best
}

// startReplica starts r's process and its readiness probe at round, letting its port go first
// (false: another process holds the port; the replica is not started, and its slot waits,
// portTaken). s.mu is held.
func (s *Scaler) startReplica(r *replica, round time.Time) bool {
	if r.hold == nil {
		// Its port was not taken back after its last replica: taken now, it is free.
		h, err := holdPort(s.ports[r.slot])
		if err != nil {
			s.portTaken(r, round, err)
			return false
		}
		r.hold = h
	}
	r.portFailures = 0
	r.hold.release()
	r.hold = nil
	r.state = stateStarting
	r.gen++
	s.starting++
	r.launched = make(chan struct{})
	go s.run(r, r.gen, r.launched)
	return true
}

// holdAgain takes r's port back, its replica stopped and its process ended; a port another
// process took meanwhile is left to it (the slot's next start reports it). s.mu is held.
func (s *Scaler) holdAgain(r *replica) {
	if r.hold != nil || s.closed {
		return
	}
	r.hold, _ = holdPort(s.ports[r.slot])
}

// ended marks r stopped once the process of its replica (its generation gen) has ended, the
// replica having failed or been stopped: its port is held again, and the load may start the
// slot anew. s.mu is held.
func (s *Scaler) ended(r *replica, gen uint64) {
	if r.gen != gen || s.closed {
		return
	}
	r.state = stateStopped
	s.holdAgain(r)
	s.reconcile()
	s.publish()
}

// run starts the replica's process, probes it until ready, and watches it until it ends. It
// closes launched once the process is in r.proc, or stopped.
func (s *Scaler) run(r *replica, gen uint64, launched chan struct{}) {
	port := s.ports[r.slot]
	s.mu.Lock()
	stale := r.gen != gen // stopped (or the scaler closed) before this goroutine ran
	s.mu.Unlock()
	if stale {
		close(launched)
		return
	}
	p, err := s.o.Executor.Start(port)
	s.mu.Lock()
	if err != nil {
		s.o.Log.Warn("scaling: replica did not start", "service", s.o.Service, "port", port, "error", s.shown(err.Error()))
		s.m.Failed(metrics.ScalingFailedStart)
		s.failed(r, gen, stateStopped)
		s.mu.Unlock()
		close(launched)
		return
	}
	if r.gen != gen {
		// Stopped while it started.
		s.mu.Unlock()
		p.Stop(s.o.StopTimeout)
		close(launched)
		return
	}
	r.proc = p
	s.mu.Unlock()
	close(launched)

	if !s.probeUntilReady(r, gen, p, port) {
		s.mu.Lock()
		stale := r.gen != gen
		if !stale {
			select {
			case <-p.Exited():
				// The replica's output is not kept: say how it ended and where to look.
				s.o.Log.Warn("scaling: replica exited before it became ready; run its command by hand to see why",
					"service", s.o.Service, "port", port, "exit", exitStatus(p))
			default:
				s.o.Log.Warn("scaling: replica never became ready", "service", s.o.Service, "port", port, "startup_timeout", s.o.StartupTimeout)
			}
			s.m.Failed(metrics.ScalingFailedNotReady)
			s.failed(r, gen, stateStopping)
			s.stops.Add(1)
		}
		s.mu.Unlock()
		p.Stop(s.o.StopTimeout)
		if !stale {
			s.mu.Lock()
			s.ended(r, gen)
			s.mu.Unlock()
			s.stops.Done()
		}
		return
	}
	if f := s.readyHook.Load(); f != nil {
		(*f)(r.slot)
	}
	s.mu.Lock()
	if r.gen != gen {
		s.mu.Unlock()
		return // stopped meanwhile: its stop ends the process
	}
	r.state = stateReady
	r.readyAt = time.Now()
	s.starting--
	s.ready++
	s.setDown(r.slot, false)
	s.dispatch()
	s.recompute()
	s.mu.Unlock()

	<-p.Exited()
	s.mu.Lock()
	exited := r.gen == gen && r.state == stateReady
	if exited {
		s.o.Log.Warn("scaling: replica exited", "service", s.o.Service, "port", port,
			"ready_for", time.Since(r.readyAt).Round(time.Millisecond), "exit", exitStatus(p))
		s.m.Failed(metrics.ScalingFailedExited)
		s.backOff(r) // while r is ready: its time ready counts
		s.ready--
		s.setDown(r.slot, true)
		r.state, r.proc = stateStopping, nil
		s.recompute()
		s.stops.Add(1)
	}
	s.mu.Unlock()
	if exited {
		// The processes it started may outlive it (a wrapper script's server): they would
		// hold the slot's port and outlive the gateway. A replica stopped meanwhile is its
		// stop's to end.
		p.Stop(s.o.StopTimeout)
		s.mu.Lock()
		s.ended(r, gen)
		s.mu.Unlock()
		s.stops.Done()
	}
}

// failed takes a replica that could not start out, to be started again after a backoff. It
// goes to state: stopped when it has no process, stopping while its process is being stopped
// (its slot is not started again before the process has ended and left the port; ended).
// Its port is held again when it has no process. s.mu is held.
func (s *Scaler) failed(r *replica, gen uint64, state string) {
	if r.gen != gen {
		return
	}
	r.state, r.proc = state, nil
	s.starting--
	s.backOff(r)
	if state == stateStopped {
		s.holdAgain(r)
	}
	s.recompute()
}

// probeUntilReady probes the replica's ready path until it answers 2xx (true), or the process
// ends, the start times out or the replica is stopped (false).
func (s *Scaler) probeUntilReady(r *replica, gen uint64, p Process, port int) bool {
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, s.o.ReadyPath)
	deadline := time.Now().Add(s.o.StartupTimeout)
	tick := time.NewTicker(s.o.ReadyInterval)
	defer tick.Stop()
	for {
		if resp, err := s.probe.Get(url); err == nil {
			// Read to its end (bounded), so that the connection is kept for the next probe.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
			_ = resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 300 {
				return true
			}
		}
		select {
		case <-p.Exited():
			return false
		case <-tick.C:
		}
		s.mu.Lock()
		stale := r.gen != gen || s.closed
		s.mu.Unlock()
		if stale || time.Now().After(deadline) {
			return false
		}
	}
}

// stopReplica takes r out of the choice, lets its requests finish and stops its process.
// s.mu is held.
func (s *Scaler) stopReplica(r *replica) {
	switch r.state {
	case stateStarting:
		s.starting--
	case stateReady:
		if s.stable(r, time.Now()) {
			s.failures = 0 // the command works: a later failure waits restartBackoff
		}
		s.ready--
	}
	r.gen++
	r.state = stateStopping
	s.setDown(r.slot, true)
	p := r.proc
	gen := r.gen
	launched := r.launched
	go func() {
		// Its requests in flight finish first, however long: a stream ends on its own or at
		// the service's stream deadlines, and is not cut for the scale-down.
		for s.draining(r, gen) {
			time.Sleep(drainPoll)
		}
		if p != nil {
			p.Stop(s.o.StopTimeout)
		} else if launched != nil {
			<-launched // a process whose start was under way is stopped by its start goroutine
		}
		s.mu.Lock()
		if r.gen == gen {
			r.proc = nil
			s.ended(r, gen)
		}
		s.mu.Unlock()
	}()
}

// drainPoll is how often a stopping replica's requests in flight are counted.
const drainPoll = 20 * time.Millisecond

// draining reports whether the stopping replica r (stopped as gen) still has requests in
// flight; a scaler that closes ends the wait, as Close stops the process itself.
func (s *Scaler) draining(r *replica, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && r.gen == gen && s.slotActive(r.slot) > 0
}

// publish sets the gauges. s.mu is held.
func (s *Scaler) publish() {
	s.m.Set(s.desired, s.starting, s.ready, s.inFlight, s.queued)
}

// Close stops every replica, waiting for their processes to end (the kube executor, which
// leaves the Deployment as it is, waits for its calls to the API server to end instead),
// closes the readiness probes' and the API server's idle connections, and lets the queued requests go on to the service's backends,
// which are all down by then: they get the gateway's no_backend answer (503) instead of
// waiting for their deadline. Idempotent.
func (s *Scaler) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.kube != nil {
		// The Deployment keeps its replicas: a gateway that stops does not scale the cluster.
		s.kube.stop()
		s.setAllDown(true)
	}
	if s.downTimer != nil {
		s.downTimer.Stop()
	}
	if s.retry != nil {
		s.retry.Stop()
	}
	for _, w := range s.queue {
		if !w.gone {
			w.admitted = true
			s.inFlight++
			w.ch <- struct{}{}
		}
	}
	s.queue, s.queued = nil, 0
	var procs []Process
	var launches []chan struct{}
	for _, r := range s.reps {
		r.gen++
		if r.proc != nil {
			procs = append(procs, r.proc)
		} else if r.launched != nil {
			launches = append(launches, r.launched)
		}
		r.state, r.proc = stateStopped, nil
		s.setDown(r.slot, true)
	}
	s.ready, s.starting = 0, 0
	s.publish()
	// A scaler in force that closes is one whose service no longer scales: its gauges go.
	// One replaced, or never in force (compiled and refused), has none exposed.
	s.m.Retire()
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Stop(s.o.StopTimeout)
		}()
	}
	wg.Wait()
	// A start under way ends with its process stopped (or never started), as its replica's
	// generation changed.
	for _, l := range launches {
		<-l
	}
	s.stops.Wait()
	if s.kube != nil {
		s.kube.wait()
	}
	s.probe.CloseIdleConnections()
	// No replica is started, nor a port held again, once closed is set.
	s.mu.Lock()
	for _, r := range s.reps {
		if r.hold != nil {
			r.hold.release()
			r.hold = nil
		}
	}
	s.mu.Unlock()
	ReleasePorts(s.ports)
}

// ReplicaStatus is a replica as Status shows it.
type ReplicaStatus struct {
	URL   string `json:"url"`
	State string `json:"state"`
	PID   int    `json:"pid,omitempty"`
}

// Status is a scaled service's state for the admin API.
type Status struct {
	Desired  int             `json:"desired_replicas"`
	Target   int             `json:"target_replicas"`
	Ready    int             `json:"ready_replicas"`
	Starting int             `json:"starting_replicas"`
	InFlight int             `json:"in_flight"`
	Queued   int             `json:"queued"`
	Replicas []ReplicaStatus `json:"replicas"`
}

// Status returns the scaler's state now.
func (s *Scaler) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Desired: s.desired, Target: s.target, Ready: s.ready, Starting: s.starting, InFlight: s.inFlight, Queued: s.queued, Replicas: []ReplicaStatus{}}
	if s.kube != nil {
		return st // the pods are the cluster's to list
	}
	urls := s.URLs()
	for i, r := range s.reps {
		if r.state == stateStopped {
			continue
		}
		rs := ReplicaStatus{URL: urls[i], State: r.state}
		if r.proc != nil {
			rs.PID = r.proc.PID()
		}
		st.Replicas = append(st.Replicas, rs)
	}
	return st
}
