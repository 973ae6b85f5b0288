package pipeline

import (
	"fmt"
	"time"

	"github.com/sluice-gw/sluice/core/balancer"
)

// A stage is one step of a router's pipeline, in the manner of Envoy's HTTP filters and
// Pingora's phases: it implements any of RequestStage, PickStage, VetStage, ResponseStage,
// FallbackStage and CompletionStage, and only the phases it needs. Stages are compiled into a
// Chain per router when a configuration is compiled, so a reload swaps whole chains and a
// request in flight finishes on the chain it started with. Per-request state lives in the
// RequestCtx, never in the stage: one stage value serves every request of its router
// concurrently.
//
// A request or response stage returns nil to continue, or an answer that ends the pipeline
// there: a *GatewayError (answered with its status and OpenAI-style JSON body), the *Reply of
// RequestCtx.Reply (answered as built), or any other error (answered 500 and logged).

// RequestStage runs after routing, before a backend is chosen: authentication, validation,
// admission, rewriting the request or answering it (a 401, a 429, a cached reply).
type RequestStage interface {
	OnRequest(rc *RequestCtx) error
}

// ResponseStage runs when the upstream's response head has arrived and before anything is
// written to the client: it may add response fields (RequestCtx.AddResponseHeader) or replace
// the upstream's answer with its own.
type ResponseStage interface {
	OnResponse(rc *RequestCtx) error
}

// VetStage vets the backend the balancer chose for the request, before anything is sent to
// it: at every choice, so also after a retry and after a fallback stage moved the request to
// another service. It returns nil to let the request go to b, or an answer to refuse b: b is
// then excluded for this request (as RequestCtx.Exclude) and the balancer chooses again among
// the others. When no backend is left, the request gets the last refusal's answer (a
// *GatewayError or the *Reply of RequestCtx.Reply) instead of the gateway's own no_backend,
// unless a fallback stage finds it another service. A circuit breaker keeps open backends
// out this way, so that a request reaches a healthy backend when there is one; at a choice
// after a try, RequestCtx.LastTry tells it how the backend it let through before did.
type VetStage interface {
	OnVet(rc *RequestCtx, b *Backend) error
}

// BodyStage sees the response body on its way to the client, read by read, as payload (chunk
// framing removed): token accounting, stream watchdogs. It must not keep p, modify it or
// block; it cannot change what the client gets.
type BodyStage interface {
	OnBody(rc *RequestCtx, p []byte)
}

// PickStage runs before each choice of a backend for the request: the first, and each one
// after a connect failure. It may leave backends of the request's service out of that one
// choice by adding their IDs to c.Exclude. c is a copy of the request's own choice, made
// afresh for every pick: the backends that failed stay out of it, and the stage's judgement
// (a worker at capacity, or more loaded than another) does not outlive the pick, so a retry
// judges again. A stage that judges the backends by the requests in flight to them (room left
// for one more) hands the counting of the backend chosen to a Taker (RequestCtx.TakePick), so
// that its judgement holds for the count the request joins. It runs on the request path and
// must not allocate or block.
type PickStage interface {
	OnPick(rc *RequestCtx, c *balancer.Choice)
}

// Taker counts a request in flight on the backend the balancer chose for it, in place of the
// pipeline's own count (balancer.Backend.Acquire), judging the backend again on the very count
// the request joins (balancer.Backend.AcquireFrom). A pick stage's judgement is made before
// the balancer chooses: requests choosing at once would otherwise all find a backend's last
// free slot free, on a count that holds none of them yet, and all be sent to it.
type Taker interface {
	// Take counts one more request in flight on b and reports true; or reports false,
	// counting nothing, when b may no longer take the request on the count it would join
	// (another request took its last free slot since the stage judged it). It refuses only
	// what the stage, judging again, would leave out: the pick is made again until it
	// takes one or the stages leave none. It must not allocate, block or lock.
	Take(b *balancer.Backend) bool
}

// FallbackStage runs when the request's service has no backend left to try (every one down,
// ejected, or failed to connect), before the gateway gives up: it may send the request to
// another service (RequestCtx.SetService, rewriting the request as that service needs) and
// report true, and the exchange goes on there; false lets the next fallback stage try, then
// the gateway answers the failure. A model router falls back to its next target priority.
type FallbackStage interface {
	OnExhausted(rc *RequestCtx) bool
}

// RetryStage decides whether a request goes to an upstream again after an attempt that put
// nothing before the client: the upstream answered with a status the stage retries (err nil),
// or the exchange failed before a response head (err). It is asked only for requests that may
// be sent twice (an idempotent method, RFC 9110 §9.2.2, or an Idempotency-Key), and only
// before the first response byte. n is the number of attempts made so far (1 after the
// first). It returns true and the time to wait to try again; the next attempt picks a backend
// afresh. When every retry stage says no, the last answer goes to the client as it came.
type RetryStage interface {
	OnRetry(rc *RequestCtx, n int, status int, err error) (time.Duration, bool)
}

// CompletionStage runs once the exchange is over: after the last byte, a failure or the
// client's departure, and also for requests answered by the gateway itself. It observes
// (metrics, access log, health feedback, token accounting); it cannot change the response.
type CompletionStage interface {
	OnComplete(rc *RequestCtx)
}

// LoopSafe is implemented by a stage (of any phase) or a ServiceHook that may run on an event
// loop, which serves every connection of the loop one event at a time: LoopSafe reports true
// when each of its phases returns at once (it never waits: no queue, no timer, no lock held
// across I/O, no write that can block) and costs bounded CPU, of the order of a header
// rewrite or a map lookup (no JSON parsing of bodies, no RSA or ECDSA signature check, no
// body hashing, no body coding: a stage that calls RequestCtx.SetEncoder is not LoopSafe, as
// the loop's relay does not code bodies). A route whose stages and service hooks all report
// true runs whole on the loop with upstream_io = "loop" (Entrypoint.LoopRoute); any other
// runs on a worker goroutine. A stage that does not implement LoopSafe is taken to be unsafe.
type LoopSafe interface {
	LoopSafe() bool
}

// BodyBounder is implemented by a request stage that refuses a request whose body is longer
// than MaxBodyBytes bytes (body-limit). The engines learn the smallest bound of a request's
// route from its head (Entrypoint.BodyBound) and stop reading a body past it
// (http1.Request.BodyCut), so that a body the route refuses is never read whole, and a
// request that declares one with Expect: 100-continue is answered before it is sent (RFC 9110
// §10.1.1). The stage must refuse a request whose Content-Length or BodyCut is over its
// bound as it refuses a body over it.
type BodyBounder interface {
	MaxBodyBytes() int64
}

// loopSafe reports whether v implements LoopSafe and says yes.
func loopSafe(v any) bool {
	ls, ok := v.(LoopSafe)
	return ok && ls.LoopSafe()
}

// Chain is the compiled list of stages of one router, by phase, in configuration order.
// The zero Chain runs nothing.
type Chain struct {
	request  []RequestStage
	vet      []VetStage
	response []ResponseStage
	pick     []PickStage
	fallback []FallbackStage
	retry    []RetryStage
	body     []BodyStage
	complete []CompletionStage
	// unsafeRun: a stage with a phase before completion is not LoopSafe; unsafeEnd: a
	// completion stage is not (the request may run on a loop and complete on a worker).
	unsafeRun, unsafeEnd bool
	// bodyBound is the smallest MaxBodyBytes of the BodyBounder stages, when bounded.
	bodyBound int64
	bounded   bool
}

// NewChain sorts stages into their phases, keeping their order. It returns an error for a
// value that implements none of the phase interfaces.
func NewChain(stages ...any) (*Chain, error) {
	c := &Chain{}
	for i, s := range stages {
		ok := false
		if rs, is := s.(RequestStage); is {
			c.request, ok = append(c.request, rs), true
		}
		if vs, is := s.(VetStage); is {
			c.vet, ok = append(c.vet, vs), true
		}
		if rs, is := s.(ResponseStage); is {
			c.response, ok = append(c.response, rs), true
		}
		if bs, is := s.(BodyStage); is {
			c.body, ok = append(c.body, bs), true
		}
		if ps, is := s.(PickStage); is {
			c.pick, ok = append(c.pick, ps), true
		}
		if fs, is := s.(FallbackStage); is {
			c.fallback, ok = append(c.fallback, fs), true
		}
		if rs, is := s.(RetryStage); is {
			c.retry, ok = append(c.retry, rs), true
		}
		if cs, is := s.(CompletionStage); is {
			c.complete, ok = append(c.complete, cs), true
		}
		if !ok {
			return nil, fmt.Errorf("pipeline: stage %d (%T) implements no phase", i, s)
		}
		if bb, is := s.(BodyBounder); is {
			if n := bb.MaxBodyBytes(); !c.bounded || n < c.bodyBound {
				c.bodyBound, c.bounded = n, true
			}
		}
		if _, moves := s.(FallbackStage); moves {
			// It may send the request to another service, whose backends LoopRoute did
			// not check (TLS, hooks).
			c.unsafeRun = true
		}
		if !loopSafe(s) {
			if _, completes := s.(CompletionStage); completes {
				c.unsafeEnd = true
			}
			switch s.(type) {
			case RequestStage, VetStage, ResponseStage, BodyStage, PickStage, RetryStage:
				c.unsafeRun = true
			}
		}
	}
	return c, nil
}

// BodyBound returns the smallest MaxBodyBytes of c's BodyBounder stages, and whether it has
// any.
func (c *Chain) BodyBound() (int64, bool) {
	if c == nil {
		return 0, false
	}
	return c.bodyBound, c.bounded
}

// Len returns the number of phase entries in c.
func (c *Chain) Len() int {
	if c == nil {
		return 0
	}
	return len(c.request) + len(c.pick) + len(c.vet) + len(c.response) + len(c.fallback) + len(c.retry) + len(c.body) + len(c.complete)
}

func (c *Chain) onRequest(rc *RequestCtx) error {
	if c == nil {
		return nil
	}
	for _, s := range c.request {
		if err := s.OnRequest(rc); err != nil {
			return err
		}
	}
	return nil
}

func (c *Chain) onVet(rc *RequestCtx, b *Backend) error {
	if c == nil {
		return nil
	}
	for _, s := range c.vet {
		if err := s.OnVet(rc, b); err != nil {
			return err
		}
	}
	return nil
}

func (c *Chain) onResponse(rc *RequestCtx) error {
	if c == nil {
		return nil
	}
	for _, s := range c.response {
		if err := s.OnResponse(rc); err != nil {
			return err
		}
	}
	return nil
}

func (c *Chain) readsBody() bool { return c != nil && len(c.body) > 0 }

func (c *Chain) onBody(rc *RequestCtx, p []byte) {
	if c == nil {
		return
	}
	for _, s := range c.body {
		s.OnBody(rc, p)
	}
}

// picks reports whether c has pick stages.
func (c *Chain) picks() bool { return c != nil && len(c.pick) > 0 }

func (c *Chain) onPick(rc *RequestCtx, choice *balancer.Choice) {
	for _, s := range c.pick {
		s.OnPick(rc, choice)
	}
}

func (c *Chain) onExhausted(rc *RequestCtx) bool {
	if c == nil {
		return false
	}
	for _, s := range c.fallback {
		if s.OnExhausted(rc) {
			return true
		}
	}
	return false
}

// retries reports whether c has retry stages.
func (c *Chain) retries() bool { return c != nil && len(c.retry) > 0 }

func (c *Chain) onRetry(rc *RequestCtx, n, status int, err error) (time.Duration, bool) {
	for _, s := range c.retry {
		if d, ok := s.OnRetry(rc, n, status, err); ok {
			return d, true
		}
	}
	return 0, false
}

// onComplete runs the completion stages, each guarded (RequestCtx.FinishAt); it returns
// failed, or the first panic of one of them.
func (c *Chain) onComplete(rc *RequestCtx, failed *StagePanic) *StagePanic {
	if c == nil {
		return failed
	}
	for _, s := range c.complete {
		failed = complete(s, rc, failed)
	}
	return failed
}

func complete(s CompletionStage, rc *RequestCtx, failed *StagePanic) (out *StagePanic) {
	out = failed
	defer func() { out = recovered(out, recover()) }()
	s.OnComplete(rc)
	return out
}
