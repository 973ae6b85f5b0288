package pipeline

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/relay"
	"github.com/sluice-gw/sluice/pool"
)

// RequestCtx is the state of one request through the pipeline: the parsed request the engine
// filled in, what routing and the stages decided, the upstream exchange and the relay of its
// body, and the outcome the completion stages observe. Engines take one from a pool per
// request (AcquireRequestCtx), so that an idle connection holds none; a warm RequestCtx serves
// a request without allocating.
type RequestCtx struct {
	// Req is the request, parsed and with its body read by the engine.
	Req http1.Request
	// ClientIP is the peer address without port, e.g. "127.0.0.1" or "::1", set by the engine
	// with SetClientAddr. It is what sluice saw, never a forwarding header's claim.
	ClientIP []byte
	// FramesBodies is set by engines whose server frames a body of unknown length itself
	// (fasthttp.Server chunks it): such bodies are then read as payload (ReadBody).
	FramesBodies bool

	peer    netip.Addr // ClientIP parsed: what trusted_ips is matched against
	trusted bool       // the peer is in the entrypoint's TrustedIPs

	client      netip.Addr // ClientAddr, once computed for the request
	clientKnown bool

	ep         *Entrypoint
	clientPath []byte // Req.Path as the request arrived, before a stage rewrote it
	route      *Route
	service    *Service // where the request goes: the route's, or one a stage chose
	hooks      *Chain
	slots      [maxSlots]slot
	backend    *Backend   // held (Acquire'd) until Finish
	tried      *Backend   // the last backend tried, for the outcome
	lastTry    TryVerdict // how the backend the vet stages let through last did (LastTry)
	try        int        // tries on the current service (exchange)
	hadX       bool       // the upstream exchange was released before Finish (ReleaseUpstream)
	attempts   int        // attempts that reached an upstream (exchange, the retry stages)
	last       error      // the answer if no backend answers (exchange)
	start      time.Time

	x         *pool.Exchange
	choice    balancer.Choice
	pickC     balancer.Choice // the choice of one pick when pick stages add to it
	pickWhy   error           // why the pick stages left no backend in this pick (RefusePick)
	pickTake  Taker           // counts the backend of this pick in place of Acquire (TakePick)
	relay     relay.Relay
	framing   relay.Framing
	sse       bool
	streaming bool // counted in the route's active streams until Finish
	keepAlive bool
	isHEAD    bool
	maxFwd    int64   // Max-Forwards of a TRACE or OPTIONS request, -1 when none applies
	ended     bool    // the body reached its end or failed; nothing more is read
	pending   []byte  // a coded body's bytes not yet sent
	kept      *[]byte // an SSE event's start kept back (relay.Keep), at relay.Headroom
	keptN     int     // its length
	websocket bool    // a valid WebSocket opening handshake: forwarded with its upgrade
	upgraded  bool    // the upstream accepted it (101): the engine runs Tunnel
	tunnelOut int64   // bytes the upstream sent through the tunnel
	// ownOut counts the body bytes the gateway wrote itself: its reply's (appendReply,
	// ReplyBody), or a held stream's keep-alives and error event (sendRaw).
	ownOut int64
	// relayFraming counts the chunk framing among the upstream wire bytes the relay passed
	// on (relay.ChunkedRaw; noteFraming): bytes_out counts a body's payload, as the relay
	// counts it for every other framing.
	relayFraming int64

	reply    Reply
	replied  bool
	finished bool       // FinishAt ran for this request
	errShape ErrorShape // of the gateway's own error bodies and SSE error events

	requestID []byte
	kv        []byte // backing store of added header fields
	upExtra   []fieldRef
	respExtra []fieldRef
	upHead    *[]byte // the upstream head, from pick to the end of its round trip

	enc   Encoder // codes the response body (a compress stage), nil for none
	encIn *[]byte // the upstream payload read before it is coded
	whole *[]byte // the body read whole before its head is written (CollectBody)

	outcome       Outcome
	countedReason string      // the upstream failure reason last counted as it happened (connect failures, resent requests)
	sent          time.Time   // when the request was sent to the backend that answered
	mirrored      []*Service  // services whose mirror was offered the request (each once)
	entered       []*Service  // services whose hooks ran (OnServiceDone at Finish)
	enteredAt     []time.Time // when the request reached each of entered
	hookAt        int         // the index in entered of the service whose hooks run
	gaps          GapWatcher  // sees the stream's gaps, when a service hook asked
	held          bool        // a streaming caller held with keep-alives (hold.go)
	hold          holdState
	onLoop        bool          // run by an event loop (BeginLoop): waits are the engine's
	loopWait      time.Duration // the wait before the next try on the loop (LoopWait)
	dl            deadlineState

	cancelMu  sync.Mutex
	seq       uint64
	canceled  bool
	done      chan struct{}
	abort     pool.AbortHandle
	hasAbort  bool
	cancelCBs []func()
}

// fieldRef is a header field whose key and value are kv[k0:k1] and kv[k1:v1].
type fieldRef struct{ k0, k1, v1 int }

// Outcome is how a request ended, for completion stages.
type Outcome struct {
	// Status is the status sent to the client (0 when nothing was sent).
	Status int
	// BytesOut counts the response body bytes sent to the client, whoever wrote them: the
	// upstream's relayed (with the gateway's error event that ends a stream it cut), the
	// gateway's own reply, a held stream's keep-alives; for a tunnel, what the upstream sent.
	// 0 for a response without a body (HEAD, 204, 304).
	BytesOut int64
	// TunnelIn counts, for a WebSocket tunnel, the bytes the client sent through it (after
	// the handshake, which has no body); 0 for any other request.
	TunnelIn int64
	// TTFT is the time from the request to the first body byte of a streamed response
	// (0 when there was none).
	TTFT time.Duration
	// UpstreamError names the upstream failure (a metrics.Reason* value), "" when none.
	UpstreamError string
	// Canceled reports that the client left before the response was complete.
	Canceled bool
	// GatewayReply reports that the gateway answered itself (an error or a stage's reply).
	GatewayReply bool
	// Usage is the token usage the upstream reported, when a stage read it (UsageKnown).
	Usage      Usage
	UsageKnown bool
	// Model and Consumer name the model alias and the caller, when a stage knew them.
	Model, Consumer string
	// Prefix is how prefix-cache affinity chose the backend, when it did.
	Prefix PrefixRouting
}

// PrefixRouting is how prefix-cache affinity routed a request (the affinity package).
type PrefixRouting struct {
	// Routed reports that prefix-cache affinity chose among the request's backends.
	Routed bool
	// Outcome is how: "hit" (a hint), "miss", "short" or "busy" (rendezvous hashing).
	Outcome string
	// MatchedBytes is the length of the matched prefix in bytes of the normalised request (a
	// routing measure, not a count of cached tokens); 0 unless Outcome is "hit".
	MatchedBytes int
	// EstimatedMs estimates the prefill time the match saves, in ms, from MatchedBytes and
	// the model's configured prefill cost per token: an estimate, not a measured TTFT.
	EstimatedMs float64
	// Invalidated reports that the backend answered with a full cache miss for a request a
	// hint sent there, and the hint was dropped.
	Invalidated bool
}

// Usage is a response's token accounting, in tokens.
type Usage struct {
	Prompt, Completion, Cached int64
}

var ctxPool = sync.Pool{New: func() any { return new(RequestCtx) }}

// AcquireRequestCtx returns an empty RequestCtx from a pool; ReleaseRequestCtx gives it back.
func AcquireRequestCtx() *RequestCtx { return ctxPool.Get().(*RequestCtx) }

// ReleaseRequestCtx returns rc to the pool once Finish has run. Cancel handles taken from this
// use of rc become no-ops.
func ReleaseRequestCtx(rc *RequestCtx) {
	rc.cancelMu.Lock()
	rc.seq++
	rc.canceled = false
	rc.done = nil
	rc.cancelMu.Unlock()
	rc.ClientIP, rc.peer = rc.ClientIP[:0], netip.Addr{}
	rc.FramesBodies = false
	rc.finished = true // until the next request enters the pipeline (reset)
	// An engine's refusal (Entrypoint.Reject) fills in only what it parsed of its request.
	rc.Req.Reset()
	ctxPool.Put(rc)
}

// SetClientAddr sets the peer address of the connection: ClientIP, and the address the
// entrypoint's TrustedIPs are matched against. An IPv4-mapped IPv6 address (an IPv4 peer of a
// dual-stack listener) is taken as the IPv4 address, and a zone is dropped, so that both
// match the networks as configured. It allocates nothing once ClientIP has capacity.
func (rc *RequestCtx) SetClientAddr(a netip.Addr) {
	rc.peer = a.Unmap().WithZone("")
	rc.ClientIP = rc.peer.AppendTo(rc.ClientIP[:0])
}

// reset clears the per-request state before a request (not the request itself, the client
// address or the cancellation state, which the engine manages); now is when it started.
func (rc *RequestCtx) reset(ep *Entrypoint, now time.Time) {
	rc.ep = ep
	rc.clientPath = rc.Req.Path
	rc.client, rc.clientKnown = netip.Addr{}, false
	rc.route, rc.service, rc.hooks, rc.backend, rc.tried = nil, nil, nil, nil, nil
	rc.lastTry = TryInFlight
	clear(rc.slots[:])
	rc.start = now
	rc.x, rc.hadX = nil, false
	rc.choice.Reset()
	// A request asking for an upgrade ends its connection whatever the answer: a 101 turns it
	// into a tunnel, and after any other answer what the client sends next may be the other
	// protocol's bytes (a proxy in front that took the upgrade for granted relays them
	// unchecked), never to be read as requests.
	rc.framing, rc.sse, rc.keepAlive, rc.isHEAD, rc.ended = relay.None, false, rc.Req.KeepAlive && !rc.Req.Upgrade, false, false
	rc.maxFwd = -1
	rc.websocket, rc.upgraded, rc.tunnelOut, rc.ownOut, rc.relayFraming = false, false, 0, 0, 0
	rc.pending = rc.pending[:0]
	rc.dropKept()
	rc.releaseWhole()
	rc.reply, rc.replied, rc.finished = Reply{}, false, false
	rc.requestID = rc.requestID[:0]
	rc.kv = rc.kv[:0]
	rc.upExtra = rc.upExtra[:0]
	rc.respExtra = rc.respExtra[:0]
	rc.outcome, rc.countedReason, rc.sent = Outcome{}, "", time.Time{}
	clear(rc.mirrored) // a replaced service is not kept for the next request
	rc.mirrored = rc.mirrored[:0]
	rc.entered, rc.enteredAt, rc.hookAt, rc.gaps = rc.entered[:0], rc.enteredAt[:0], 0, nil
	rc.held, rc.hold = false, holdState{}
	rc.onLoop, rc.loopWait = false, 0
	rc.errShape = OpenAIErrors
}

// Route returns the matched route (nil before routing or when none matched).
func (rc *RequestCtx) Route() *Route { return rc.route }

// Backend returns the backend the request went to, or the last one it tried (nil when none
// was picked).
func (rc *RequestCtx) Backend() *Backend { return rc.tried }

// ClientPath returns the request's path as the client sent it (in normal form, without the
// query), what the router matched: a stage that rewrites Req.Path (strip-prefix) changes what
// goes upstream, not this. It shares the request's buffer: valid until the request ends.
func (rc *RequestCtx) ClientPath() []byte { return rc.clientPath }

// Entrypoint returns the name of the entrypoint the request came in on.
func (rc *RequestCtx) Entrypoint() string { return rc.ep.Name }

// Start returns when the request entered the pipeline (its head and body were complete).
func (rc *RequestCtx) Start() time.Time { return rc.start }

// ServiceEntered returns, to a service hook (OnService, OnServiceDone), when the request reached
// the hook's service: after the route's request stages (a model's admission queue, a rate
// limit, reading the body), before the service's hooks (a cold-start hold counts). The time
// a service itself took with a request is measured from here; Start is the client's view.
func (rc *RequestCtx) ServiceEntered() time.Time {
	if rc.hookAt < len(rc.enteredAt) {
		return rc.enteredAt[rc.hookAt]
	}
	return time.Time{}
}

// AnsweredByService reports, to OnServiceDone, whether the request ended on the hook's service:
// false when the route's fallback moved it to another service (a model's next target) after
// this one's servers all failed to connect or were left out.
func (rc *RequestCtx) AnsweredByService() bool {
	return rc.hookAt < len(rc.entered) && rc.entered[rc.hookAt] == rc.service
}

// RequestID returns the request's X-Request-Id (the client's when sane, else generated).
func (rc *RequestCtx) RequestID() []byte { return rc.requestID }

// Outcome returns how the request ended (complete once completion stages run).
func (rc *RequestCtx) Outcome() *Outcome { return &rc.outcome }

// TryVerdict is how the backend of one try of a request did, for stages that judge backends
// (a circuit breaker).
type TryVerdict uint8

const (
	// TryInFlight: the backend the vet stages let through last is the request's: it is
	// being tried or it answers the request, and the Outcome tells how it did.
	TryInFlight TryVerdict = iota
	// TryFailed: the request left the backend after a failure: it could not be reached, the
	// exchange failed before a response head, or a retry stage sent the request again after
	// its failure or its 5xx answer (one ServerFailure counts).
	TryFailed
	// TrySucceeded: a retry stage sent the request again after another answer.
	TrySucceeded
	// TryNeither: the backend is not judged: a vet stage refused it before anything was
	// sent, it refused the request for now (Retry-After), or the gateway's own host was short
	// of resources to reach it.
	TryNeither
)

// LastTry returns the verdict on the backend the vet stages let the request through to last,
// once the request left it (for another try, or to be answered without it); TryInFlight until
// the request leaves a backend, and while the one let through last is the request's. A vet
// stage reads it at the next choice to judge the backend it let through before; a completion
// stage, to tell a backend the request left from the one that answered.
func (rc *RequestCtx) LastTry() TryVerdict { return rc.lastTry }

// Exclude keeps backend id of the request's service out of this request's backend choice.
func (rc *RequestCtx) Exclude(id int) { rc.choice.Exclude.Add(id) }

// Service returns the service the request goes to (the route's, unless a stage chose one).
func (rc *RequestCtx) Service() *Service { return rc.service }

// SetService sends the request to s instead of the route's service (a model router's target),
// with a fresh backend choice: exclusions made for the previous service do not carry over.
func (rc *RequestCtx) SetService(s *Service) {
	rc.service = s
	rc.choice.Reset()
}

// WatchGaps makes w see the inter-token gaps of the request's stream (a service hook's
// rollout judges its new revision by them).
func (rc *RequestCtx) WatchGaps(w GapWatcher) { rc.gaps = w }

// maxSlots bounds the per-request values stages keep (Set, Get).
const maxSlots = 8

// Slot names one per-request value of a stage: declare one package-level Slot per value
// (var consumerSlot pipeline.Slot) and Set/Get it through the RequestCtx.
type Slot struct{ _ byte }

type slot struct {
	key *Slot
	val any
}

// Set keeps v for the rest of the request under k, for the stage's later phases or for the
// stages after it. A pointer v does not allocate. It panics when more than maxSlots distinct
// keys are set in one request, a programming error.
func (rc *RequestCtx) Set(k *Slot, v any) {
	for i := range rc.slots {
		if s := &rc.slots[i]; s.key == k || s.key == nil {
			s.key, s.val = k, v
			return
		}
	}
	panic("pipeline: more than 8 per-request slots")
}

// Get returns the value kept under k in this request, or nil.
func (rc *RequestCtx) Get(k *Slot) any {
	for i := range rc.slots {
		if s := &rc.slots[i]; s.key == k {
			return s.val
		} else if s.key == nil {
			return nil
		}
	}
	return nil
}

// AddUpstreamHeader adds a field to the request sent upstream (after the client's fields).
func (rc *RequestCtx) AddUpstreamHeader(key, value []byte) {
	rc.upExtra = append(rc.upExtra, rc.store(key, value))
}

// AddResponseHeader adds a field to the response sent to the client (upstream answers and
// the gateway's own replies alike). A Vary whose members the response's Vary lists already
// (the upstream's, or one added before it), or that follows a Vary: *, is left out.
func (rc *RequestCtx) AddResponseHeader(key, value []byte) {
	rc.respExtra = append(rc.respExtra, rc.store(key, value))
}

func (rc *RequestCtx) store(key, value []byte) fieldRef {
	k0 := len(rc.kv)
	rc.kv = append(rc.kv, key...)
	k1 := len(rc.kv)
	rc.kv = append(rc.kv, value...)
	return fieldRef{k0, k1, len(rc.kv)}
}

func (rc *RequestCtx) appendFields(dst []byte, refs []fieldRef) []byte {
	for _, f := range refs {
		dst = appendField(dst, rc.kv[f.k0:f.k1], rc.kv[f.k1:f.v1])
	}
	return dst
}

// Reply is an answer the gateway gives itself instead of an upstream's. A stage fills the
// RequestCtx's one with RequestCtx.Reply and returns it.
type Reply struct {
	Status      int
	ContentType string
	Body        []byte
	// RetryAfter is sent as Retry-After (seconds) when > 0.
	RetryAfter int
	err        *GatewayError
}

// Error implements error, so that a stage can return its reply.
func (r *Reply) Error() string { return "reply " + http1.StatusText(r.Status) }

// Reply prepares the RequestCtx's reply with status, content type and body (kept by
// reference until the response is written) and returns it for a stage to return.
func (rc *RequestCtx) Reply(status int, contentType string, body []byte) *Reply {
	rc.reply = Reply{Status: status, ContentType: contentType, Body: body}
	return &rc.reply
}

// Cancel ends the request because its client left: the upstream exchange in flight is
// aborted at once (its connection closed), every wait on Done returns, and callbacks
// registered with OnCancel run. Safe from any goroutine; idempotent.
func (rc *RequestCtx) Cancel() { rc.cancelSeq(0, false) }

func (rc *RequestCtx) cancelSeq(seq uint64, check bool) {
	rc.cancelMu.Lock()
	if rc.canceled || (check && seq != rc.seq) {
		rc.cancelMu.Unlock()
		return
	}
	rc.canceled = true
	if rc.done != nil {
		close(rc.done)
	}
	if rc.hasAbort {
		rc.abort.Abort()
	}
	cbs := rc.cancelCBs
	rc.cancelMu.Unlock()
	for _, f := range cbs {
		f()
	}
}

// CancelHandle cancels (or expires, Expire) one use of a pooled RequestCtx: it is a no-op
// once that use was released. Goroutines that may outlive the request (a disconnect watch) hold one instead of
// the RequestCtx.
type CancelHandle struct {
	rc  *RequestCtx
	seq uint64
}

// CancelHandle returns a handle that cancels this use of rc.
func (rc *RequestCtx) CancelHandle() CancelHandle {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	return CancelHandle{rc, rc.seq}
}

// Cancel cancels the request if it is still the same use of the RequestCtx.
func (h CancelHandle) Cancel() {
	if h.rc != nil {
		h.rc.cancelSeq(h.seq, true)
	}
}

// Expire is RequestCtx.Expire if it is still the same use of the RequestCtx.
func (h CancelHandle) Expire(e *GatewayError) {
	if h.rc != nil {
		h.rc.expireSeq(e, h.seq, true)
	}
}

// Canceled reports whether the client left.
func (rc *RequestCtx) Canceled() bool {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	return rc.canceled
}

// Done returns a channel closed when the client leaves, for stages that wait (admission
// queues, several upstream calls). It allocates on first use in a request, so the fast path
// that never waits does not.
func (rc *RequestCtx) Done() <-chan struct{} {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	if rc.done == nil {
		rc.done = make(chan struct{})
		if rc.canceled {
			close(rc.done)
		}
	}
	return rc.done
}

// OnCancel registers f to run when the client leaves (at once if it already has) until
// the request completes.
func (rc *RequestCtx) OnCancel(f func()) {
	rc.cancelMu.Lock()
	if rc.canceled {
		rc.cancelMu.Unlock()
		f()
		return
	}
	rc.cancelCBs = append(rc.cancelCBs, f)
	rc.cancelMu.Unlock()
}

// Adopt makes x, a round trip a request stage ran itself to backend b of the request's
// service, the request's upstream exchange: the pipeline skips its own backend choice and
// relays x's response (response stages, body stages and the relay apply as to any upstream
// response). The stage must have completed x.RoundTrip without error and counted the
// request on b (b.LB.Acquire or AcquireFrom); Finish releases both. A client that leaves
// from now on aborts x. A stage that orchestrates several upstream calls (prefill/decode
// serving) adopts the one whose body the client gets. It reports false, with x aborted, when
// the client already left.
func (rc *RequestCtx) Adopt(b *Backend, x *pool.Exchange) bool {
	rc.x, rc.backend, rc.tried = x, b, b
	return rc.watch(x)
}

// watch makes Cancel abort x; it reports false (and aborts x) when the client already left.
func (rc *RequestCtx) watch(x *pool.Exchange) bool {
	rc.cancelMu.Lock()
	rc.abort, rc.hasAbort = x.AbortHandle(), true
	gone := rc.canceled
	rc.cancelMu.Unlock()
	if gone {
		x.Abort()
	}
	return !gone
}

func (rc *RequestCtx) unwatch() {
	rc.cancelMu.Lock()
	rc.hasAbort = false
	clear(rc.cancelCBs)
	rc.cancelCBs = rc.cancelCBs[:0]
	rc.cancelMu.Unlock()
}

var hdrRequestID = []byte("X-Request-Id")

// maxRequestIDBytes bounds a client's X-Request-Id that is kept; a longer one is replaced.
const maxRequestIDBytes = 128

// saneRequestID reports whether a client's X-Request-Id can be kept: 1..128 visible ASCII
// characters from a conservative set, so it cannot inject into logs or headers.
func saneRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > maxRequestIDBytes {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:/+=", c) >= 0) {
			return false
		}
	}
	return true
}
