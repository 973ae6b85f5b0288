package modelroute

import (
	"errors"

	"github.com/sluice-gw/sluice/core/admission"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
)

var (
	errUnknownEndpoint = &pipeline.GatewayError{Status: 404, Type: pipeline.NotFound, Code: "unknown_endpoint",
		Message: "this model router serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages and /v1/models"}
	errMethod = &pipeline.GatewayError{Status: 405, Type: pipeline.InvalidRequest, Code: "method_not_allowed",
		Message: "this endpoint takes POST"}
	errModelsMethod = &pipeline.GatewayError{Status: 405, Type: pipeline.InvalidRequest, Code: "method_not_allowed",
		Message: "this endpoint takes GET or HEAD"}
	errContentType = &pipeline.GatewayError{Status: 415, Type: pipeline.InvalidRequest, Code: "unsupported_media_type",
		Message: "the request body must be JSON: send Content-Type: application/json"}
	errContentTypeTwice = &pipeline.GatewayError{Status: 400, Type: pipeline.InvalidRequest, Code: "bad_request",
		Message: "Content-Type given more than once"}
	errContentEncoding = &pipeline.GatewayError{Status: 415, Type: pipeline.InvalidRequest, Code: "unsupported_media_type",
		Message: "the request body must not be encoded: Content-Encoding is not supported here (send it as plain JSON)"}
)

// checkBodyType refuses a body the router would not read as the client meant: one not typed
// JSON (415; see openai.JSONContentType for why that matters), typed twice (400, RFC 9110
// §8.3 allows one), or with a content coding (415, RFC 9110 §15.5.16), which the router
// does not decode and an inference server would not either.
func checkBodyType(req *http1.Request) *pipeline.GatewayError {
	var ct []byte
	n := 0
	for i := range req.Headers {
		h := &req.Headers[i]
		switch {
		case equalFold(h.Key, "Content-Type"):
			ct = h.Value
			n++
		case equalFold(h.Key, "Content-Encoding") && !equalFold(h.Value, "identity"):
			return errContentEncoding
		}
	}
	switch {
	case n > 1:
		return errContentTypeTwice
	case !openai.JSONContentType(ct, n == 1):
		return errContentType
	}
	return nil
}

// equalFold reports whether b equals s, ASCII case-insensitively.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// replyError answers ge in the error shape of the endpoint's clients: Anthropic's on
// /v1/messages, OpenAI's elsewhere (the pipeline writes those).
func replyError(rc *pipeline.RequestCtx, ep openai.Endpoint, ge *pipeline.GatewayError) error {
	if ge == admission.ErrGatewayCanceled {
		return pipeline.ErrClientGone
	}
	if !ep.AnthropicErrors() {
		return ge
	}
	st, _ := rc.Get(&stateSlot).(*state)
	var buf []byte
	if st != nil {
		buf = st.buf[:0]
	}
	buf = consumer.AppendAnthropicError(buf, pipeline.AnthropicErrorType(ge.Status), ge.Message)
	if st != nil {
		st.buf = buf
	}
	r := rc.Reply(ge.Status, "application/json", buf)
	r.RetryAfter = ge.RetryAfter
	return r
}

// invalid answers a body Peek refused: 400 naming the parameter, in the endpoint's shape.
func (st *state) invalid(rc *pipeline.RequestCtx, err error) error {
	var ve *openai.ValidationError
	if !errors.As(err, &ve) {
		return pipeline.ErrInternal
	}
	st.buf = openai.AppendErrorBody(st.buf[:0], ve, st.ep)
	return rc.Reply(ve.Status, "application/json", st.buf)
}

// modelNotFound answers 404 for an alias that does not exist or that the caller may not use:
// the two look alike, so a caller learns nothing of aliases it is not granted (as OpenAI
// answers).
func (st *state) modelNotFound(rc *pipeline.RequestCtx) error {
	msg := "The model `" + string(st.peek.Model) + "` does not exist or you do not have access to it."
	if st.ep.AnthropicErrors() {
		st.buf = consumer.AppendAnthropicError(st.buf[:0], "not_found_error", msg)
		return rc.Reply(404, "application/json", st.buf)
	}
	ge := &pipeline.GatewayError{Status: 404, Type: pipeline.InvalidRequest, Code: "model_not_found", Message: msg}
	st.buf = pipeline.AppendErrorBody(st.buf[:0], ge)
	return rc.Reply(404, "application/json", st.buf)
}
