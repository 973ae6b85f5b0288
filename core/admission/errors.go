package admission

import (
	"errors"

	"github.com/sluice-gw/sluice/core/pipeline"
)

// Why Acquire refused a caller.
var (
	// ErrQueueFull: no slot was free and MaxQueued callers already waited; refused at once.
	ErrQueueFull = errors.New("admission: the model pool's queue is full")
	// ErrQueueTimeout: the caller waited QueueTimeout in the queue without getting a slot.
	ErrQueueTimeout = errors.New("admission: no slot came free within the queue timeout")
	// ErrCanceled: the caller's done channel closed before it was admitted.
	ErrCanceled = errors.New("admission: canceled while waiting for a slot")
)

// The gateway's answers to a refused caller, preallocated so that a rejection allocates
// nothing. Retry-After is 1 second for both overload answers: a slot of an LLM pool frees
// in about a request's time, and the OpenAI SDKs wait what Retry-After says (up to their
// limit) before their next try instead of their own backoff.
var (
	// ErrGatewayQueueFull answers ErrQueueFull: 429 rate_limit_error. The pool is at the
	// capacity it was configured for, so the answer is load shedding by policy, like a rate
	// limit, and not a fault: it is what TGI answers when its max_concurrent_requests are
	// taken ("Model is overloaded"), what sluice's own simulator sends by default for a full
	// queue, and it keeps deliberate shedding out of 5xx error budgets.
	ErrGatewayQueueFull = &pipeline.GatewayError{Status: 429, Type: pipeline.RateLimit, Code: "model_at_capacity",
		Message: "the model is at capacity: too many requests are running and waiting; retry shortly", RetryAfter: 1}
	// ErrGatewayQueueTimeout answers ErrQueueTimeout: 503 server_error. The gateway took the
	// request into its queue and then could not serve it in time, which is the service being
	// temporarily unavailable (RFC 9110 §15.6.4), as OpenAI answers an overloaded engine;
	// a load balancer in front of sluice may try another instance on a 503.
	ErrGatewayQueueTimeout = &pipeline.GatewayError{Status: 503, Type: pipeline.ServerError, Code: "queue_timeout",
		Message: "the model did not have a free slot within the queue timeout; retry shortly", RetryAfter: 1}
	// ErrGatewayCanceled answers ErrCanceled: 499, nginx's status for a client that closed
	// its request. Nobody reads it; it ends the pipeline and names the outcome in logs.
	ErrGatewayCanceled = &pipeline.GatewayError{Status: 499, Type: pipeline.InvalidRequest, Code: "client_closed_request",
		Message: "the client closed the request while it waited for the model"}
)

// GatewayError returns the preallocated gateway answer to an error of Acquire: 429 for
// ErrQueueFull, 503 for ErrQueueTimeout, 499 for ErrCanceled, and pipeline.ErrInternal (500)
// for any other error. The OpenAI Python and Go SDKs retry 408, 409, 429 and every 5xx, so
// either overload answer has a default client try again after Retry-After; the status tells
// the client and the operator whether the request was refused at the door (429) or after it
// had waited its turn (503).
func GatewayError(err error) *pipeline.GatewayError {
	switch {
	case errors.Is(err, ErrQueueFull):
		return ErrGatewayQueueFull
	case errors.Is(err, ErrQueueTimeout):
		return ErrGatewayQueueTimeout
	case errors.Is(err, ErrCanceled):
		return ErrGatewayCanceled
	default:
		return pipeline.ErrInternal
	}
}

// Reasons of a rejection, for a metrics label.
const (
	ReasonQueueFull    = "queue_full"
	ReasonQueueTimeout = "queue_timeout"
	ReasonCanceled     = "canceled"
)

// Reason names the rejection reason of an error of Acquire (a Reason* value), "" for any
// other error.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrQueueFull):
		return ReasonQueueFull
	case errors.Is(err, ErrQueueTimeout):
		return ReasonQueueTimeout
	case errors.Is(err, ErrCanceled):
		return ReasonCanceled
	default:
		return ""
	}
}
