package workers

import (
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what the gateway knows of a server.
type Kind uint8

const (
	// Unknown: no poll has answered yet (or only failures since the gateway started).
	Unknown Kind = iota
	// Plain: the server answered 404, it does not speak the worker protocol.
	Plain
	// Observed: the server has answered an observation.
	Observed
)

// String names k as the admin API shows it: "unknown", "plain" or "worker".
func (k Kind) String() string {
	switch k {
	case Plain:
		return "plain"
	case Observed:
		return "worker"
	}
	return "unknown"
}

// base anchors the monotonic clock of observations.
var base = time.Now()

func monoNow() int64 { return int64(time.Since(base)) }

// Worker is the observed state of one server. It outlives a snapshot: a reload that keeps
// the server keeps its Worker, and with it the last observation and identity.
type Worker struct {
	cur atomic.Pointer[record] // read by the request path; replaced whole, never modified

	mu     sync.Mutex // orders updates: two groups poll a kept server during a reload
	lastID identity   // the identity of the latest observation, under mu
	hasID  bool
}

type identity struct {
	workerID string
	epoch    int64
}

// record is one published state of a Worker. It is immutable once published.
type record struct {
	kind Kind
	obs  Observation // kind Observed: the latest observation
	// at is when obs was received (monotonic ns), wall the same by the wall clock; sent is
	// when the poll that brought it was sent.
	at   int64
	wall time.Time
	sent int64
	// inflight is the gateway's count of requests in flight to the server when obs was
	// received; the difference to the count at a choice corrects obs.Active for the requests
	// sent or finished since.
	inflight int64
	// changed: obs's identity differs from the observation's before it.
	changed bool
	// short: the latest poll could not be made for want of the gateway's own descriptors,
	// memory or ports (Group.short).
	short bool
	// probed is when the server last answered 404 (kind Plain, monotonic ns).
	probed int64
	// err is why the latest poll failed ("" when it did not), at errWall.
	err     string
	errWall time.Time
}

func (w *Worker) load() *record {
	if r := w.cur.Load(); r != nil {
		return r
	}
	return &noRecord
}

var noRecord record

// observed publishes o, asked for at sent and received at now with the gateway's in-flight
// count inflight. An observation asked for before the one in force is dropped: a poll made
// out of turn (Group.Refresh) may answer before a round's poll sent earlier, and the older
// state must not replace the newer one.
func (w *Worker) observed(o Observation, inflight, sent, now int64, wall time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.load(); r.kind == Observed && sent < r.sent {
		return
	}
	id := identity{o.WorkerID, o.Epoch}
	changed := w.hasID && id != w.lastID
	w.lastID, w.hasID = id, true
	w.cur.Store(&record{kind: Observed, obs: o, at: now, wall: wall, sent: sent, inflight: inflight, changed: changed})
}

// plain records that the server answered 404 at now.
func (w *Worker) plain(now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur.Store(&record{kind: Plain, probed: now})
}

// failed records a poll that got no usable answer: the last observation stays (and goes
// stale by its age) with the reason beside it; short says the gateway could not make the poll
// for want of its own resources. It reports whether the reason is new (the previous poll
// succeeded or failed otherwise).
func (w *Worker) failed(reason string, short bool, wall time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := *w.load()
	changed := r.err != reason
	r.err, r.errWall, r.short = reason, wall, short
	w.cur.Store(&r)
	return changed
}

// View is a Worker's state for display (the admin API).
type View struct {
	Kind Kind
	// Observation is the latest observation (nil unless Kind is Observed).
	Observation *Observation
	// ReceivedAt is when the gateway received it, Age how long ago.
	ReceivedAt time.Time
	Age        time.Duration
	// IdentityChanged: its worker_id or epoch differ from the observation's before it.
	IdentityChanged bool
	// Error is why the latest poll failed ("" when it did not), at ErrorAt.
	Error   string
	ErrorAt time.Time
}

// View returns w's current state.
func (w *Worker) View() View {
	r := w.load()
	v := View{Kind: r.kind, Error: r.err, ErrorAt: r.errWall}
	if r.kind == Observed {
		o := r.obs
		v.Observation, v.ReceivedAt, v.IdentityChanged = &o, r.wall, r.changed
		v.Age = time.Duration(monoNow() - r.at)
	}
	return v
}

// Role returns the role of the latest observation ("" when there is none).
func (w *Worker) Role() string {
	if r := w.load(); r.kind == Observed {
		return r.obs.Role
	}
	return ""
}

// ID returns the worker_id of the latest observation ("" when there is none). It does not
// allocate: pair selection ranks workers by it on the request path.
func (w *Worker) ID() string {
	if r := w.load(); r.kind == Observed {
		return r.obs.WorkerID
	}
	return ""
}

// Epoch returns the epoch of the latest observation (0 when there is none): it counts the
// worker's restarts, each of which loses its KV cache. It does not allocate.
func (w *Worker) Epoch() int64 {
	if r := w.load(); r.kind == Observed {
		return r.obs.Epoch
	}
	return 0
}
