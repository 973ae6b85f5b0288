package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/pool"
)

// The upstream exchange driven by an event loop. An engine whose event loop owns both the
// client connection and non-blocking upstream connections runs a request in steps instead of
// Begin and WriteResponse, which block:
//
//	b := ep.BeginLoop(rc, now)       // nil: rc holds the answer (a gateway reply)
//	for b != nil {
//		x := rc.LoopExchange(b, now) // attach an upstream connection to x (pool.AttachLoop),
//		                             // write rc.UpstreamHead() and rc.Req.Body, poll the head
//		b = rc.LoopTried(b, err)     // another backend, or nil: the response is ready
//		if d := rc.LoopWait(); b == nil && d > 0 {
//			b = rc.LoopResume(gone)  // after d (a retry's backoff)
//		}
//	}
//	rc.WriteHeadAt(ds, now); rc.RelayStepAt(ds, now) until done (pool.ErrWouldBlock from
//	                                 // either: wait for bytes)
//	rc.FinishAt(now)                 // rc.Finish on a worker when rc.FinishWaits()
//
// now is the engine's one clock reading for the event that runs the step: every stamp and
// deadline of the step uses it, since what the step handles arrived together.
// The decisions (routing, the route's stages, backend choice, the retry rules, response
// planning, the relay and its SSE error event) are the same code as on a worker; only the
// waiting differs: a retry's backoff is a timer the engine arms (LoopWait, LoopResume)
// instead of a sleep. Only routes whose stages never wait and cost little CPU run this way
// (LoopRoute, LoopSafe).

// LoopRoute reports whether the request may run on an event loop: its route (as the
// configuration in force resolves it now) has a service of plain-HTTP backends, every stage
// of the route and every hook of the service is LoopSafe (a stage that answers only at
// completion may be unsafe: then Finish runs on a worker, FinishWaits), no fallback stage
// (it may move the request to a service not checked here), the service has no mirror or
// stream deadlines, and the request is no WebSocket upgrade. Other stages may wait
// (admission queues, cold starts, P/D legs) or cost CPU (JSON, signatures), which an event
// loop must not; TLS upstreams handshake. Anything else runs on a worker.
func (ep *Entrypoint) LoopRoute(req *http1.Request) bool {
	if asksWebSocket(req) {
		return false // the tunnel runs off the loop
	}
	rt, _ := ep.res.Resolve(ep.Name, req)
	return rt != nil && rt.onLoop()
}

// Route.loop caches onLoop's answer: 0 unknown, 1 yes, 2 no. Routes are immutable.
func (rt *Route) onLoop() bool {
	switch atomic.LoadUint32(&rt.loop) {
	case 1:
		return true
	case 2:
		return false
	}
	// A mirror copies the request's body, and stream deadlines run timers against the
	// exchange: both stay on workers.
	svc := rt.Service
	ok := svc != nil && !rt.Chain.unsafeRun && svc.Mirror == nil && !svc.StreamTimeouts.Enabled()
	if ok {
		for _, h := range svc.Hooks {
			if !loopSafe(h) {
				ok = false
				break
			}
		}
	}
	if ok {
		for _, b := range svc.Backends {
			if b.Pool == nil || b.Pool.IsTLS() {
				ok = false
				break
			}
		}
	}
	v := uint32(2)
	if ok {
		v = 1
	}
	atomic.StoreUint32(&rt.loop, v)
	return ok
}

// loopFlag is a Route's cached onLoop answer, read and written atomically (a plain integer, so
// that a Route stays copyable).
type loopFlag = uint32

// BeginLoop starts a request on an event loop (see LoopRoute): request ID, routing and the
// first backend choice. now is when the request's head completed (the request's start). It
// returns the backend to send the request to, or nil when the response is ready (a gateway
// answer).
func (ep *Entrypoint) BeginLoop(rc *RequestCtx, now time.Time) *Backend {
	err := ep.route(rc, now)
	rc.onLoop = true
	ep.m.LoopRequest()
	if err != nil {
		rc.answer(err)
		return nil
	}
	if rc.maxFwd == 0 {
		rc.answer(rc.answerAsFinalRecipient())
		return nil
	}
	rc.try, rc.attempts, rc.last = 0, 0, ErrNoBackend
	return rc.loopNext()
}

// LoopWait returns how long the request waits before its next try (a retry stage's backoff)
// when LoopTried returned nil: the engine arms a timer and then calls LoopResume. 0: the
// response is ready.
func (rc *RequestCtx) LoopWait() time.Duration { return rc.loopWait }

// LoopResume goes on after the wait LoopWait named: it returns the backend of the next try,
// or nil when the response is ready. gone reports that the client left during the wait: the
// request then ends there, as on a worker.
func (rc *RequestCtx) LoopResume(gone bool) *Backend {
	rc.loopWait = 0
	if gone || rc.Canceled() {
		rc.answer(errClientGone)
		return nil
	}
	return rc.loopNext()
}

func (rc *RequestCtx) loopNext() *Backend {
	b, err := rc.nextBackend()
	if b == nil {
		rc.answer(err)
	}
	return b
}

// LoopExchange returns the exchange of the try on b: the engine attaches an upstream
// connection (pool.Exchange.AttachLoop), writes UpstreamHead and rc.Req.Body and polls the
// response head, then calls LoopTried; now is when the try begins (its request goes out). It
// returns nil when the client already left (then call LoopTried with ErrClientGone).
func (rc *RequestCtx) LoopExchange(b *Backend, now time.Time) *pool.Exchange {
	rc.dropUpstream() // a keep-alive race: the try goes on on a fresh connection
	x := pool.AcquireExchange()
	rc.x = x
	if !rc.watch(x) {
		return nil
	}
	x.Idempotent = rc.idempotent()
	rc.sent = now
	return x
}

// UpstreamHead returns the request head for the backend of the current try.
func (rc *RequestCtx) UpstreamHead() []byte { return *rc.upHead }

// LoopTried ends the try on b with the result of its round trip (nil: rc.x holds the response
// head) and applies the retry rules: it returns the backend of the next try, or nil when the
// response is ready (the upstream's, planned, or a gateway answer).
func (rc *RequestCtx) LoopTried(b *Backend, err error) *Backend {
	if rc.upHead != nil {
		ReleaseBuf(rc.upHead)
		rc.upHead = nil
	}
	if rc.x != nil {
		if d := rc.x.ConnectTime(); d > 0 {
			b.M.Connected(d)
		}
	}
	if err != nil && rc.Canceled() {
		err = errClientGone
	}
	again, ans := rc.afterTry(b, err)
	if again {
		if rc.loopWait > 0 {
			return nil // the engine waits, then LoopResume
		}
		return rc.loopNext()
	}
	if ans != nil {
		rc.answer(ans)
		return nil
	}
	rc.responseHead()
	return nil
}

// ResponseHeaderTimeout and StreamIdleTimeout are the current try's upstream timeouts, which
// an event loop enforces itself.
func (rc *RequestCtx) ResponseHeaderTimeout() time.Duration {
	return rc.backend.Pool.ResponseHeaderTimeout()
}

// StreamIdleTimeout: see ResponseHeaderTimeout.
func (rc *RequestCtx) StreamIdleTimeout() time.Duration { return rc.backend.Pool.StreamIdleTimeout() }

// FinishWaits reports whether Finish may wait or cost CPU (a completion stage of the route
// or of the configuration is not LoopSafe), so that an event loop runs it on a worker. The
// service's hooks are LoopSafe on a route LoopRoute let through.
func (rc *RequestCtx) FinishWaits() bool {
	return (rc.route != nil && rc.route.Chain.endsUnsafe()) || rc.hooks.endsUnsafe()
}

func (c *Chain) endsUnsafe() bool { return c != nil && c.unsafeEnd }

// Exchange returns the upstream exchange of the current try (nil: none), for an engine that
// drives it.
func (rc *RequestCtx) Exchange() *pool.Exchange { return rc.x }

// ReleaseUpstream releases the upstream exchange (its connection goes back to the loop that
// drives it, or is closed) before Finish, which may then run elsewhere. The outcome keeps
// what was relayed.
func (rc *RequestCtx) ReleaseUpstream() {
	if rc.x != nil {
		rc.hadX = true
		rc.dropUpstream()
	}
}
