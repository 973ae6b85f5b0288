// Package admission is fair admission to a model pool: a semaphore of MaxConcurrent active
// slots in front of a bounded FIFO queue of MaxQueued waiters, each waiting at most
// QueueTimeout. It is the rule of a model pool's max_concurrent_requests,
// max_queued_requests and queue_timeout_ms: past the active limit a request queues, a full
// queue refuses it, a wait past the timeout refuses it, and a caller that cancels gives back
// its queued or active slot, also in the middle of a stream.
//
// Typical use, in a request stage (rc is the *pipeline.RequestCtx):
//
//	t, ok := p.TryAcquire()            // lock-free, no allocation, no channel
//	if !ok {
//		var err error
//		if t, err = p.Acquire(rc.Done()); err != nil {
//			return admission.GatewayError(err) // 429, 503 or 499, preallocated
//		}
//	}
//	rc.OnCancel(func() { t.Release() })     // the client left, also mid-stream
//	... and t.Release() again when the request completes: only the first call counts.
//
// TryAcquire comes first so that a request that finds room never makes its Done channel,
// which RequestCtx allocates on first use.
//
// # Fairness
//
// First come, first served, with no barging: while anyone waits, a freed slot goes to the
// head of the queue, never to a caller that arrives at the same moment. The active count and
// the queue length share one atomic word, so the fast path's "no waiter and a free slot" is
// a single compare-and-swap, and a release that sees a waiter hands its slot over without
// ever making it free. Waiters are served in the order they joined the queue; a waiter that
// leaves (timeout, cancellation) leaves at once and its place is not held.
//
// # Units
//
// MaxConcurrent and MaxQueued are counts of requests; QueueTimeout is a time.Duration (the
// configuration's queue_timeout_ms converted by the caller); Stats counts requests since the
// Pool was made and sums wait time in nanoseconds (time.Duration). Retry-After on the
// gateway's answers is in whole seconds, as HTTP sends it.
//
// # Errors
//
// Acquire returns ErrQueueFull (the queue held MaxQueued waiters: refused at once),
// ErrQueueTimeout (waited QueueTimeout without a slot) or ErrCanceled (done was closed before
// or during the wait). GatewayError maps them to the answers the client gets: 429 for a full
// queue, 503 for a queue timeout (ErrGatewayQueueFull and ErrGatewayQueueTimeout say why), and 499 for a client that is
// gone and reads nothing.
package admission
