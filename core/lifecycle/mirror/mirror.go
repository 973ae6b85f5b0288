// Package mirror copies a share of a service's requests, body included, to another service (a
// shadow) without the caller ever waiting for it or seeing its answer: a candidate model gets
// real traffic before any caller depends on it.
//
// A copy is taken on the request path only when the request is in the share (share.Sampler:
// exact and evenly spaced), before the primary exchange starts: the request head is built and
// the body copied (with its "model" replaced for a shadow that runs another model), and the
// copy goes into a bounded queue, never waiting: when the queue is full the copy is dropped
// and counted. A fixed number of senders take copies off the queue and run them against the
// shadow, each bounded by a timeout; the shadow's backend is chosen only then, from the shadow
// service of the configuration in force, so that a copy counts in that backend's requests in
// flight only while it is sent, and a reload that keeps the mirror (InForce) sends the copies
// it queued to the shadow as the new configuration has it. The bytes
// of the copies held at once, queued and in flight, have a budget too: a copy that would go
// over it is dropped before its body is copied, so memory stays bounded whatever the bodies
// weigh (the queue bounds their number, not their size). The
// shadow's answer is read to its end and discarded, counted by status class and, when asked,
// summarised in a log line (status, latencies, length; never content). The primary never
// waits on any of this, and no failure of the shadow reaches it.
package mirror

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/lifecycle/share"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pool"
)

// Options configure a Mirror ([services.<name>.mirror], docs/config.md).
type Options struct {
	// Service and Shadow name the mirrored service and its shadow (metrics, logs).
	Service, Shadow string
	// Percentage is the share of requests copied, 0..100.
	Percentage float64
	// Model, when set, replaces the "model" of an OpenAI request body in the copy.
	Model string
	// QueueSize bounds the copies waiting for a sender (>= 1).
	QueueSize int
	// MaxConcurrent is the number of senders: copies in flight to the shadow at once (>= 1).
	MaxConcurrent int
	// MaxBytes bounds the bytes of the copies held at once, queued and in flight: head and
	// body of each (> 0).
	MaxBytes int64
	// Timeout bounds one copy's exchange, head and body.
	Timeout time.Duration
	// Summary, when set, gets one line per shadow answer (no content).
	Summary *slog.Logger
}

// Mirror implements pipeline.Mirror for one service. Senders start with the first copy and
// stop at Close (or Stop). A configuration that mirrors a service as the one before did takes its
// Mirror over (InForce), queue and senders with it.
type Mirror struct {
	o Options
	// shadow is the shadow service of the configuration in force, which each copy's backend
	// is chosen from when the copy is sent (InForce replaces it).
	shadow atomic.Pointer[pipeline.Service]
	sample *share.Sampler
	m      *metrics.Mirror

	held   *atomic.Int64 // bytes of the copies queued and in flight, against Options.MaxBytes (budgetOf)
	mu     sync.RWMutex  // Offer holds it shared while it queues, Close exclusively
	closed bool
	jobs   chan *job
	start  sync.Once
	stop   chan struct{}

	senders sync.WaitGroup
	// flying holds the abort handle of each copy being sent; cut, set by Stop, ends them and
	// sends no more.
	flyMu  sync.Mutex
	flying map[*job]pool.AbortHandle
	cut    bool
}

// job is one copy: its request head and body, and the head as sent to the backend chosen for
// it.
type job struct {
	head   pipeline.CopyHead
	out    []byte // head completed for the backend (CopyHead.AppendFor)
	body   []byte
	peek   openai.Request
	queued time.Time
	held   int64 // bytes taken from the mirror's budget for this copy
	// isHEAD marks a copy of a HEAD request, whose answer has no body whatever its
	// Content-Length says (RFC 9110 §9.3.2): read as another's, it would hold its sender
	// until the timeout waiting for one.
	isHEAD bool
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

// maxKeptJobBytes bounds the buffers a pooled job keeps: a copy of a huge body is not kept.
const maxKeptJobBytes = 256 << 10

func putJob(j *job) {
	if j.head.Cap()+cap(j.out)+cap(j.body) > maxKeptJobBytes {
		return
	}
	jobPool.Put(j)
}

// budgets holds the count of bytes held by the mirrors of each service and shadow. A reload
// that changes a mirror's settings makes a new Mirror while the one it replaced still has
// copies in flight (each bounded by its timeout, not cut by the reload), so that the budget
// holds across reloads both count against the one budget: a budget per Mirror would grant its
// bytes again with every such reload.
var budgets sync.Map // budgetKey -> *atomic.Int64

type budgetKey struct{ service, shadow string }

// budgetOf returns the shared count of held bytes of the mirror of service to shadow.
func budgetOf(service, shadow string) *atomic.Int64 {
	k := budgetKey{service, shadow}
	if v, ok := budgets.Load(k); ok {
		return v.(*atomic.Int64)
	}
	v, _ := budgets.LoadOrStore(k, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// New returns a mirror of the requests of o.Service to shadow, the shadow service of the
// configuration that has it. Its budget of held bytes is shared with the mirrors of the same
// service and shadow that earlier snapshots made.
func New(o Options, shadow *pipeline.Service) *Mirror {
	m := &Mirror{
		o: o, held: budgetOf(o.Service, o.Shadow),
		sample: share.NewSampler(o.Percentage),
		m:      metrics.ForMirror(o.Service, o.Shadow),
		jobs:   make(chan *job, max(o.QueueSize, 1)),
		stop:   make(chan struct{}),
	}
	m.shadow.Store(shadow)
	return m
}

// Offer implements pipeline.Mirror: when rc is in the share, a copy of it is queued for the
// shadow, or dropped (and counted) when the queue is full, the bytes held would go over the
// budget or the mirror is closed. It never blocks.
func (m *Mirror) Offer(rc *pipeline.RequestCtx) {
	if !m.sample.Take() {
		return
	}
	// The budget is taken before the body is copied: a copy to be dropped costs no copying.
	// The head and a model written in place of the primary's are small against a body, and
	// are bounded by a margin rather than measured first.
	need := int64(len(rc.Req.Body)) + copyMarginBytes + int64(len(m.o.Model))
	if !m.take(need) {
		m.m.Dropped(metrics.MirrorMaxBytes)
		return
	}
	j := jobPool.Get().(*job)
	j.held, j.isHEAD = need, rc.IsHEAD()
	j.body = m.copyBody(j, rc)
	rc.AppendCopyHead(&j.head, len(j.body))
	// The head is held twice once the copy is sent: as taken, and as completed for its backend.
	if extra := int64(len(j.body)+2*j.head.Len()) - need; extra > 0 {
		// A head over the margin (an entrypoint with a large header limit): counted as it is.
		m.held.Add(extra)
		j.held += extra
	}
	j.queued = time.Now()
	m.start.Do(m.startSenders)

	m.mu.RLock()
	queued := false
	if !m.closed {
		select {
		case m.jobs <- j:
			queued = true
			m.m.Sent()
		default:
		}
	}
	closed := m.closed
	m.mu.RUnlock()
	if !queued {
		m.putJob(j)
		if closed {
			m.m.Dropped(metrics.MirrorStopped)
		} else {
			m.m.Dropped(metrics.MirrorQueueFull)
		}
	}
}

// copyMarginBytes is what a copy takes from the budget besides its body: its head (the
// request's head as rebuilt for the shadow, within the entrypoint's header limit, held as taken
// and as completed for its backend) and the job itself.
const copyMarginBytes = 64 << 10

// take takes n bytes from the mirror's budget; false when they would take it over MaxBytes.
func (m *Mirror) take(n int64) bool {
	if m.held.Add(n) > m.o.MaxBytes {
		m.held.Add(-n)
		return false
	}
	return true
}

// putJob gives a copy's bytes back to the budget, then the job to its pool.
func (m *Mirror) putJob(j *job) {
	m.held.Add(-j.held)
	j.held = 0
	putJob(j)
}

// copyBody copies rc's request body into j, with its "model" replaced by Options.Model when
// that is set and the request is an OpenAI request whose body names a model.
func (m *Mirror) copyBody(j *job, rc *pipeline.RequestCtx) []byte {
	body := rc.Req.Body
	if m.o.Model != "" {
		if ep, ok := openai.EndpointForPath(rc.Req.Path); ok && openai.Peek(ep, body, &j.peek) == nil && j.peek.ModelSpan.Present() {
			return openai.RewriteModel(body, &j.peek, m.o.Model, j.body[:0])
		}
	}
	return append(j.body[:0], body...)
}

func (m *Mirror) startSenders() {
	n := max(m.o.MaxConcurrent, 1)
	m.senders.Add(n)
	for range n {
		go m.sender()
	}
}

func (m *Mirror) sender() {
	defer m.senders.Done()
	for {
		select {
		case <-m.stop:
			return
		case j := <-m.jobs:
			m.m.Dequeued()
			m.send(j)
		}
	}
}

// errCopyTimeout marks a copy cut by Options.Timeout in the summary, errCopyStopped one cut by
// Stop.
var (
	errCopyTimeout = errors.New("mirror: timeout")
	errCopyStopped = errors.New("mirror: stopped")
)

// maxShadowSwaps bounds how many times one copy goes to a newer shadow service because the
// pool of the backend it was about to be sent to closed under it (sendTo).
const maxShadowSwaps = 3

// send runs one copy against a backend of the shadow service in force, chosen now (so that the
// copy counts in its requests in flight only while it is sent), and discards the answer. A
// shadow with no backend left drops the copy.
func (m *Mirror) send(j *job) {
	defer m.putJob(j)
	for tries := 0; ; tries++ {
		sh := m.shadow.Load()
		var c balancer.Choice
		b := sh.Pick(&c)
		if b == nil {
			m.m.Dropped(metrics.MirrorNoBackend)
			return
		}
		again := m.sendTo(j, sh, b, tries < maxShadowSwaps)
		b.Release()
		if !again {
			return
		}
	}
}

// sendTo runs one copy against backend b of shadow service sh. It reports that the copy should
// go again, to the shadow in force now, when it could not be sent because b's pool was closed
// and the shadow in force is no longer sh (retry allowing): the copy raced with a reload whose
// snapshot replaced sh and, once in force, retired the pool. Nothing was sent then, so
// sending it again sends it once.
func (m *Mirror) sendTo(j *job, sh *pipeline.Service, b *pipeline.Backend, retry bool) (again bool) {
	x := pool.AcquireExchange()
	defer pool.ReleaseExchange(x)
	h := x.AbortHandle()
	if !m.takeOff(j, h) {
		m.m.Dropped(metrics.MirrorStopped)
		return false
	}
	defer m.land(j)
	timer := time.AfterFunc(m.o.Timeout, h.Abort)
	defer timer.Stop()
	start := time.Now()
	j.out = j.head.AppendFor(j.out[:0], sh, b)
	err := x.RoundTrip(b.Pool, j.out, j.body, j.isHEAD)
	if retry && errors.Is(err, pool.ErrPoolClosed) && m.shadow.Load() != sh {
		return true
	}
	status, headAfter := 0, time.Since(start)
	var n int64
	if err == nil {
		status = x.Resp.Status
		buf := pool.GetBuf()
		for {
			k, rerr := x.ReadBody(*buf, false)
			n += int64(k)
			if rerr != nil {
				if rerr != io.EOF {
					err = rerr
				}
				break
			}
		}
		pool.PutBuf(buf)
	}
	if err != nil && x.Aborted() {
		err = errCopyTimeout
		if m.stopped() {
			err = errCopyStopped
		}
	}
	if err != nil {
		m.m.Answered(0)
	} else {
		m.m.Answered(status)
	}
	if m.o.Summary != nil {
		attrs := []any{"service", m.o.Service, "shadow", m.o.Shadow, "backend", b.URL,
			"status", status, "queued_ms", start.Sub(j.queued).Milliseconds(),
			"head_ms", headAfter.Milliseconds(), "total_ms", time.Since(start).Milliseconds(), "bytes", n}
		if err != nil {
			attrs = append(attrs, "error", err.Error())
		}
		m.o.Summary.Info("mirror answer", attrs...)
	}
	return false
}

// takeOff records the abort handle h of copy j, about to be sent; false when Stop has cut the
// mirror's copies (j is not to be sent).
func (m *Mirror) takeOff(j *job, h pool.AbortHandle) bool {
	m.flyMu.Lock()
	defer m.flyMu.Unlock()
	if m.cut {
		return false
	}
	if m.flying == nil {
		m.flying = map[*job]pool.AbortHandle{}
	}
	m.flying[j] = h
	return true
}

// land forgets the abort handle of copy j, sent.
func (m *Mirror) land(j *job) {
	m.flyMu.Lock()
	delete(m.flying, j)
	m.flyMu.Unlock()
}

// stopped reports whether Stop has cut the mirror's copies.
func (m *Mirror) stopped() bool {
	m.flyMu.Lock()
	defer m.flyMu.Unlock()
	return m.cut
}

// InForce makes shadow, the shadow service of a configuration going in force that has this
// mirror (made by it, or taken over from the one before), the service each copy's backend is
// chosen from from now on, the copies already queued included, and exposes the mirror's series
// (a configuration compiled and refused leaves none). Compiling a configuration that takes the
// mirror over changes nothing it does until then. Idempotent.
func (m *Mirror) InForce(shadow *pipeline.Service) {
	m.shadow.Store(shadow)
	m.m.Publish()
}

// Metrics returns the mirror's metrics, for the configurations that have the mirror to hold
// while in force (metrics.InForce).
func (m *Mirror) Metrics() *metrics.Mirror { return m.m }

// Close stops the senders (a copy in flight finishes on its own, bounded by the timeout) and
// drops the copies still queued. Offer afterwards drops every copy. Idempotent; it does not
// wait. A reload that replaces the mirror closes it.
func (m *Mirror) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	for {
		select {
		case j := <-m.jobs:
			m.m.Dequeued()
			m.m.Dropped(metrics.MirrorStopped)
			m.putJob(j)
		default:
			return
		}
	}
}

// Stop is Close for a gateway that stops, after which nothing of it may run: it also cuts the
// copies being sent (their connections close at once, and each is counted as answered with an
// error) and returns once every sender has returned. Idempotent.
func (m *Mirror) Stop() {
	m.start.Do(func() {}) // senders not started yet never start: none runs after Stop
	m.Close()
	m.flyMu.Lock()
	m.cut = true
	flying := make([]pool.AbortHandle, 0, len(m.flying))
	for _, h := range m.flying {
		flying = append(flying, h)
	}
	m.flyMu.Unlock()
	for _, h := range flying {
		h.Abort()
	}
	m.senders.Wait()
}
