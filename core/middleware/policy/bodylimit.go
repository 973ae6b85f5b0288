package policy

import (
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// BodyLimit is the body-limit middleware: a request whose body is longer than its bound is
// answered 413 and never reaches an upstream. It bounds one router below the entrypoint's
// max_body_bytes (which bounds what the engine reads at all, before routing).
type BodyLimit struct {
	max int64
}

// NewBodyLimit compiles a body-limit middleware.
func NewBodyLimit(o config.BodyLimitOptions) *BodyLimit { return &BodyLimit{max: o.MaxBytes} }

// LoopSafe implements pipeline.LoopSafe: it compares the length of the body in hand.
func (s *BodyLimit) LoopSafe() bool { return true }

// OnRequest implements pipeline.RequestStage.
func (s *BodyLimit) OnRequest(rc *pipeline.RequestCtx) error {
	if int64(len(rc.Req.Body)) > s.max {
		return errTooLarge.Reply(rc)
	}
	return nil
}
