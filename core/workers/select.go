package workers

import (
	"math/bits"

	"github.com/sluice-gw/sluice/core/balancer"
)

// RoleAggregated is the worker role that serves whole requests.
const RoleAggregated = "aggregated"

// Needs is what a target asks of the servers that serve it.
type Needs struct {
	// Role is the role a worker must report ("aggregated" for a target that sends whole
	// requests); "" takes any.
	Role string
	// Generation, when > 0, is the deployment generation a worker must report.
	Generation int64
	// Digest, when set, is the execution config digest a worker must report.
	Digest string
	// StateTransfer asks for workers that report state_transfer: true (prefill and decode
	// workers of disaggregated serving hand a prefill's state over).
	StateTransfer bool
}

// binds reports whether n asks for something only an observation can show.
func (n *Needs) binds() bool { return n.Generation > 0 || n.Digest != "" || n.StateTransfer }

// Reason is why a server is left out of a choice; Eligible when it is not.
type Reason uint8

// Reasons, in the order they are judged.
const (
	Eligible Reason = iota
	// IdentityChanged: the worker's worker_id or epoch differ from those of the observation
	// before (another process answers at the address, or the worker restarted and lost its
	// state); it is left out until the next observation confirms the new identity.
	IdentityChanged
	// Stale: the latest observation is older than the TTL (the server stopped answering).
	Stale
	// Unhealthy: the worker reports healthy = false.
	Unhealthy
	// WrongRole: the worker's role is not the target's.
	WrongRole
	// NotReady: the worker reports ready = false.
	NotReady
	// AtCapacity: its active sequences, corrected by the gateway's requests sent or
	// finished since the observation, reach max_active (when max_active > 0).
	AtCapacity
	// GenerationMismatch: the worker reports another deployment generation than the
	// target's.
	GenerationMismatch
	// DigestMismatch: the worker reports another execution config digest than the target's.
	DigestMismatch
	// NoObservation: the target binds a generation or a digest, and the server has no
	// observation (a plain server, or one that never answered).
	NoObservation
	// NoStateTransfer: the target hands prefill state between workers and the worker does
	// not report state_transfer.
	NoStateTransfer

	numReasons
)

var reasonNames = [...]string{
	Eligible:           "",
	IdentityChanged:    "identity_changed",
	Stale:              "stale",
	Unhealthy:          "unhealthy",
	WrongRole:          "wrong_role",
	NotReady:           "not_ready",
	AtCapacity:         "at_capacity",
	GenerationMismatch: "deployment_generation",
	DigestMismatch:     "execution_config_digest",
	NoObservation:      "no_observation",
	NoStateTransfer:    "state_transfer",
}

// String names r as the admin API shows it ("" for Eligible).
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// judge says whether server i may take a request of a target needing n at now (monotonic
// ns), count being the gateway's requests in flight to it (its balancer entry's Active), and
// its load: for a worker its active sequences, corrected by the gateway's requests sent or
// finished since the observation, plus its waiting ones; for a server without an
// observation, the gateway's requests in flight to it.
func (g *Group) judge(i int, n *Needs, now, count int64) (Reason, int64) {
	m := &g.members[i]
	r := m.Worker.load()
	inflight := max(count, 0)
	if r.kind != Observed {
		if n.binds() {
			return NoObservation, inflight
		}
		return Eligible, inflight
	}
	o := &r.obs
	// The server runs at least the gateway's own requests in flight to it, less those it may
	// hold in its queue: an answer it gave before one of them arrived (received after it was
	// sent) would otherwise show it free until the next observation, and a burst would all
	// go to it.
	queued := min(max(o.Waiting, 0), inflight)
	active := max(o.Active+inflight-r.inflight, inflight-queued)
	load := active + max(o.Waiting, 0)
	switch {
	case r.changed:
		return IdentityChanged, load
	case now-r.at > g.ttl:
		return Stale, load
	case !o.Healthy:
		return Unhealthy, load
	case n.Role != "" && o.Role != n.Role:
		return WrongRole, load
	case !o.Ready:
		return NotReady, load
	case o.MaxActive > 0 && active >= o.MaxActive:
		return AtCapacity, load
	case n.Generation > 0 && o.DeploymentGeneration != n.Generation:
		return GenerationMismatch, load
	case n.Digest != "" && o.ExecutionConfigDigest != n.Digest:
		return DigestMismatch, load
	case n.StateTransfer && !o.StateTransfer:
		return NoStateTransfer, load
	}
	return Eligible, load
}

// Short reports whether a server lacks a fresh observation because the gateway could not poll
// it for want of its own descriptors, memory or ports: Exclude's short, for a caller that
// judges the servers one by one (the P/D pair choice) and found none.
func (g *Group) Short() bool {
	now := monoNow()
	for i := range g.members {
		if r := g.members[i].Worker.load(); r.short && (r.kind != Observed || now-r.at > g.ttl) {
			return true
		}
	}
	return false
}

// Judge says whether server i may take a request of a target needing n now, and its load
// (see Exclude).
func (g *Group) Judge(i int, n *Needs) (Reason, int64) {
	return g.judge(i, n, monoNow(), g.members[i].LB.Active())
}

// Take judges server i for a request of a target needing n as Judge does and, when it is
// Eligible, counts the request in flight to it (its balancer entry's count, as Acquire does)
// in the same step: the judgement is made on the very count the request joins, so that
// requests choosing at once cannot all take a worker's last free sequence (each would find
// it free on a count that did not hold the others yet). It returns the reason and the load
// judged (the request not included). The caller must Release the entry when the request
// ends; nothing is counted unless the reason is Eligible. It does not lock or allocate: a
// count another request changed between the judgement and the taking makes it judge again.
func (g *Group) Take(i int, n *Needs) (Reason, int64) {
	lb := g.members[i].LB
	now := monoNow()
	for {
		count := lb.Active()
		r, load := g.judge(i, n, now, count)
		if r != Eligible || lb.AcquireFrom(count) {
			return r, load
		}
	}
}

// LeftOut records that server i was left out of a request's choice for reason r (not
// Eligible), found by Judge, in the exclusions metric as Exclude does, and reports whether it
// was left out without a fresh observation because the gateway could not poll it for want of
// its own descriptors, memory or ports.
func (g *Group) LeftOut(i int, r Reason) (short bool) {
	g.excluded[r].Inc()
	return (r == Stale || r == NoObservation) && g.members[i].Worker.load().short
}

// Exclude adds to c the servers a request of a target needing n must not go to now: those
// Judge finds ineligible, then those more loaded than the least loaded eligible one, so that
// the balancer only breaks ties. Servers c already excludes are not judged. Up servers are
// preferred in finding the least loaded (one ejected by passive health is picked only when
// every eligible server is). It reports full when it left no server and at least one was
// left out for being at capacity: the target is busy rather than broken; and short when it
// left no server and at least one was left out without a fresh observation because the
// gateway could not poll it for want of its own descriptors, memory or ports. It does not
// allocate.
func (g *Group) Exclude(c *balancer.Choice, n *Needs) (full, short bool) {
	now := monoNow()
	// The loads of the first servers are kept for the second pass (on the stack); those of
	// the others are read again there.
	var loads [64]int64
	var kept uint64 // bit i: server i (< 64) is eligible and its load is in loads[i]
	best, bestLoad, bestUp := -1, int64(0), false
	for i := range g.members {
		if c.Exclude.Has(i) {
			continue
		}
		r, load := g.judge(i, n, now, g.members[i].LB.Active())
		if r != Eligible {
			c.Exclude.Add(i)
			full = full || r == AtCapacity
			short = g.LeftOut(i, r) || short
			continue
		}
		if i < len(loads) {
			loads[i], kept = load, kept|1<<uint(i)
		}
		up := !g.members[i].LB.Down()
		if best < 0 || up && !bestUp || up == bestUp && load < bestLoad {
			best, bestLoad, bestUp = i, load, up
		}
	}
	if best < 0 {
		return full, short
	}
	for k := kept; k != 0; k &= k - 1 {
		if i := bits.TrailingZeros64(k); loads[i] > bestLoad {
			c.Exclude.Add(i)
		}
	}
	for i := len(loads); i < len(g.members); i++ {
		// Loads read again may have moved since: best itself always stays, so that the
		// choice is never left empty by a race.
		if i == best || c.Exclude.Has(i) {
			continue
		}
		if _, load := g.judge(i, n, now, g.members[i].LB.Active()); load > bestLoad {
			c.Exclude.Add(i)
		}
	}
	return false, false
}
