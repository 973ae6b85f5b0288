package pd

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pool"
)

// maxPairTries bounds the worker pairs of one target a request tries before the router
// falls back to its next target.
const maxPairTries = 3

// abortTimeout bounds an abort call: it is best effort, and a worker that does not answer in
// time drops the state when its reservation expires.
const abortTimeout = 500 * time.Millisecond

// overheadHook, when set (by the overhead benchmark), gets for each request served the
// gateway's own time from the start of Serve to the decode response head: that time less the
// time spent waiting on worker calls (a batched prepare counts its call, not its queue).
var overheadHook func(time.Duration)

// pairHook, when set (by tests), runs in each request once pickPair has chosen a pair (and
// counted the request on it), before the exchange on it begins: a test holds requests there
// so that they all choose while none has gone further.
var pairHook atomic.Pointer[func()]

// Exhausted is what Serve returns when no pair of the target could serve the request before
// any byte went out: the model router then tries its next target. Answer is what the client
// gets when no target is left (it unwraps to it, so a pipeline answers it as is).
type Exhausted struct{ Answer *pipeline.GatewayError }

func (e *Exhausted) Error() string {
	return "pd: every worker pair of the target failed: " + e.Answer.Message
}

// Unwrap returns Answer.
func (e *Exhausted) Unwrap() error { return e.Answer }

// execution is one request's exchange from the decode response on: what Complete needs to
// end it.
type execution struct {
	t      *Target
	id     string
	pr     pair
	ctx    context.Context
	cancel context.CancelFunc
	stopX  func() bool // unregisters the exchange's abort on ctx
	headAt time.Time
}

var execSlot pipeline.Slot

// Serve runs rc's request, a chat completion admitted for this target's alias whose body the
// router has rewritten for the target, on a pair of the target's workers: decode/prepare,
// prefill/execute, then decode/execute, whose response becomes rc's upstream response
// (pipeline.RequestCtx.Adopt). peek is what openai.Peek read from sent, the body as the
// client sent it (its spans locate the prompt there, not in the rewritten body). It returns
// nil then; pipeline.ErrClientGone when the client left; *Exhausted when every pair it tried
// failed in a way another target may not; or the answer for a request no pair can serve (a
// worker's 4xx, an unsupported endpoint). Complete must run when the request completes.
func (t *Target) Serve(rc *pipeline.RequestCtx, peek *openai.Request, sent []byte) error {
	if peek.Endpoint != openai.ChatCompletions {
		return ErrEndpoint
	}
	fwd := rc.Req.Body
	var cacheKey string
	caller := consumer.From(rc)
	if peek.PromptCacheKey != nil {
		b, err := withoutField(fwd, "prompt_cache_key")
		if err != nil {
			return pipeline.ErrInternal // the body was validated: it is an object
		}
		fwd = b
		cacheKey = t.keyer.Derive(identity(caller), t.opts.Alias, openai.ChatCompletions.Path(), peek.PromptCacheKey)
	}
	var aff *affinityReq
	if t.affinity != nil {
		d := affinity.Domain{Route: rc.Route().Name, Model: t.opts.Alias, Endpoint: openai.ChatCompletions}
		if caller != nil {
			d.Environment, d.Generation = caller.Environment, uint64(caller.Generation)
		}
		// The fingerprint is the body's as sent: the rewritten model does not reach the
		// prompt, and peek's spans hold for that body alone.
		aff = fingerprint(d, sent, peek)
		defer releaseAffinity(aff)
	}
	key := RequestKey(fwd)
	began := time.Now()
	var legs time.Duration // time spent in calls to workers, all attempts
	ctx, cancel := context.WithTimeout(context.Background(), t.opts.ExecutionTimeout)
	// The client leaving cancels every call in flight (the watch ends with ctx).
	done := rc.Done()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var ex excluded
	var last error = pipeline.ErrNoBackend
	full := false       // the last choice found no pair because workers were at capacity
	busyAnswer := false // a worker tried answered 429
	for try := 0; try < maxPairTries; try++ {
		pr, ok, atCapacity := t.pickPair(key, &ex, aff)
		if !ok {
			full = atCapacity
			break
		}
		if h := pairHook.Load(); h != nil {
			(*h)()
		}
		if try > 0 {
			t.m.PairRetry()
		}
		culprit, err := t.attempt(ctx, cancel, rc, pr, fwd, cacheKey, aff, &legs)
		if err == nil {
			if h := overheadHook; h != nil {
				h(time.Since(began) - legs)
			}
			return nil
		}
		if rc.Canceled() {
			cancel()
			return pipeline.ErrClientGone
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
			return errExecutionTimeout
		}
		if pool.LocalResource(err) {
			// The gateway's own host is short of descriptors, memory or ports: no worker is
			// at fault, and another pair would fail alike.
			cancel()
			if n, ok := t.shortLog.Allow(); ok {
				slog.Warn("cannot connect a worker: the gateway is short of resources", "target", t.name, "error", err.Error(), "suppressed_since_last", n)
			}
			return pipeline.ErrGatewayResources
		}
		if !retryable(err) {
			cancel()
			return answerFor(rc, err)
		}
		busyAnswer = busyAnswer || busy(err)
		if isDial(err) {
			// Nothing listens there now: other requests leave it out for a while too.
			t.service.Backends[culprit].LB.ConnectFailed()
		}
		ex.add(culprit)
		last = err
	}
	cancel()
	t.m.Exhausted()
	var ge *pipeline.GatewayError
	if busyAnswer {
		// A worker refused it for want of room: the model is busy, and a client that retries
		// shortly may be served, where a 502 would say it is broken. (answerFor is not asked:
		// it would set the worker's own 429 body as the reply.)
		ge = ErrWorkersBusy
	} else if ge, _ = answerFor(rc, last).(*pipeline.GatewayError); ge == nil {
		ge = errWorkerFailed
	}
	if last == pipeline.ErrNoBackend {
		switch {
		case full:
			// The model is busy, not broken: the answer of a full admission queue.
			ge = pipeline.ErrAtCapacity
		case t.workers.Short():
			// No pair for want of fresh observations the gateway could not poll for.
			ge = pipeline.ErrGatewayResources
		default:
			ge = pipeline.ErrNoBackend
		}
	}
	return &Exhausted{Answer: ge}
}

func identity(c *consumer.Consumer) Identity {
	if c == nil {
		return Identity{}
	}
	return Identity{Consumer: c.Name, Environment: c.Environment, Generation: c.Generation}
}

// attempt runs the exchange on pair pr, which pickPair counted the request on: it releases
// the prefill worker's count when the prefill ends, and the decode worker's when the exchange
// fails or, once the pipeline adopted the decode response, when that response ends. On
// failure it has sent both workers an abort and returns the worker to leave out of the next
// pair with the error.
// legs accumulates the time spent waiting on worker calls (for the overhead measure).
func (t *Target) attempt(ctx context.Context, cancel context.CancelFunc, rc *pipeline.RequestCtx, pr pair, fwd []byte, cacheKey string, aff *affinityReq, legs *time.Duration) (int, error) {
	id := newExecutionID()
	fail := func(phase string, culprit int, err error) (int, error) {
		// Only a leg the worker failed counts as its failed phase: counted so, the other
		// reasons would send an operator looking for a fault in the fleet.
		reason := metrics.PDAbortLegFailed
		switch {
		case rc.Canceled():
			// The client left and its leaving cut the call.
			reason = metrics.PDAbortClientGone
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			// execution_timeout_ms is the gateway's budget for the whole exchange, the
			// pairs tried before and the prepare batch's wait included: the call it cut
			// was running, not failed.
			reason = metrics.PDAbortTimeout
		case pool.LocalResource(err):
			// The gateway's own shortage of descriptors, memory or ports.
			reason = metrics.PDAbortGatewayResources
		}
		if reason == metrics.PDAbortLegFailed {
			t.m.Failed(phase)
		}
		t.abort(id, pr, reason)
		return culprit, err
	}

	// Both workers count the request in their load since pickPair chose them (the prefill
	// worker until its prefill ends, the decode worker until the response ends), so that
	// concurrent requests chosen before the next observation spread over the workers and none
	// is sent beyond a worker's capacity.
	pb, db := t.service.Backends[pr.p], t.service.Backends[pr.d]
	start := time.Now()
	target, rtt, err := t.batchers[pr.d].prepare(ctx, id)
	*legs += rtt
	if err != nil {
		pb.Release()
		db.Release()
		return fail(metrics.PDPrepare, pr.d, err)
	}
	t.m.Phase(metrics.PDPrepare, start)

	start = time.Now()
	source, cached, err := t.prefill(ctx, pr.p, id, fwd, target, cacheKey)
	pb.Release()
	*legs += time.Since(start)
	if err != nil {
		db.Release()
		return fail(metrics.PDPrefill, pr.p, err)
	}
	pb.LB.ConnectSucceeded()
	t.m.Phase(metrics.PDPrefill, start)
	if aff != nil {
		t.affinity.learned(aff, cached)
	}

	start = time.Now()
	x := pool.AcquireExchange()
	h := x.AbortHandle()
	// The deadline and the client leaving abort the decode exchange too, stream included,
	// until Complete. Once the pipeline relays the exchange, the deadline cuts it through the
	// request, so that the client's stream ends with the timeout's error event rather than
	// the one of an upstream that failed.
	ch := rc.CancelHandle()
	stopX := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			ch.Expire(errExecutionTimeout)
		}
		h.Abort()
	})
	body := t.decodeBody(id, fwd, source)
	head := t.decodeHead(db.Host, rc.RequestID(), len(body))
	sent := time.Now()
	err = x.RoundTrip(db.Pool, head, body, false)
	*legs += time.Since(sent)
	if err == nil && x.Resp.Status != 200 {
		err = &legError{leg: "decode", status: x.Resp.Status}
		if x.Resp.Status < 500 && x.Resp.Status != 408 && x.Resp.Status != 409 && x.Resp.Status != 429 {
			err.(*legError).body = readSmall(x)
		}
	} else if err != nil {
		err = &legError{leg: "decode", err: err}
	}
	if err != nil {
		stopX()
		pool.ReleaseExchange(x)
		db.Release()
		return fail(metrics.PDDecodeHead, pr.d, err)
	}
	t.m.Phase(metrics.PDDecodeHead, start)
	db.LB.ConnectSucceeded()
	e := &execution{t: t, id: id, pr: pr, ctx: ctx, cancel: cancel, stopX: stopX, headAt: time.Now()}
	rc.Set(&execSlot, e)
	if !rc.Adopt(db, x) {
		return pr.d, pipeline.ErrClientGone // Complete aborts both
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The deadline passed between the decode head and Adopt: its abort came before the
		// request had the exchange to cut.
		rc.Expire(errExecutionTimeout)
	}
	return 0, nil
}

// readSmall reads a short error body of a refused decode call (for the client).
func readSmall(x *pool.Exchange) []byte {
	buf := make([]byte, 4096)
	n := 0
	for n < len(buf) {
		k, err := x.ReadBody(buf[n:], false)
		n += k
		if err != nil {
			break
		}
	}
	return buf[:n]
}

// prefill calls prefill/execute on worker i and returns the source state as the worker sent
// it and the prompt tokens it found cached.
func (t *Target) prefill(ctx context.Context, i int, id string, fwd, target []byte, cacheKey string) ([]byte, int64, error) {
	body := make([]byte, 0, len(fwd)+len(target)+len(cacheKey)+96)
	body = append(body, `{"execution_id":`...)
	body = appendJSONString(body, id)
	body = append(body, `,"request":`...)
	body = append(body, fwd...)
	body = append(body, `,"target":`...)
	body = append(body, target...)
	if cacheKey != "" {
		body = append(body, `,"prompt_cache_key":`...)
		body = appendJSONString(body, cacheKey)
	}
	body = append(body, '}')
	ans, err := t.post(ctx, i, "prefill", pathPrefill, body)
	if err != nil {
		return nil, 0, err
	}
	var out struct {
		Source       json.RawMessage `json:"source"`
		CachedTokens int64           `json:"cached_tokens"`
	}
	if json.Unmarshal(ans, &out) != nil || len(out.Source) == 0 {
		return nil, 0, &legError{leg: "prefill", err: errors.New("prefill/execute answer without a source")}
	}
	return out.Source, out.CachedTokens, nil
}

// decodeHead returns the request head of decode/execute: the workers' key as bearer, the
// request id for the workers' logs, nothing of the client's fields.
func (t *Target) decodeHead(host, requestID []byte, n int) []byte {
	b := make([]byte, 0, 256)
	b = append(b, "POST "+pathDecode+" HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nAuthorization: "...)
	b = append(b, t.bearer...)
	b = append(b, "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nX-Request-Id: "...)
	b = append(b, requestID...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n\r\n"...)
}

// decodeBody returns {execution_id, request, source} with request and source as given.
func (t *Target) decodeBody(id string, fwd, source []byte) []byte {
	b := make([]byte, 0, len(fwd)+len(source)+len(id)+64)
	b = append(b, `{"execution_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"request":`...)
	b = append(b, fwd...)
	b = append(b, `,"source":`...)
	b = append(b, source...)
	return append(b, '}')
}

// abort sends POST /power/v1/abort for execution id to both workers of pr at once, each
// bounded by abortTimeout.
func (t *Target) abort(id string, pr pair, reason string) {
	t.m.Aborted(reason)
	body := make([]byte, 0, 64)
	body = append(body, `{"execution_id":`...)
	body = appendJSONString(body, id)
	body = append(body, '}')
	// The calls run on their own: the request does not wait for them.
	go t.postAbort(pr.p, body)
	go t.postAbort(pr.d, body)
}

// abortOne sends an abort for execution id to worker i alone.
func (t *Target) abortOne(i int, id string) {
	body := make([]byte, 0, 64)
	body = append(body, `{"execution_id":`...)
	body = appendJSONString(body, id)
	go t.postAbort(i, append(body, '}'))
}

func (t *Target) postAbort(i int, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	_, _ = t.post(ctx, i, "abort", pathAbort, body)
}

// Complete ends rc's exchange, if Serve started one: when the client left, the stream
// failed or the execution deadline passed before the end, both workers get an abort. The
// model router calls it from its completion stage.
func Complete(rc *pipeline.RequestCtx) {
	e, _ := rc.Get(&execSlot).(*execution)
	if e == nil {
		return
	}
	rc.Set(&execSlot, nil)
	e.stopX()
	timedOut := errors.Is(e.ctx.Err(), context.DeadlineExceeded)
	e.cancel()
	o := rc.Outcome()
	switch {
	case timedOut:
		e.t.abort(e.id, e.pr, metrics.PDAbortTimeout)
	case o.Canceled:
		e.t.abort(e.id, e.pr, metrics.PDAbortClientGone)
	case o.UpstreamError != "":
		e.t.abort(e.id, e.pr, metrics.PDAbortStream)
	default:
		e.t.m.Phase(metrics.PDDecode, e.headAt)
	}
}
