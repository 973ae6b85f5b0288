package pipeline

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/pool"
)

// errLogInterval bounds upstream-failure log lines: at most one per interval per engine, with
// the number of failures not logged in between, so an outage cannot flood the log.
const errLogInterval = time.Second

// errLog writes rate-limited warnings about upstream failures.
type errLog struct {
	log        *slog.Logger
	last       atomic.Int64 // unix ns of the last line
	suppressed atomic.Int64
}

// upstreamFailed logs that the exchange for router with backend failed at stage ("connect",
// "body") with err, unless a line was written less than errLogInterval ago. The record names
// the backend and the stage in their own attributes, so error= says only what went wrong
// (pool.UpstreamError.Failure), not the upstream again.
func (l *errLog) upstreamFailed(router, backend, stage string, err error) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(errLogInterval) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	text := err.Error()
	var ue *pool.UpstreamError
	if errors.As(err, &ue) {
		text = ue.Failure()
	}
	l.log.Warn("upstream failed", "router", router, "backend", backend, "stage", stage, "error", text, "suppressed_since_last", l.suppressed.Swap(0))
}

// stageFailed logs a stage that failed with an unexpected error (answered 500), under the
// same rate limit.
func (l *errLog) stageFailed(router string, err error) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(errLogInterval) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	l.log.Error("stage failed", "router", router, "error", err.Error(), "suppressed_since_last", l.suppressed.Swap(0))
}
