package admission

import "errors"

// Why Acquire refused a caller.
var (
	// ErrQueueFull: no slot was free and MaxQueued callers already waited; refused at once.
	ErrQueueFull = errors.New("admission: the model pool's queue is full")
	// ErrQueueTimeout: the caller waited QueueTimeout in the queue without getting a slot.
	ErrQueueTimeout = errors.New("admission: no slot came free within the queue timeout")
	// ErrCanceled: the caller's done channel closed before it was admitted.
	ErrCanceled = errors.New("admission: canceled while waiting for a slot")
)
