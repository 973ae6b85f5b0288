package llmsim

import (
	"sync"
	"time"
)

// Call is one worker protocol call an instance received, in GET /llmsim/calls: which call
// ("prepare", "prepare_batch" items each as "prepare", "prefill", "decode", "abort"), for
// which execution, and when it arrived (and, for prefill and decode, when it ended and with
// which status). Tests order a request's calls across instances by these times: the
// instances of one process share its clock.
type Call struct {
	Call        string    `json:"call"`
	ExecutionID string    `json:"execution_id"`
	At          time.Time `json:"at"`
	// Batch is the number of items of the prepare:batch call this prepare came in (0 for a
	// plain prepare).
	Batch int `json:"batch,omitempty"`
	// PromptCacheKey is a prefill's prompt_cache_key ("" when it had none), and
	// RequestCacheKey the prompt_cache_key inside its forwarded request, which a gateway
	// should never pass on ("" when absent).
	PromptCacheKey  string `json:"prompt_cache_key,omitempty"`
	RequestCacheKey string `json:"request_prompt_cache_key,omitempty"`
}

// maxCallLog bounds the calls an instance remembers (the oldest are dropped).
const maxCallLog = 4096

// callLog is an instance's bounded record of protocol calls.
type callLog struct {
	mu    sync.Mutex
	calls []Call
	next  int // ring position once full
}

func (l *callLog) add(c Call) {
	l.mu.Lock()
	if len(l.calls) < maxCallLog {
		l.calls = append(l.calls, c)
	} else {
		l.calls[l.next] = c
		l.next = (l.next + 1) % maxCallLog
	}
	l.mu.Unlock()
}

// snapshot returns the calls in arrival order.
func (l *callLog) snapshot() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Call, 0, len(l.calls))
	out = append(out, l.calls[l.next:]...)
	return append(out, l.calls[:l.next]...)
}

// Calls returns the last protocol calls (at most 4096) instance i received, oldest first:
// the body of its GET /llmsim/calls. It panics when i is out of range.
func (f *Fleet) Calls(i int) []Call { return f.insts[i].calls.snapshot() }
