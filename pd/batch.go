package pd

import (
	"context"
	"errors"
	"sync"
	"time"

	json "github.com/goccy/go-json"
)

// prepareTimeout bounds one decode/prepare (or prepare:batch) call: reserving state is
// bookkeeping on the decode worker, so a worker that takes longer is failing.
const prepareTimeout = 2 * time.Second

// prepCall is one request's decode/prepare waiting in a batcher.
type prepCall struct {
	id     string
	target []byte
	err    error
	rtt    time.Duration // how long the call that carried it took
	done   chan struct{}

	mu        sync.Mutex
	finished  bool // target and err are set
	abandoned bool // the request stopped waiting
}

// finish hands c its answer; a reservation made for a request that stopped waiting is
// released at once (its own abort may have reached the worker before the reservation).
func (c *prepCall) finish(b *batcher, target []byte, rtt time.Duration, err error) {
	c.mu.Lock()
	c.target, c.rtt, c.err, c.finished = target, rtt, err, true
	abandoned := c.abandoned
	c.mu.Unlock()
	close(c.done)
	if abandoned && err == nil {
		b.t.abortOne(b.worker, c.id)
	}
}

// abandon records that the request stopped waiting; it reports false when the answer came
// first.
func (c *prepCall) abandon() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return false
	}
	c.abandoned = true
	return true
}

// batcher coalesces the decode/prepare calls of concurrent requests to one decode worker:
// while one call to the worker is in flight, later ones queue, and when it returns they go as
// one decode/prepare:batch call (group commit). A queue that reaches the batch size goes at
// once. So a lone request waits for nothing, and under load the worker gets one call per
// batch instead of one per request; a call waits at most for the one in flight, which
// prepareTimeout bounds.
type batcher struct {
	t      *Target
	worker int

	mu    sync.Mutex
	busy  bool
	queue []*prepCall
}

// prepare reserves decode state for execution id on the batcher's worker and returns the
// target state as the worker sent it, and how long the call that carried it took (the
// worker's share of the wait; the rest is the batch's queue).
func (b *batcher) prepare(ctx context.Context, id string) ([]byte, time.Duration, error) {
	t := b.t
	if t.batchSize <= 1 {
		cctx, cancel := context.WithTimeout(ctx, prepareTimeout)
		defer cancel()
		start := time.Now()
		target, err := t.prepareOne(cctx, b.worker, id)
		return target, time.Since(start), err
	}
	c := &prepCall{id: id, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	var batch []*prepCall
	switch {
	case !b.busy:
		b.busy = true
		batch, b.queue = b.queue, nil
		go b.run(batch)
	case len(b.queue) >= t.batchSize:
		// A full batch goes now, beside the call in flight.
		batch, b.queue = b.queue, nil
		go b.send(batch)
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.target, c.rtt, c.err
	case <-ctx.Done():
		if !c.abandon() {
			return c.target, c.rtt, c.err
		}
		return nil, 0, &legError{leg: "prepare", err: ctx.Err()}
	}
}

// run sends batch, then whatever queued meanwhile, until the queue is empty.
func (b *batcher) run(batch []*prepCall) {
	for {
		b.send(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		batch, b.queue = b.queue, nil
		b.mu.Unlock()
	}
}

// send makes one call for batch (prepare for one, prepare:batch for more) and hands each
// request its answer.
func (b *batcher) send(batch []*prepCall) {
	t := b.t
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	t.m.Batch(len(batch))
	start := time.Now()
	if len(batch) == 1 {
		c := batch[0]
		target, err := t.prepareOne(ctx, b.worker, c.id)
		c.finish(b, target, time.Since(start), err)
		return
	}
	body := make([]byte, 0, 16+len(batch)*48)
	body = append(body, `{"items":[`...)
	for i, c := range batch {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"execution_id":`...)
		body = appendJSONString(body, c.id)
		body = append(body, '}')
	}
	body = append(body, "]}"...)
	ans, err := t.post(ctx, b.worker, "prepare", pathPrepareBatch, body)
	rtt := time.Since(start)
	var out struct {
		Items []struct {
			Target json.RawMessage `json:"target"`
			Error  *struct {
				Status int `json:"status"`
			} `json:"error"`
		} `json:"items"`
	}
	if err == nil && (json.Unmarshal(ans, &out) != nil || len(out.Items) != len(batch)) {
		err = &legError{leg: "prepare", err: errors.New("malformed decode/prepare:batch answer")}
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.finish(b, nil, rtt, err)
		case out.Items[i].Error != nil || len(out.Items[i].Target) == 0:
			status := 502
			if e := out.Items[i].Error; e != nil && e.Status != 0 {
				status = e.Status
			}
			c.finish(b, nil, rtt, &legError{leg: "prepare", status: status})
		default:
			c.finish(b, out.Items[i].Target, rtt, nil)
		}
	}
}

// prepareOne calls decode/prepare for execution id on worker i.
func (t *Target) prepareOne(ctx context.Context, i int, id string) ([]byte, error) {
	body := make([]byte, 0, 64)
	body = append(body, `{"execution_id":`...)
	body = appendJSONString(body, id)
	body = append(body, '}')
	ans, err := t.post(ctx, i, "prepare", pathPrepare, body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Target json.RawMessage `json:"target"`
	}
	if json.Unmarshal(ans, &out) != nil || len(out.Target) == 0 {
		return nil, &legError{leg: "prepare", err: errors.New("decode/prepare answer without a target")}
	}
	return out.Target, nil
}
