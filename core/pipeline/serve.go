package pipeline

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/relay"
	"github.com/sluice-gw/sluice/pool"
)

// Entrypoint is the pipeline's side of one listener: engines create one and hand it every
// request they parse. It is safe for concurrent use.
type Entrypoint struct {
	// Name is the entrypoint's name ([entrypoints.<name>]).
	Name string
	// TLS reports that the entrypoint terminates TLS (X-Forwarded-Proto: https).
	TLS bool
	// Port is the port the entrypoint listens on, sent upstream as X-Forwarded-Port ("": not
	// sent). The engine sets it once its listener is bound, before it serves.
	Port string
	// TrustedIPs are the networks of the peers whose forwarding headers are believed and
	// extended (entrypoints.<name>.trusted_ips, parsed by config.Load); from any other peer
	// they are replaced (see appendUpstreamHead). Set before the engine serves; nil trusts
	// no peer.
	TrustedIPs []netip.Prefix

	res  Resolver
	bb   BodyBoundResolver // res, when it is one
	m    *metrics.Entrypoint
	elog errLog
}

// NewEntrypoint returns the pipeline for entrypoint name, routing with res and counting into m.
func NewEntrypoint(name string, tls bool, res Resolver, m *metrics.Entrypoint, log *slog.Logger) *Entrypoint {
	if log == nil {
		log = slog.Default()
	}
	bb, _ := res.(BodyBoundResolver)
	return &Entrypoint{Name: name, TLS: tls, res: res, bb: bb, m: m, elog: errLog{log: log}}
}

// Begin runs a parsed request through the pipeline up to the response head: request ID,
// routing, the route's request stages, backend choice and the upstream exchange (with its
// retries, only before any response byte), and the response stages. Afterwards the response
// to write is ready: a gateway reply, or an upstream response whose body follows (RelayTo or
// ReadBody). The engine then writes it and calls Finish, whatever happened.
func (ep *Entrypoint) Begin(rc *RequestCtx) {
	if err := ep.route(rc, time.Now()); err != nil {
		rc.answer(err)
		return
	}
	if rc.maxFwd == 0 {
		rc.answer(rc.answerAsFinalRecipient())
		return
	}
	if asksWebSocket(&rc.Req) {
		if err := rc.beginWebSocket(); err != nil {
			rc.answer(err)
			return
		}
	}
	if rc.x == nil { // a request stage may have run the exchange itself (Adopt)
		if err := rc.exchange(); err != nil {
			if err == errHold {
				rc.planHeld()
				return
			}
			rc.answer(err)
			return
		}
	}
	rc.responseHead()
}

// responseHead takes the upstream response head in rc.x: its response stages run and the
// body is planned, or it is refused (or, for a WebSocket upgrade, the tunnel is next).
func (rc *RequestCtx) responseHead() {
	if rc.x.Resp.Status == 101 {
		var err error = ErrUnexpectedUpgrade // no upgrade was asked for: a protocol error
		if rc.websocket {
			err = rc.acceptWebSocket()
		} else {
			rc.outcome.UpstreamError = metrics.ReasonProtocol
		}
		if err != nil {
			rc.keepAlive = false
			rc.dropUpstream()
			rc.answer(err)
			return
		}
	}
	if err := rc.route.Chain.onResponse(rc); err != nil {
		rc.upgraded = false
		rc.dropUpstream()
		rc.answer(err)
		return
	}
	if rc.upgraded {
		return // the engine hands the connection to Tunnel
	}
	rc.planBody()
}

// RefusePick records, from a PickStage's OnPick, why the stage left the service no backend
// in this pick: when the service then has none to give, err is what the request is answered
// with (after the route's fallback stages had their turn) instead of ErrNoBackend.
func (rc *RequestCtx) RefusePick(err error) { rc.pickWhy = err }

// TakePick makes t count the request on the backend chosen in this pick, from a PickStage's
// OnPick (nil, the default at each pick: the pipeline counts it; a later call replaces an
// earlier one). When t refuses the backend, nothing is counted and the pick is made again, the
// pick stages judging afresh: the backend another request filled meanwhile is then left out
// by their judgement, not by the request's own choice.
func (rc *RequestCtx) TakePick(t Taker) { rc.pickTake = t }

// Reject answers a request the engine refused before routing (a framing error, a head or
// body over its limit) with ge: the reply carries an X-Request-Id and closes the connection,
// and the configuration's completion stages (access log) and metrics see it like any other
// request. The engine writes the reply (AppendHead, or the reply accessors) and calls Finish.
// rc.Req holds whatever the engine parsed of the request, possibly nothing.
func (ep *Entrypoint) Reject(rc *RequestCtx, ge *GatewayError) {
	rc.reset(ep, time.Now())
	ep.m.Request()
	rc.keepAlive = false
	rc.isHEAD = len(rc.Req.Method) == 4 && string(rc.Req.Method) == "HEAD"
	rc.requestID = appendNewRequestID(rc.requestID[:0])
	rc.hooks = ep.res.Hooks()
	rc.fail(ge)
}

// BodyBound returns the smallest body bound of the stages of the route that request head req
// resolves to on ep (its body-limit middlewares' max_bytes, BodyBounder), and whether it has
// one. An engine calls it for a request with a body once the head is parsed, and stops
// reading the body once it is longer (http1.Request.BodyCut): the route refuses the request
// without it. It allocates nothing. It runs on an event loop for each such request, so it
// matches no route when the Resolver knows that no bound of the entrypoint's routes can
// apply (BodyBoundResolver): it then reports none, also for a route that has one, but not
// below req's Content-Length.
func (ep *Entrypoint) BodyBound(req *http1.Request) (int64, bool) {
	if string(req.Path) == "*" {
		return 0, false
	}
	if ep.bb != nil {
		return ep.bb.BodyBound(ep.Name, req)
	}
	rt, _ := ep.res.Resolve(ep.Name, req)
	if rt == nil {
		return 0, false
	}
	return rt.Chain.BodyBound()
}

// route resets rc for its request (which started at now), takes its request ID, resolves its
// route and runs the route's request stages; it returns the answer when the request goes no
// further.
func (ep *Entrypoint) route(rc *RequestCtx, now time.Time) error {
	rc.reset(ep, now)
	ep.m.Request()
	rc.isHEAD = len(rc.Req.Method) == 4 && string(rc.Req.Method) == "HEAD"
	rc.trusted = ep.trusts(rc.peer)
	rc.maxFwd = maxForwards(&rc.Req)
	rc.takeRequestID()
	if string(rc.Req.Path) == "*" {
		// OPTIONS * asks about the server in general (RFC 9110 §9.3.7), not about a resource a
		// route serves: the gateway is that server to its clients and answers it itself, as
		// Go's net/http and so Traefik and Caddy do. The parser lets asterisk-form through for
		// OPTIONS alone.
		rc.hooks = ep.res.Hooks()
		rc.maxFwd = 0
		return nil
	}
	rc.route, rc.hooks = ep.res.Resolve(ep.Name, &rc.Req)
	if rc.route == nil {
		return ErrNoRoute
	}
	rc.service = rc.route.Service
	err := rc.route.Chain.onRequest(rc)
	if openai.AnthropicPath(rc.Req.Path) {
		// The gateway's own answers for the upstream (502, 504, the SSE error event of a cut
		// stream) are read by the client of the API the upstream serves at the path it is
		// sent (after strip-prefix): on Anthropic's Messages API, in Anthropic's shape, as
		// the middlewares' refusals on that path are. A model router has set it already.
		rc.errShape = AnthropicErrors
	}
	return err
}

// trusts reports whether peer a is in TrustedIPs. A scan of the list: it holds the few load
// balancers in front of sluice, and allocates nothing.
func (ep *Entrypoint) trusts(a netip.Addr) bool {
	for _, p := range ep.TrustedIPs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// pick chooses the next backend for the request: the route's pick stages first narrow the
// choice (a copy of the request's own, judged afresh at every pick), then the backend chosen
// is counted (by the stages' Taker when one was given: a backend it refuses sends the choice
// back to the pick stages), then its vet stages may refuse it (it is then excluded for the
// request, and the choice made again). It builds the upstream head in rc.upHead. When no
// backend is eligible it returns nil and the answer of the last vet refusal (nil when none
// refused).
func (rc *RequestCtx) pick() (*Backend, error) {
	if rc.service == nil {
		return nil, nil
	}
	var refused error
	rc.choice.StrictRefusals = rc.route.RetryOverload
	for {
		c := &rc.choice
		rc.pickWhy, rc.pickTake = nil, nil
		if rc.route.Chain.picks() {
			rc.pickC.CopyFrom(c)
			rc.route.Chain.onPick(rc, &rc.pickC)
			c = &rc.pickC
		}
		b := rc.service.choose(c)
		take := rc.pickTake
		rc.pickTake = nil // held for this pick only
		if b == nil {
			if refused == nil {
				refused = rc.pickWhy
			}
			return nil, refused
		}
		switch {
		case take == nil:
			b.LB.Acquire()
		case !take.Take(b.LB):
			// Filled since the stages judged it: they judge again, on counts another
			// request moved, so this ends as a CAS loop does.
			continue
		}
		if err := rc.route.Chain.onVet(rc, b); err != nil {
			// Each refusal excludes one more backend, so this ends. A vet stage before the
			// one that refused may have let b through: nothing was sent to it.
			rc.lastTry = TryNeither
			refused = err
			b.Release()
			rc.Exclude(b.LB.ID)
			continue
		}
		rc.lastTry = TryInFlight
		if rc.upHead == nil {
			// Borrowed for the round trip only: an idle keep-alive connection keeps no head
			// buffer (thousands of idle connections would each pin one).
			rc.upHead = GetBuf()
		}
		*rc.upHead = appendUpstreamHead((*rc.upHead)[:0], rc, b)
		return b, nil
	}
}

// exchange picks a backend and runs the upstream round trip, leaving rc.x with the response
// head. A connect failure sent nothing, so it is safe to retry for any method (as nginx's
// proxy_next_upstream error): the backend is excluded, counted by passive health, and the
// request tries another backend of the service, at most MaxConnectTries backends of it; then
// the route's fallback stages may send it to another service. Any other failure is answered
// at once. It returns the gateway error to answer with when no
// backend answered.
func (rc *RequestCtx) exchange() error {
	if rc.Req.BodyCut > 0 {
		// The engine stopped reading the body at the route's bound, and no stage refused the
		// request (a reload between its head and its routing changed the route): the body
		// in hand is not the request's.
		return ErrBodyCut
	}
	rc.try, rc.attempts, rc.last = 0, 0, ErrNoBackend
	for {
		b, err := rc.nextBackend()
		if b == nil {
			return err
		}
		if again, err := rc.afterTry(b, rc.roundTrip(b)); !again {
			return err
		}
	}
}

// nextBackend chooses the backend of the request's next try (the route's fallback stages may
// move the request to another service when one is exhausted), or returns nil and the answer
// when none is left.
func (rc *RequestCtx) nextBackend() (*Backend, error) {
	for {
		if err := rc.enterService(); err != nil {
			return nil, err
		}
		var b *Backend
		var refused error
		if rc.try < MaxConnectTries {
			b, refused = rc.pick()
		}
		rc.try++
		if b == nil {
			rc.foldRefusals()
			if refused != nil && rc.last == ErrNoBackend {
				rc.last = refused // a pick stage kept the backends out, and says why
			}
			// This service is exhausted: a fallback stage may name another.
			if !rc.route.Chain.onExhausted(rc) {
				return nil, rc.last
			}
			rc.try = 0 // a new service gets its own tries
			continue
		}
		rc.backend, rc.tried = b, b
		if m := rc.service.Mirror; m != nil && !slices.Contains(rc.mirrored, rc.service) {
			// Each service the request reaches (a model's next target's too) copies it to
			// its shadow once, whatever backends it tries there.
			rc.mirrored = append(rc.mirrored, rc.service)
			// A shadow that accepted a copied upgrade would hold a tunnel nobody uses, and
			// one of the mirror's senders with it until its timeout.
			if !rc.websocket {
				m.Offer(rc)
			}
		}
		return b, nil
	}
}

// afterTry judges the round trip to b that ended with err: again reports that the request
// goes to another backend (nextBackend); otherwise err is the answer, or nil when rc.x holds
// the response head to relay.
func (rc *RequestCtx) afterTry(b *Backend, err error) (again bool, _ error) {
	if !errors.Is(err, pool.ErrDial) {
		rc.attempts++
	}
	if err == nil && rc.route.Chain.retries() {
		if retry, werr := rc.retryAfter(b, rc.attempts, rc.x.Resp.Status, nil); werr != nil {
			return false, werr
		} else if retry {
			rc.try = 0 // each attempt gets its own connect tries
			return true, nil
		}
	}
	if err == nil {
		b.LB.ConnectSucceeded()
		rc.outcome.UpstreamError = "" // an earlier connect failure was retried away
		if ra, ok := rc.overloaded(); ok {
			// The upstream refused the request for now and said for how long: it did not
			// act on it, so another backend may take it.
			b.LB.RefuseFor(rc.x.Resp.Status, ra)
			rc.lastTry = TryNeither
			rc.last = shorterRetry(rc.last, rc.x.Resp.Status, ra)
			rc.Exclude(b.LB.ID)
			rc.dropUpstream()
			b.Release()
			rc.backend = nil
			return true, nil
		}
		return false, nil
	}
	if err == errClientGone {
		return false, err
	}
	if !errors.Is(err, pool.ErrDial) {
		if rc.route.Chain.retries() {
			// The route's retry stage decides first: its budget and backoff bound what
			// it sends again, to any backend (this one too, when it is the only one).
			if retry, werr := rc.retryAfter(b, rc.attempts, 0, err); werr != nil {
				return false, werr
			} else if retry {
				rc.try = 0 // each attempt gets its own connect tries
				return true, nil
			}
		}
		if !rc.mayResend(err) {
			return false, rc.upstreamFailed(b, err)
		}
		// The upstream took the request and left without a response byte: the request
		// goes to another backend (the failure is counted in the metrics all the same).
		rc.last = rc.upstreamFailed(b, err)
		rc.lastTry = TryFailed
		rc.route.M.UpstreamError(rc.outcome.UpstreamError)
		rc.countedReason = rc.outcome.UpstreamError
		rc.Exclude(b.LB.ID)
		rc.dropUpstream()
		b.Release()
		rc.backend = nil
		return true, nil
	}
	if pool.LocalResource(err) {
		// The gateway's own host is short of descriptors, memory or ports: the backend is
		// not judged (no ejection, no breaker failure), and another would fail alike.
		rc.ep.elog.shortOfResources(rc.route.Name, b.URL, err)
		rc.lastTry = TryNeither
		rc.dropUpstream()
		b.Release()
		rc.backend = nil
		return false, ErrGatewayResources
	}
	b.LB.ConnectFailed()
	rc.ep.elog.upstreamFailed(rc.route.Name, b.URL, "connect", err)
	// Each failed connect counts, also when a later backend answers; the outcome names the
	// dial failure only while no backend did.
	rc.route.M.UpstreamError(metrics.ReasonDial)
	rc.outcome.UpstreamError, rc.countedReason = metrics.ReasonDial, metrics.ReasonDial
	rc.lastTry = TryFailed
	rc.Exclude(b.LB.ID)
	rc.dropUpstream()
	b.Release()
	rc.backend = nil
	rc.last = ErrUpstreamDial
	return true, nil
}

// enterService runs the hooks of the request's service the first time the request reaches
// it, and returns their answer when one refuses it.
func (rc *RequestCtx) enterService() error {
	s := rc.service
	if s == nil || len(s.Hooks) == 0 {
		return nil
	}
	for _, e := range rc.entered {
		if e == s {
			return nil
		}
	}
	rc.entered = append(rc.entered, s)
	rc.enteredAt = append(rc.enteredAt, time.Now())
	rc.hookAt = len(rc.entered) - 1
	for i, h := range s.Hooks {
		if !rc.held && rc.mayHold(h, i) {
			return errHold
		}
		if err := h.OnService(rc); err != nil {
			return err
		}
	}
	return nil
}

// retryAfter asks the route's retry stages whether attempt n, which ended with status or
// err, is tried again. When one says yes it ends the attempt (its response is dropped, its
// backend released), waits the backoff and reports true; a client that leaves meanwhile ends
// the request (errClientGone). Requests that may not be sent twice are never retried.
func (rc *RequestCtx) retryAfter(b *Backend, n, status int, err error) (bool, error) {
	if !rc.idempotent() {
		return false, nil
	}
	d, ok := rc.route.Chain.onRetry(rc, n, status, err)
	if !ok {
		return false, nil
	}
	if err != nil {
		rc.ep.elog.upstreamFailed(rc.route.Name, b.URL, "response head (retried)", err)
		rc.route.M.UpstreamError(UpstreamReason(err))
	}
	rc.lastTry = retriedVerdict(status, err)
	if rc.service != nil {
		rc.service.Health.Observe(b.LB.ID, true) // a retried attempt failed
	}
	rc.dropUpstream()
	b.Release()
	rc.backend = nil
	if d > 0 && rc.onLoop {
		rc.loopWait = d // an event loop must not sleep: its engine arms a timer (LoopWait)
		return true, nil
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-rc.Done():
			return false, errClientGone
		}
	}
	if rc.Canceled() {
		return false, errClientGone
	}
	return true, nil
}

// retriedVerdict judges the backend of an attempt a retry stage sends again, which ended with
// status or err: as a completion stage judges a request that ends so (ServerFailure).
func retriedVerdict(status int, err error) TryVerdict {
	if err != nil || ServerFailure(status) {
		return TryFailed
	}
	return TrySucceeded
}

// MaxConnectTries bounds the backends of one service a request tries after connect failures
// or overload refusals.
const MaxConnectTries = 3

// maxRetryAfter bounds how long an upstream's Retry-After keeps its backend out.
const maxRetryAfter = 5 * time.Minute

// overloaded reports whether the upstream answered 429 or 503 with a Retry-After (delay-seconds
// or an HTTP-date, RFC 9110 §10.2.3) on a route that moves such refusals to another backend,
// and for how long it asked to be left alone.
func (rc *RequestCtx) overloaded() (time.Duration, bool) {
	resp := &rc.x.Resp
	if !rc.route.RetryOverload || (resp.Status != 429 && resp.Status != 503) {
		return 0, false
	}
	v, ok := resp.HeaderValue("Retry-After")
	if !ok {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(string(v)); err == nil {
		d = time.Until(t)
	} else {
		return 0, false
	}
	return min(max(d, time.Second), maxRetryAfter), true
}

// foldRefusals makes the answer of a request on a route that moves refusals (a model route)
// that found no backend left the refusal of the service's backends still waiting out a
// Retry-After, when nothing else answered it: their status and the shortest time left, as if
// they had refused it again. The backends are not asked, so an overloaded fleet is not sent a
// request per request it cannot serve.
func (rc *RequestCtx) foldRefusals() {
	if !rc.route.RetryOverload || rc.last != ErrNoBackend && !isOverloaded(rc.last) {
		return
	}
	for _, b := range rc.service.Backends {
		if status, left, ok := b.LB.Refusing(); ok {
			rc.last = shorterRetry(rc.last, status, left)
		}
	}
}

func isOverloaded(err error) bool {
	ge, ok := err.(*GatewayError)
	return ok && ge.Code == overloadedCode
}

// shorterRetry returns the answer for a request every backend refused for now: the status of
// the refusals and the shortest Retry-After they asked for (what a client can best wait).
func shorterRetry(last error, status int, ra time.Duration) error {
	secs := int((ra + time.Second - 1) / time.Second)
	if isOverloaded(last) && last.(*GatewayError).RetryAfter <= secs {
		return last
	}
	typ, msg := RateLimit, "every backend of the model is rate limited; retry after the time given"
	if status == 503 {
		typ, msg = ServerError, "every backend of the model is overloaded; retry after the time given"
	}
	return &GatewayError{Status: status, Type: typ, Code: overloadedCode, Message: msg, RetryAfter: secs}
}

const overloadedCode = "upstream_overloaded"

// roundTrip sends the request to b and reads the response head into rc.x.
func (rc *RequestCtx) roundTrip(b *Backend) error {
	x := pool.AcquireExchange()
	rc.x = x
	if !rc.watch(x) {
		return errClientGone
	}
	x.Idempotent = rc.idempotent()
	rc.sent = time.Now()
	err := x.RoundTrip(b.Pool, *rc.upHead, rc.Req.Body, rc.isHEAD)
	ReleaseBuf(rc.upHead)
	rc.upHead = nil
	if d := x.ConnectTime(); d > 0 {
		b.M.Connected(d)
	}
	if err != nil {
		if rc.Canceled() {
			return errClientGone
		}
		return err
	}
	return nil
}

// upstreamFailed maps a failed round trip to the answer and records it.
func (rc *RequestCtx) upstreamFailed(b *Backend, err error) error {
	if err == errClientGone {
		return err
	}
	rc.outcome.UpstreamError = UpstreamReason(err)
	rc.ep.elog.upstreamFailed(rc.route.Name, b.URL, "response head", err)
	return UpstreamGatewayError(err)
}

// mayResend reports whether a request whose round trip failed with err after it may have
// reached the upstream (the connection closed or reset before a complete response head) may go
// to another backend: for an idempotent request (RFC 9112 §9.3.1, RFC 9110 §9.2.2), or any
// request on a service that allows resending non-idempotent ones (an upstream that crashed
// may have acted on it: an LLM generation run twice). Timeouts are not resent: a slow
// upstream is still working on the request.
func (rc *RequestCtx) mayResend(err error) bool {
	if errors.Is(err, pool.ErrTimeout) || errors.Is(err, pool.ErrUpstreamProto) ||
		errors.Is(err, pool.ErrAborted) || rc.Canceled() {
		return false
	}
	return rc.idempotent() || rc.service != nil && rc.service.RetryNonIdempotent
}

// idempotent reports whether the request may be sent again after it may have reached the
// upstream: an idempotent method (RFC 9110 §9.2.2) or an Idempotency-Key from the client.
func (rc *RequestCtx) idempotent() bool {
	switch string(rc.Req.Method) {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	_, ok := rc.Req.HeaderValue("Idempotency-Key")
	return ok
}

// maxForwards returns the Max-Forwards of a TRACE or OPTIONS request (RFC 9110 §7.6.2), or -1
// when it has none or an invalid one, or for another method (which may ignore the field: it
// goes upstream as received).
func maxForwards(req *http1.Request) int64 {
	if m := string(req.Method); m != "TRACE" && m != "OPTIONS" {
		return -1
	}
	v, ok := req.HeaderValue("Max-Forwards")
	if !ok || len(v) == 0 || len(v) > 18 {
		return -1
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// answerAsFinalRecipient answers a TRACE or OPTIONS request whose Max-Forwards is spent, as
// the final recipient it then is (RFC 9110 §7.6.2): OPTIONS gets 200 without content
// (§9.3.7), TRACE gets its request line and Host reflected as message/http (§9.3.8) and no
// other field, since the gateway cannot tell which ones carry credentials.
func (rc *RequestCtx) answerAsFinalRecipient() error {
	req := &rc.Req
	if string(req.Method) == "OPTIONS" {
		return rc.Reply(200, "", nil)
	}
	b := make([]byte, 0, 32+len(req.URI)+len(req.Host))
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URI...)
	b = append(b, " HTTP/1."...)
	// The version as received, a later minor one included, though the request is served as
	// HTTP/1.1: the reflection shows what the gateway received.
	b = strconv.AppendInt(b, int64(req.SentMinor), 10)
	b = append(b, "\r\n"...)
	if req.Host != nil {
		b = appendField(b, hdrHost, req.Host)
	}
	return rc.Reply(200, "message/http", append(b, "\r\n"...))
}

// dropUpstream ends the upstream exchange without reading its body (its connection closes).
func (rc *RequestCtx) dropUpstream() {
	if rc.x != nil {
		rc.unwatch()
		pool.ReleaseExchange(rc.x)
		rc.x = nil
	}
}

// planBody chooses how the upstream body goes to the client.
func (rc *RequestCtx) planBody() {
	resp := &rc.x.Resp
	f, ka := relay.Plan(resp, rc.isHEAD, &rc.Req)
	if f == relay.ChunkedRaw && rc.route.Chain.readsBody() {
		// Body stages read payload, not chunk framing: decode and re-chunk.
		f = relay.Chunk
	}
	if rc.FramesBodies && (f == relay.ChunkedRaw || f == relay.Chunk) {
		f = relay.Payload
	}
	if rc.enc != nil {
		f = rc.encodedFraming(f)
		if f == relay.None {
			// A response to HEAD: nothing to code, and no length to announce, since the
			// GET's coded body has none (RFC 9110 §8.6).
			resp.ContentLength = -1
			rc.releaseEncoder()
		}
	}
	rc.framing, rc.keepAlive = f, rc.keepAlive && ka
	rc.sse = relay.IsEventStream(resp)
	rc.outcome.Status = resp.Status
	// A coded event stream is timed and bounded as a stream, but relayed as opaque bytes: its
	// events cannot be told apart, and an error event would corrupt its coding.
	rc.relay.Reset(f, rc.sse && !relay.IsCoded(resp), rc.start)
	if f == relay.None {
		rc.ended = true
	} else if rc.sse {
		rc.streaming = true
		rc.route.M.StreamStarted()
		rc.armStreamDeadlines()
	}
}

// ErrClientGone is what a stage returns when its request's client left while the stage
// waited (RequestCtx.Done closed): the request ends as cancelled, with no answer written.
var ErrClientGone = errors.New("sluice: client connection closed")

var errClientGone = ErrClientGone

// answer makes err the response: a stage's Reply, a GatewayError, or a 500 for anything else.
func (rc *RequestCtx) answer(err error) {
	switch {
	case err == errClientGone:
		rc.outcome.Canceled = true
		rc.replied, rc.ended = true, true
		rc.keepAlive = false
	case err == &rc.reply:
		rc.replied, rc.ended = true, true
		rc.outcome.Status, rc.outcome.GatewayReply = rc.reply.Status, true
	default:
		rc.failWith(err)
	}
}

// failWith answers a GatewayError, possibly wrapped, or 500 for any other error. Apart from
// answer, so that the target errors.As needs is allocated only on this path: a refusal by a
// stage's reply allocates nothing.
func (rc *RequestCtx) failWith(err error) {
	if ge, ok := err.(*GatewayError); ok {
		rc.fail(ge)
		return
	}
	var ge *GatewayError
	if errors.As(err, &ge) {
		rc.fail(ge)
		return
	}
	rc.ep.elog.stageFailed(routeName(rc.route), err)
	rc.fail(ErrInternal)
}

// fail makes the gateway error ge the response.
func (rc *RequestCtx) fail(ge *GatewayError) {
	rc.reply = Reply{Status: ge.Status, ContentType: "application/json", RetryAfter: ge.RetryAfter, err: ge}
	rc.replied, rc.ended = true, true
	rc.outcome.Status, rc.outcome.GatewayReply = ge.Status, true
}

func routeName(rt *Route) string {
	if rt == nil {
		return ""
	}
	return rt.Name
}

// Replied reports whether the response is the gateway's own (no upstream body follows).
func (rc *RequestCtx) Replied() bool { return rc.replied }

// ClientGone reports whether the client left before a response could be written: the engine
// writes nothing and closes the connection.
func (rc *RequestCtx) ClientGone() bool { return rc.outcome.Canceled }

// CloseAfter makes this response the connection's last: its head says "Connection: close"
// (RFC 9112 §9.6). Call it before the response is written.
func (rc *RequestCtx) CloseAfter() { rc.keepAlive = false }

// KeepAlive reports whether the client connection may serve another request after this
// response (complete once the body was relayed).
func (rc *RequestCtx) KeepAlive() bool { return rc.keepAlive }

// Framing returns how the upstream body is framed for the client.
func (rc *RequestCtx) Framing() relay.Framing { return rc.framing }

// IsHEAD reports whether the request method is HEAD (a response without a body).
func (rc *RequestCtx) IsHEAD() bool { return rc.isHEAD }

// UpstreamStatus returns the status of the upstream's response head (0 before one arrived),
// for response stages.
func (rc *RequestCtx) UpstreamStatus() int {
	if rc.x == nil {
		return 0
	}
	return rc.x.Resp.Status
}

// UpstreamHeader returns the value of the first field named name (ASCII case-insensitive) of
// the upstream's response head, for response stages; false before a head arrived or when it
// has no such field. The value is valid until the request finishes.
func (rc *RequestCtx) UpstreamHeader(name string) ([]byte, bool) {
	if rc.x == nil || rc.x.Resp.Status == 0 {
		return nil, false
	}
	return rc.x.Resp.HeaderValue(name)
}

// Status returns the status of the response to write.
func (rc *RequestCtx) Status() int { return rc.outcome.Status }

// takeRequestID keeps the client's X-Request-Id when it is sane, or makes one.
func (rc *RequestCtx) takeRequestID() {
	if v, ok := rc.Req.HeaderValue("X-Request-Id"); ok && saneRequestID(v) {
		rc.requestID = append(rc.requestID[:0], v...)
		return
	}
	rc.requestID = appendNewRequestID(rc.requestID[:0])
}

// Request IDs are a random per-process prefix and a counter: unique across restarts and
// replicas without a random read per request.
var (
	idPrefix  = newIDPrefix()
	idCounter atomic.Uint64
)

func newIDPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func appendNewRequestID(dst []byte) []byte {
	dst = append(dst, idPrefix...)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, idCounter.Add(1), 36)
}

// AppendHead appends the response head to dst for engines that write raw bytes: the status
// line and fields of a gateway reply (with its body, except for HEAD) or of the upstream
// response, framed for the client.
func (rc *RequestCtx) AppendHead(dst []byte) []byte {
	if rc.replied {
		return rc.appendReply(dst)
	}
	if rc.held {
		return rc.appendHeldHead(dst)
	}
	dst = http1.AppendStatusLine(dst, 1, 1, rc.x.Resp.Status, rc.x.Resp.Reason)
	resp := &rc.x.Resp
	for i := range resp.Headers {
		if h := &resp.Headers[i]; passToClient(resp, h.Key) && !bytes.EqualFold(h.Key, hdrRequestID) {
			dst = appendField(dst, h.Key, h.Value)
		}
	}
	dst = rc.appendOwnFields(dst)
	switch rc.framing {
	case relay.Length:
		dst = appendContentLength(dst, resp.ContentLength)
	case relay.None:
		// A response to HEAD keeps the length the GET would have had (RFC 9110 §8.6).
		if resp.ContentLength >= 0 && resp.Status != 204 && resp.Status != 304 && resp.Status >= 200 {
			dst = appendContentLength(dst, resp.ContentLength)
		}
	case relay.ChunkedRaw, relay.Chunk:
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	}
	return appendConnection(dst, &rc.Req, rc.keepAlive)
}

// appendOwnFields appends the fields the gateway adds to every response: Date when the
// response has none, X-Request-Id and those response stages added (but a Vary that lists
// nothing new, varyListed).
func (rc *RequestCtx) appendOwnFields(dst []byte) []byte {
	if rc.needsDate() {
		dst = appendDate(dst, time.Now())
	}
	dst = appendField(dst, hdrRequestID, rc.requestID)
	for i, f := range rc.respExtra {
		if !rc.varyListed(i) {
			dst = appendField(dst, rc.kv[f.k0:f.k1], rc.kv[f.k1:f.v1])
		}
	}
	return dst
}

// appendReply appends the gateway's own response: status, content type, Retry-After, the
// gateway's fields, Content-Length and the body, which a HEAD request does not get (RFC 9110
// §9.3.2) though its length is the same.
func (rc *RequestCtx) appendReply(dst []byte) []byte {
	r := &rc.reply
	dst = http1.AppendStatusLine(dst, 1, 1, r.Status, nil)
	if r.ContentType != "" {
		dst = append(dst, "Content-Type: "...)
		dst = append(dst, r.ContentType...)
		dst = append(dst, "\r\n"...)
	}
	if r.RetryAfter > 0 {
		dst = append(dst, "Retry-After: "...)
		dst = strconv.AppendInt(dst, int64(r.RetryAfter), 10)
		dst = append(dst, "\r\n"...)
	}
	dst = rc.appendOwnFields(dst)
	body := r.Body
	if r.err != nil {
		// The error body is built behind the head, then the length goes in front of it.
		mark := len(dst)
		dst = appendErrorBodyShaped(dst, r.err, rc.errShape)
		n := len(dst) - mark
		var hdr [48]byte
		h := appendContentLength(hdr[:0], int64(n))
		h = appendConnection(h, &rc.Req, rc.keepAlive)
		if rc.isHEAD {
			rc.ownOut = 0
			return append(dst[:mark], h...)
		}
		rc.ownOut = int64(n)
		dst = append(dst, h...)
		copy(dst[mark+len(h):], dst[mark:mark+n])
		copy(dst[mark:], h)
		return dst
	}
	// 1xx, 204 and 304 have no content, and no Content-Length to announce it (RFC 9110 §8.6).
	noContent := r.Status < 200 || r.Status == 204 || r.Status == 304
	if !noContent {
		dst = appendContentLength(dst, int64(len(body)))
	}
	dst = appendConnection(dst, &rc.Req, rc.keepAlive)
	if rc.isHEAD || noContent {
		rc.ownOut = 0
		return dst
	}
	rc.ownOut = int64(len(body))
	return append(dst, body...)
}

// ReplyBody returns the body of a gateway reply, appended to dst (engines that set a body
// rather than write raw bytes). Its length counts as the body sent (Outcome.BytesOut), unless
// the request is HEAD or the status has no content; an engine that leaves the body out for
// another reason calls OmitReplyBody.
func (rc *RequestCtx) ReplyBody(dst []byte) []byte {
	n := len(dst)
	if rc.reply.err != nil {
		dst = appendErrorBodyShaped(dst, rc.reply.err, rc.errShape)
	} else {
		dst = append(dst, rc.reply.Body...)
	}
	rc.ownOut = 0
	if st := rc.reply.Status; !rc.isHEAD && st >= 200 && st != 204 && st != 304 {
		rc.ownOut = int64(len(dst) - n)
	}
	return dst
}

// OmitReplyBody records that the engine sends the gateway's reply without the body ReplyBody
// gave (an answer to a HEAD request the engine could not hand to the pipeline whole): no body
// bytes count as sent.
func (rc *RequestCtx) OmitReplyBody() { rc.ownOut = 0 }

// ReplyContentType and ReplyRetryAfter describe a gateway reply for engines that set fields.
func (rc *RequestCtx) ReplyContentType() string { return rc.reply.ContentType }

// ReplyRetryAfter returns the reply's Retry-After in seconds (0: none).
func (rc *RequestCtx) ReplyRetryAfter() int { return rc.reply.RetryAfter }

// VisitResponseFields calls f for each field of the response to the client besides framing,
// connection, content type and Date fields the engine sets itself: the upstream's end-to-end
// fields (for an upstream response) and the gateway's own (X-Request-Id, stage fields but a
// Vary that lists nothing new, varyListed).
func (rc *RequestCtx) VisitResponseFields(f func(k, v []byte)) {
	if rc.held {
		f(hdrContentType, valEventStream)
		f(hdrCacheControl, valNoCache)
	} else if !rc.replied {
		resp := &rc.x.Resp
		for i := range resp.Headers {
			if h := &resp.Headers[i]; passToClient(resp, h.Key) && !bytes.EqualFold(h.Key, hdrRequestID) {
				f(h.Key, h.Value)
			}
		}
	}
	f(hdrRequestID, rc.requestID)
	for i, r := range rc.respExtra {
		if !rc.varyListed(i) {
			f(rc.kv[r.k0:r.k1], rc.kv[r.k1:r.v1])
		}
	}
}

// ContentLength returns the upstream body length for Length framing (and HEAD), -1 otherwise.
func (rc *RequestCtx) ContentLength() int64 {
	if rc.x == nil {
		return -1
	}
	return rc.x.Resp.ContentLength
}

// Downstream is the client side as the pipeline sees it, for engines that push raw bytes.
type Downstream interface {
	// Send writes (*bp)[lo:hi] to the client, in order, and takes ownership of bp (return it
	// with ReleaseBuf once written). It blocks while the client has too much pending
	// (backpressure: the relay then stops reading the upstream) and fails once the client
	// left or read nothing for the entrypoint's client_stall_timeout.
	Send(bp *[]byte, lo, hi int) error
}

// earlyBodyBytes is the most body bytes that arrived with the upstream head which are sent
// together with the client head: one write for a short response saves a syscall and a
// wake-up of the client.
const earlyBodyBytes = 64 << 10

// WriteResponse writes the whole response to ds: the head, and the upstream body relayed
// read by read (zero buffering). It returns an error when the client left or the upstream
// failed mid-body; the connection must then be closed.
func (rc *RequestCtx) WriteResponse(ds Downstream) error {
	if rc.outcome.Canceled {
		return errClientGone
	}
	if rc.held {
		return rc.writeHeld(ds)
	}
	if err := rc.WriteHead(ds); err != nil {
		return err
	}
	return rc.WriteBody(ds)
}

// WriteBody writes the response body to ds after the head went out: the upstream body
// relayed read by read, coded when a stage set an encoder, or, for a held stream, its
// keep-alives and then the events or the error event that end the wait. Engines that write
// the head themselves and frame the body (FramesBodies) call it with a ds that sends each
// Send as one chunk, flushed. The errors are WriteResponse's.
func (rc *RequestCtx) WriteBody(ds Downstream) error {
	switch {
	case rc.outcome.Canceled:
		return errClientGone
	case rc.held:
		return rc.relayHeld(ds)
	case rc.BodyDone():
		return nil
	case rc.enc != nil:
		return rc.relayEncoded(ds)
	}
	return rc.relayTo(ds)
}

// BodyDone reports whether nothing more of the response is to be relayed after WriteHead.
func (rc *RequestCtx) BodyDone() bool { return rc.ended || rc.replied }

// WriteHead writes the response head to ds, with the body bytes that arrived with the
// upstream head when they are few, or the whole body when it is short and began with the
// head (CollectBody); RelayStep relays the rest. On an event loop it returns pool.ErrWouldBlock
// while such a body is still arriving: call it again when the upstream sends more. Any other
// error means the client left.
func (rc *RequestCtx) WriteHead(ds Downstream) error { return rc.WriteHeadAt(ds, time.Time{}) }

// WriteHeadAt is WriteHead for an engine that read the clock when the upstream's bytes
// arrived (an event loop, once per readiness event): now stamps the time to the first body
// bytes written with the head. A zero now reads the clock when the stamp is needed.
func (rc *RequestCtx) WriteHeadAt(ds Downstream, now time.Time) error {
	if rc.outcome.Canceled {
		return errClientGone
	}
	if err := rc.CollectBody(); err != nil {
		return err
	}
	hb := GetBuf()
	*hb = rc.AppendHead((*hb)[:0])
	var early int
	if body, ok := rc.takeWholeBody(now); ok {
		*hb = append(*hb, body...)
		rc.releaseWhole()
	} else if !rc.replied && !rc.ended && rc.framing.Raw() && rc.enc == nil {
		if k := rc.x.Buffered(); k > 0 && k <= earlyBodyBytes {
			h := len(*hb)
			*hb = slices.Grow(*hb, k)[:h+k]
			n, err := rc.x.ReadBody((*hb)[h:], true)
			*hb = (*hb)[:h+n]
			early = n
			switch {
			case errors.Is(err, io.EOF):
				rc.ended = true
			case err != nil:
				// Malformed chunk framing: the head goes out alone and the relay's next step
				// meets the same error and cuts the transfer, as it does on fasthttp, which
				// writes a chunked head before it reads any of the body.
				*hb, early = (*hb)[:h], 0
			}
			if early > 0 {
				rc.observe(rc.relay.Pass((*hb)[h:h+early], rc.stamp(now))) // a stream's first token
				rc.noteFraming()
				rc.route.Chain.onBody(rc, (*hb)[h:h+early])
			}
		}
	}
	if err := ds.Send(hb, 0, len(*hb)); err != nil {
		return rc.clientLeft()
	}
	return nil
}

// noteFraming records the chunk framing among the upstream wire bytes the relay has
// accounted for, read after each raw read of a ChunkedRaw body the relay took whole.
func (rc *RequestCtx) noteFraming() {
	if rc.framing == relay.ChunkedRaw {
		rc.relayFraming = rc.x.FramingBytes()
	}
}

// relayTo relays the upstream body to ds, one Send per upstream read.
func (rc *RequestCtx) relayTo(ds Downstream) error {
	for {
		if done, err := rc.RelayStep(ds); done {
			return err
		}
	}
}

// RelayStep relays one upstream read to ds. done reports the end of the relay: err is then
// nil after the whole body, pool.ErrWouldBlock when a loop-driven upstream has nothing more
// yet (call again when it sends more), or the error that ends the connection (the client
// left, or the upstream failed mid-body: an SSE client got the error event).
func (rc *RequestCtx) RelayStep(ds Downstream) (done bool, _ error) {
	return rc.RelayStepAt(ds, time.Time{})
}

// RelayStepAt is RelayStep for an engine that read the clock when the upstream's bytes
// arrived (an event loop, once per readiness event): now stamps the read's TTFT or ITL
// observation instead of a clock read per step. A zero now reads the clock after the read.
func (rc *RequestCtx) RelayStepAt(ds Downstream, now time.Time) (done bool, _ error) {
	// An event's start kept back by the last step goes in front of this read.
	bp, kept := rc.kept, rc.keptN
	rc.kept, rc.keptN = nil, 0
	if bp == nil {
		bp = getRelayBuf()
	}
	b := *bp
	at := relay.Headroom + kept
	n, err := rc.x.ReadBody(b[at:len(b)-relay.Tailroom], rc.framing.Raw())
	tail := kept // with nothing new, what was kept is still an event's start
	if n > 0 {
		rc.route.Chain.onBody(rc, b[at:at+n])
		tail = rc.relay.Keep(b[at:at+n], maxKeptBytes)
		rc.noteFraming()
	}
	if err != nil && rc.relay.InEvent() && errors.Is(err, io.EOF) {
		// An event stream delimited by its upstream's close that closed inside an event was
		// cut, not ended: its client would drop the open event and see the stream stop with
		// neither its end nor an error. It ends as one the upstream reset there does.
		if cut := rc.x.CutByClose(); cut != nil {
			err = cut
		}
	}
	tail, failed := afterRead(err, tail)
	if send := kept + n - tail; send > 0 {
		if tail > 0 && !failed {
			rc.keep(b[relay.Headroom+send : relay.Headroom+send+tail])
		}
		if now.IsZero() {
			now = time.Now()
		}
		lo, hi, o := rc.relay.FrameKept(b, send, now)
		rc.observe(o)
		if ds.Send(bp, lo, hi) != nil {
			return true, rc.clientLeft()
		}
	} else if tail > 0 && !failed {
		rc.kept, rc.keptN = bp, tail
	} else {
		ReleaseBuf(bp)
	}
	if failed {
		rc.relay.Drop() // the upstream failed inside that event: the error event replaces it
	}
	switch {
	case err == nil:
		return false, nil
	case err == pool.ErrWouldBlock:
		return true, err
	case errors.Is(err, io.EOF):
		rc.ended = true
		return true, rc.sendTail(ds, rc.relay.End)
	default:
		if rc.Canceled() {
			return true, rc.clientLeft()
		}
		keep := rc.keepAlive
		rc.bodyFailed(err)
		ev := rc.streamFailure(err)
		ended := false
		if rc.sendTail(ds, func(dst []byte) []byte {
			n := len(dst)
			dst = rc.relay.Fail(dst, ev)
			ended = len(dst) > n && (rc.framing == relay.Chunk || rc.framing == relay.Payload)
			return dst
		}) == nil && ended {
			// The client's response ends in good framing (the error event, then the last
			// chunk, which the engine writes for Payload framing): its connection may carry
			// the next request, as the client asked. Closing
			// it instead, which the head sent can no longer announce, fails the next request
			// of a client that pools connections and sends before it sees the close.
			rc.keepAlive = keep
			return true, nil
		}
		return true, err
	}
}

// maxKeptBytes bounds the start of an SSE event the relay keeps back until its end comes
// (relay.Keep): half a relay buffer, so that the read after it has as much room again.
const maxKeptBytes = relayBufBytes / 2

// afterRead says what becomes of the tail bytes of an event's start that a read left kept
// back (relay.Keep): kept while the body goes on, sent at its end (the upstream sent them),
// and dropped on a failure (failed: the error event replaces the cut event).
func afterRead(err error, tail int) (keep int, failed bool) {
	switch {
	case err == nil || err == pool.ErrWouldBlock:
		return tail, false
	case errors.Is(err, io.EOF):
		return 0, false
	}
	return tail, true
}

// keep copies p, the start of an event, into a relay buffer for the next step to send with
// what follows it.
func (rc *RequestCtx) keep(p []byte) {
	bp := getRelayBuf()
	rc.kept, rc.keptN = bp, copy((*bp)[relay.Headroom:], p)
}

// dropKept returns the buffer of an event's start kept back by a relay that ended without it.
func (rc *RequestCtx) dropKept() {
	if rc.kept != nil {
		ReleaseBuf(rc.kept)
		rc.kept, rc.keptN = nil, 0
	}
}

func (rc *RequestCtx) sendTail(ds Downstream, tail func([]byte) []byte) error {
	bp := GetBuf()
	*bp = tail((*bp)[:0])
	if len(*bp) == 0 {
		ReleaseBuf(bp)
		return nil
	}
	if ds.Send(bp, 0, len(*bp)) != nil {
		return rc.clientLeft()
	}
	return nil
}

func (rc *RequestCtx) clientLeft() error {
	rc.outcome.Canceled = true
	rc.keepAlive = false
	return errClientGone
}

// bodyFailed records an upstream failure after the response head went out.
func (rc *RequestCtx) bodyFailed(err error) {
	rc.ended, rc.keepAlive = true, false
	rc.outcome.UpstreamError = metrics.ReasonStream
	if rc.deadlineCut() != cutNone || errors.Is(err, pool.ErrTimeout) {
		rc.outcome.UpstreamError = metrics.ReasonTimeout
	}
	rc.ep.elog.upstreamFailed(rc.route.Name, rc.backend.URL, "body", err)
}

// sseErrorEvent is the event that ends an SSE stream whose upstream failed, so that a client
// never takes a cut stream for a finished one.
var sseErrorEvent = newSSEErrorEvents(ErrUpstreamStream)

// stamp returns now, or the clock when now is zero and the relay times this response's
// framing (a Content-Length body is not timed, so it needs no clock read).
func (rc *RequestCtx) stamp(now time.Time) time.Time {
	if now.IsZero() && rc.relay.Timed() {
		return time.Now()
	}
	return now
}

func (rc *RequestCtx) observe(o relay.Obs) {
	switch o.Kind {
	case relay.ObsFirst:
		if rc.service != nil && rc.service.StreamTimeouts.FirstToken > 0 {
			rc.firstByte()
		}
		rc.outcome.TTFT = o.D
		rc.route.M.FirstByte(o.D)
	case relay.ObsGap:
		rc.route.M.Gap(o.D)
		if rc.gaps != nil {
			rc.gaps.OnGap(o.D)
		}
	}
}

// Finish completes the request: it counts the outcome in metrics, runs the completion stages
// of the route and of the configuration (the access log), and releases the backend and the
// upstream exchange. Engines call it exactly once per Begin, after the response was written
// or abandoned.
func (rc *RequestCtx) Finish() { rc.FinishAt(time.Now()) }

// FinishAt is Finish for an engine that read the clock for the event that ends the request
// (an event loop): now is when the response ended, for its duration and the passive health.
func (rc *RequestCtx) FinishAt(now time.Time) {
	rc.finished = true
	rc.disarmStreamDeadlines()
	if t := rc.hold.ticker; t != nil {
		t.Stop()
	}
	if rc.streaming {
		rc.streaming = false
		rc.route.M.StreamEnded()
	}
	o := &rc.outcome
	switch {
	case rc.upgraded:
		o.BytesOut = rc.tunnelOut
	case rc.replied:
		o.BytesOut = rc.ownOut
	case rc.x != nil || rc.hadX:
		o.BytesOut = rc.relay.Bytes() - rc.relayFraming + rc.ownOut
		if !rc.ended && !o.Canceled && o.UpstreamError == "" {
			o.Canceled = true // the engine stopped before the end: the client left
		}
	default:
		o.BytesOut = rc.ownOut // a held stream that ended before it went upstream
	}
	rc.count(now)
	// A completion stage or hook that panics (a bug) must not keep the others, or the
	// releases below, from giving back what the request holds: each runs guarded, and the
	// first panic goes on to the engine once the request is finished.
	var failed *StagePanic
	for i, s := range rc.entered {
		rc.hookAt = i
		for _, h := range s.Hooks {
			failed = serviceDone(h, rc, failed)
		}
	}
	rc.observeHealth(now)
	if rt := rc.route; rt != nil {
		failed = rt.Chain.onComplete(rc, failed)
	}
	failed = rc.hooks.onComplete(rc, failed)
	rc.releaseEncoder()
	rc.releaseWhole()
	rc.dropKept()
	rc.dropUpstream()
	if rc.backend != nil {
		rc.backend.Release()
		rc.backend = nil
	}
	if failed != nil {
		panic(failed)
	}
}

// StagePanic is a panic recovered where it happened and raised again later or elsewhere:
// what Finish panics with, once the request is finished, when a completion stage or a service
// hook's OnServiceDone panicked, and what Tunnel panics with when its relay goroutine did.
// Value is what it panicked with, Stack the goroutine's stack where it did
// (runtime/debug.Stack).
type StagePanic struct {
	Value any
	Stack []byte
}

func (p *StagePanic) String() string { return fmt.Sprint(p.Value) }

// recovered returns failed, or when it is nil and v is a panic's value, a StagePanic of v.
func recovered(failed *StagePanic, v any) *StagePanic {
	if v == nil || failed != nil {
		return failed
	}
	return &StagePanic{Value: v, Stack: debug.Stack()}
}

// stagePanicOf returns v, a recovered panic's value, as a StagePanic: v itself when it is one,
// else one with the stack of the goroutine still panicking (call it from the deferred function
// that recovered v).
func stagePanicOf(v any) *StagePanic {
	if sp, ok := v.(*StagePanic); ok {
		return sp
	}
	return recovered(nil, v)
}

func serviceDone(h ServiceHook, rc *RequestCtx, failed *StagePanic) (out *StagePanic) {
	out = failed
	defer func() { out = recovered(out, recover()) }()
	h.OnServiceDone(rc)
	return out
}

// FinishAfterPanic ends, in place of Finish, a request whose engine recovered a panic out of
// the pipeline, so that what the request holds is given back all the same: its admission
// slot, its backend's count of requests in flight, a prefill/decode reservation (the
// completion stages), and its upstream connection, which is closed, its state unknown. The
// request counts as a 500 when no response had begun. It does nothing when Finish already
// ran for the request, or when the request never entered the pipeline. It returns a panic of
// its own, recovered, or nil; after one the engine must drop rc rather than pool it.
func (rc *RequestCtx) FinishAfterPanic() (again any) {
	if rc.finished || rc.ep == nil {
		return nil
	}
	defer func() { again = recover() }()
	if rc.x != nil {
		rc.x.Abort()
	}
	rc.keepAlive = false
	if rc.outcome.Status == 0 {
		rc.outcome.Status = 500
	}
	rc.FinishAt(time.Now())
	return nil
}

func (rc *RequestCtx) count(now time.Time) {
	o := &rc.outcome
	if o.GatewayReply && rc.reply.err != nil {
		rc.ep.m.GatewayError(o.Status)
	}
	rt := rc.route
	if rt == nil {
		return
	}
	if o.Canceled {
		rt.M.Canceled()
		return
	}
	if o.UpstreamError != "" && o.UpstreamError != rc.countedReason {
		rt.M.UpstreamError(o.UpstreamError)
	}
	rt.M.Response(o.Status, now.Sub(rc.start), o.BytesOut)
}
