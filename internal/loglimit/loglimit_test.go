package loglimit

import "testing"

// Within an interval the first line goes through and the rest are counted; the count is what
// the next line let through reports, and starts again from there.
func TestOneLineAnIntervalAndTheCountOfTheRest(t *testing.T) {
	var l Limit
	if n, ok := l.Allow(); !ok || n != 0 {
		t.Fatalf("first line: Allow() = %d, %v; want 0, true", n, ok)
	}
	for i := 0; i < 5; i++ {
		if _, ok := l.Allow(); ok {
			t.Fatalf("line %d within the interval was let through", i+2)
		}
	}
	if got := l.Suppressed(); got != 5 {
		t.Fatalf("Suppressed() = %d, want 5", got)
	}
	l.last.Store(l.last.Load() - int64(Interval)) // the interval has passed
	if n, ok := l.Allow(); !ok || n != 5 {
		t.Fatalf("after the interval: Allow() = %d, %v; want 5, true", n, ok)
	}
	if got := l.Suppressed(); got != 0 {
		t.Fatalf("Suppressed() after a line = %d, want 0", got)
	}
}
