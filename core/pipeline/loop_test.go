package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type safeRequest struct{}

func (safeRequest) OnRequest(*RequestCtx) error { return nil }
func (safeRequest) LoopSafe() bool              { return true }

type unsafeRequest struct{}

func (unsafeRequest) OnRequest(*RequestCtx) error { return nil }

type saysNo struct{ safeRequest }

func (saysNo) LoopSafe() bool { return false }

type safeCompletion struct{}

func (safeCompletion) OnComplete(*RequestCtx) {}
func (safeCompletion) LoopSafe() bool         { return true }

type unsafeCompletion struct{}

func (unsafeCompletion) OnComplete(*RequestCtx) {}

type safeFallback struct{}

func (safeFallback) OnExhausted(*RequestCtx) bool { return false }
func (safeFallback) LoopSafe() bool               { return true }

// A chain may run on an event loop when each of its stages says it is loop-safe; a stage
// that does not implement LoopSafe, or says no, keeps it off; a completion stage that is not
// loop-safe only moves the completion to a worker; a fallback stage always keeps it off (it
// may move the request to a service the loop did not check).
func TestChainLoopSafety(t *testing.T) {
	for _, tc := range []struct {
		name               string
		stages             []any
		unsafeRun, unsafeE bool
	}{
		{"none", nil, false, false},
		{"loop-safe request and completion", []any{safeRequest{}, safeCompletion{}}, false, false},
		{"a request stage without LoopSafe", []any{safeRequest{}, unsafeRequest{}}, true, false},
		{"a request stage that says no", []any{saysNo{}}, true, false},
		{"a completion stage without LoopSafe", []any{safeRequest{}, unsafeCompletion{}}, false, true},
		{"a loop-safe fallback stage", []any{safeFallback{}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChain(tc.stages...)
			require.NoError(t, err)
			require.Equal(t, tc.unsafeRun, c.unsafeRun, "unsafeRun")
			require.Equal(t, tc.unsafeE, c.endsUnsafe(), "endsUnsafe")
		})
	}
	var nilChain *Chain
	require.False(t, nilChain.endsUnsafe())
}
