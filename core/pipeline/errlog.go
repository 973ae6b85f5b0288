package pipeline

import (
	"errors"
	"log/slog"

	"github.com/sluice-gw/sluice/internal/loglimit"
	"github.com/sluice-gw/sluice/pool"
)

// errLog writes rate-limited warnings about failed exchanges: at most one line a second per
// engine (loglimit), with the number of failures not logged in between, so an outage cannot
// flood the log.
type errLog struct {
	log   *slog.Logger
	limit loglimit.Limit
}

// upstreamFailed logs that the exchange for router with backend failed at stage ("connect",
// "body") with err, unless a line was written less than a second ago. The record names the
// backend and the stage in their own attributes, so error= says only what went wrong
// (pool.UpstreamError.Failure), not the upstream again.
func (l *errLog) upstreamFailed(router, backend, stage string, err error) {
	n, ok := l.limit.Allow()
	if !ok {
		return
	}
	l.log.Warn("upstream failed", "router", router, "backend", backend, "stage", stage, "error", failure(err), "suppressed_since_last", n)
}

// shortOfResources logs, under the same rate limit, that the gateway could not open a
// connection to backend for want of its own descriptors, memory or ports (pool.LocalResource):
// a line that does not read as the upstream's failure.
func (l *errLog) shortOfResources(router, backend string, err error) {
	n, ok := l.limit.Allow()
	if !ok {
		return
	}
	l.log.Warn("cannot connect upstream: the gateway is short of resources", "router", router, "backend", backend, "error", failure(err), "suppressed_since_last", n)
}

// stageFailed logs a stage that failed with an unexpected error (answered 500), under the
// same rate limit.
func (l *errLog) stageFailed(router string, err error) {
	n, ok := l.limit.Allow()
	if !ok {
		return
	}
	l.log.Error("stage failed", "router", router, "error", err.Error(), "suppressed_since_last", n)
}

// failure is what went wrong in err, without naming the upstream.
func failure(err error) string {
	var ue *pool.UpstreamError
	if errors.As(err, &ue) {
		return ue.Failure()
	}
	return err.Error()
}
