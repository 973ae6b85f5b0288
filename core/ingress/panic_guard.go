package ingress

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/internal/loglimit"
)

// panicGuard reports a panic recovered from a request's handling: a bug, logged with its
// stack at one line a second at most (requests that hit the same bug would flood the log),
// after which the engine closes the request's connection instead of leaving the client
// waiting for an answer that will never come, or losing the process with it.
type panicGuard struct{ limit loglimit.Limit }

// A completion stage's panic reaches the engine once the request is finished
// (pipeline.StagePanic): the stack logged is the one where the stage panicked.
func (p *panicGuard) report(log *slog.Logger, entrypoint string, v any) {
	if n, ok := p.limit.Allow(); ok {
		stack := debug.Stack()
		if sp, is := v.(*pipeline.StagePanic); is {
			v, stack = sp.Value, sp.Stack
		}
		log.Error("request handling panicked", "entrypoint", entrypoint,
			"panic", fmt.Sprint(v), "stack", string(stack), "suppressed_since_last", n)
	}
}
