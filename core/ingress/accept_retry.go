package ingress

import (
	"log/slog"
	"time"

	"github.com/sluice-gw/sluice/internal/loglimit"
)

// acceptRetry paces the accepts of a listener whose accept failed for want of a resource
// (descriptors, memory): the connection stays queued, and accepting again at once would spin.
// The wait doubles from 5 ms to 1 s while accepts keep failing, as net/http's Server does,
// and starts again after a success. One goroutine uses it; its log is safe to share.
type acceptRetry struct {
	delay time.Duration
	log   loglimit.Limit // "accept failed" lines: one a second at most
}

// wait logs err (one line a second at most: out of descriptors, accepts fail and succeed by
// turns, as each close frees one) and waits before the next accept. It returns false at once
// when closing is closed.
func (a *acceptRetry) wait(log *slog.Logger, entrypoint string, err error, closing <-chan struct{}) bool {
	a.delay = min(max(2*a.delay, 5*time.Millisecond), time.Second)
	if n, ok := a.log.Allow(); ok {
		log.Warn("accept failed; retrying", "entrypoint", entrypoint, "error", err.Error(), "retry_in", a.delay.String(), "suppressed_since_last", n)
	}
	t := time.NewTimer(a.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-closing:
		return false
	}
}

// accepted ends a run of failures.
func (a *acceptRetry) accepted() { a.delay = 0 }
