package policy

import (
	"strconv"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// BodyLimit is the body-limit middleware: a request whose body is longer than its bound is
// answered 413 and never reaches an upstream. It bounds one router below the entrypoint's
// max_body_bytes (which bounds what the engine reads at all, before routing).
type BodyLimit struct {
	max      int64
	tooLarge *consumer.Answer // the 413, naming the bound so a client knows what fits
}

// NewBodyLimit compiles a body-limit middleware.
func NewBodyLimit(o config.BodyLimitOptions) *BodyLimit {
	return &BodyLimit{max: o.MaxBytes, tooLarge: consumer.NewAnswer(413, "invalid_request_error", "request_too_large",
		"body_too_large", "the request body is larger than this route accepts (body-limit max_bytes = "+
			strconv.FormatInt(o.MaxBytes, 10)+" bytes)")}
}

// LoopSafe implements pipeline.LoopSafe: it compares lengths.
func (s *BodyLimit) LoopSafe() bool { return true }

// MaxBodyBytes implements pipeline.BodyBounder: the engines stop reading a body longer than
// this, and a Content-Length over it is refused before its body is read (and before 100
// Continue).
func (s *BodyLimit) MaxBodyBytes() int64 { return s.max }

// OnRequest implements pipeline.RequestStage. A body is over the bound when the part in hand
// is, when its Content-Length says it will be, or when the engine stopped reading it past the
// bound (BodyCut).
func (s *BodyLimit) OnRequest(rc *pipeline.RequestCtx) error {
	r := &rc.Req
	if int64(len(r.Body)) > s.max || r.ContentLength > s.max || r.BodyCut > s.max {
		return s.tooLarge.Reply(rc)
	}
	return nil
}
