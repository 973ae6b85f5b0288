// Package loglimit bounds how often a warning that repeats is written: out of descriptors,
// accepts fail and are retried every few milliseconds, and a flood of misbehaving clients
// sheds a connection each; a line for every one would flood the log.
package loglimit

import (
	"sync/atomic"
	"time"
)

// Interval is the least time between two lines a Limit lets through.
const Interval = time.Second

// Limit lets one log line an Interval through, safe for concurrent use. Its zero value lets
// the first line through.
type Limit struct {
	last       atomic.Int64 // unix ns of the last line let through
	suppressed atomic.Int64 // lines held back since
}

// Allow reports whether a line may be written now and, if so, how many were held back since
// the last one (the line's suppressed_since_last).
func (l *Limit) Allow() (suppressed int64, ok bool) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(Interval) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return 0, false
	}
	return l.suppressed.Swap(0), true
}

// Suppressed returns how many lines were held back since the last one let through.
func (l *Limit) Suppressed() int64 { return l.suppressed.Load() }
