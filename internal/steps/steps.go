// Package steps counts the work the gateway's parsers do, for the cost guards of the fuzz
// targets (fuzz/): a parser adds the bytes it scans and the iterations of its loops that do
// not consume input, and a test counts them over one call to check that the work grows
// linearly with the input. The count is of steps, not time, so that the check gives the same
// answer on a loaded machine.
//
// Counting is off unless a test turns it on: then Add is one load and a branch that is never
// taken. Call sites add once per line, token or call, never per byte.
package steps

import "sync/atomic"

var (
	on atomic.Bool
	n  atomic.Int64
)

// Add counts k steps when counting is on.
func Add(k int) {
	if on.Load() {
		n.Add(int64(k))
	}
}

// Count runs fn with counting on and returns the steps taken meanwhile, by fn or by anything
// else running. Calls must not overlap: fuzz targets run one input at a time.
func Count(fn func()) int64 {
	n.Store(0)
	on.Store(true)
	defer on.Store(false)
	fn()
	return n.Load()
}
