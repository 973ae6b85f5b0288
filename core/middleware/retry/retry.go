// Package retry is the retry middleware: a request whose attempt failed before any response
// byte reached the client (the upstream answered 502, 503 or 504, or the connection failed
// before a response head) is sent again, to a backend picked afresh, after a backoff that
// doubles with each attempt, within a budget that keeps retries a bounded share of the
// traffic. Only requests that may be sent twice are retried: the pipeline asks its retry
// stages only for idempotent methods (RFC 9110 §9.2.2) and requests with an Idempotency-Key.
// Connect failures, which sent nothing, are retried by the pipeline itself for every request.
package retry

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// milli is the budget bank's unit: a thousandth of a retry.
const milli = 1000

// Stage is a retry middleware: a pipeline.RequestStage (each request pays into the budget)
// and a pipeline.RetryStage.
type Stage struct {
	attempts         int
	initial, maxWait time.Duration
	deposit          int64 // milli-retries each request adds
	bankCap          int64 // milli-retries the bank holds at most
	statuses         [100]bool
	bank             *atomic.Int64 // shared with the next snapshot's stage of the same name
}

// New compiles a retry middleware; prev (may be nil) is the stage of the same name in the
// configuration replaced, whose budget bank carries over.
func New(o config.RetryOptions, prev *Stage) *Stage {
	s := &Stage{
		attempts: o.Attempts, initial: o.InitialBackoff, maxWait: o.MaxBackoff,
		deposit: int64(o.Budget * milli), bankCap: int64(o.MinRetries) * milli,
	}
	for _, st := range o.Statuses {
		s.statuses[st-500] = true
	}
	if prev != nil {
		s.bank = prev.bank
	} else {
		s.bank = new(atomic.Int64)
		s.bank.Store(s.bankCap)
	}
	return s
}

// LoopSafe implements pipeline.LoopSafe: the budget is an atomic counter, and the backoff
// is a duration the pipeline waits (on an event loop, a timer the engine arms; never a
// sleep there).
func (s *Stage) LoopSafe() bool { return true }

// OnRequest implements pipeline.RequestStage: the request adds its share to the budget.
func (s *Stage) OnRequest(*pipeline.RequestCtx) error {
	if s.deposit == 0 {
		return nil
	}
	for {
		b := s.bank.Load()
		if b >= s.bankCap || s.bank.CompareAndSwap(b, min(b+s.deposit, s.bankCap)) {
			return nil
		}
	}
}

// OnRetry implements pipeline.RetryStage.
func (s *Stage) OnRetry(_ *pipeline.RequestCtx, n, status int, err error) (time.Duration, bool) {
	if n >= s.attempts {
		return 0, false
	}
	if err == nil && (status < 500 || status > 599 || !s.statuses[status-500]) {
		return 0, false
	}
	for {
		b := s.bank.Load()
		if b < milli {
			return 0, false // the budget is spent: the upstream is failing, do not add load
		}
		if s.bank.CompareAndSwap(b, b-milli) {
			break
		}
	}
	return s.backoff(n), true
}

// backoff returns the wait before attempt n+1 (n ≥ 1): ceiling(n) with "equal jitter" (half
// fixed, half random) so that clients that failed together do not retry together; 0 when
// initial is 0.
func (s *Stage) backoff(n int) time.Duration {
	d := s.ceiling(n)
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// ceiling returns initial × 2^(n-1), at most maxWait. It compares before it shifts, so that a
// doubling past the range of a Duration caps instead of wrapping, and 0 stays 0.
func (s *Stage) ceiling(n int) time.Duration {
	shift := max(n-1, 0)
	if s.initial > s.maxWait>>shift {
		return s.maxWait
	}
	return s.initial << shift
}

// Budget returns the retries the bank holds now (for tests and the admin API).
func (s *Stage) Budget() float64 { return float64(s.bank.Load()) / milli }
