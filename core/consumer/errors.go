package consumer

import (
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Answers of the api-key middleware and the grant checks, in the error shape each API's
// clients parse: OpenAI's for the OpenAI endpoints, Anthropic's for /v1/messages (its SDKs read
// error.type). Prebuilt: refusing a request allocates nothing.
var (
	errMissingKey = NewAnswer(401, "invalid_request_error", "authentication_error", "missing_api_key",
		"no API key: send it as Authorization: Bearer <key> or X-Api-Key: <key>")
	errInvalidKey = NewAnswer(401, "invalid_request_error", "authentication_error", "invalid_api_key",
		"the API key is not valid")
	errTwoKeys = NewAnswer(401, "invalid_request_error", "authentication_error", "invalid_api_key",
		"more than one API key field: send the key once")
	errEndpoint = NewAnswer(403, "permission_error", "permission_error", "endpoint_not_granted",
		"this API key may not call this endpoint")
)

// Answer is one refusal of the gateway prebuilt in both error shapes: OpenAI's
// {"error":{"message","type","param","code"}} and Anthropic's
// {"type":"error","error":{"type","message"}}. It is immutable; answering with it allocates
// nothing.
type Answer struct {
	status            int
	openai, anthropic []byte
}

// NewAnswer builds the refusal with HTTP status, the OpenAI error type and the Anthropic one
// (their APIs name them differently: "invalid_request_error" and "authentication_error" for
// a 401), a machine-readable code (OpenAI's shape only) and a message for people.
func NewAnswer(status int, openaiType, anthropicType, code, msg string) *Answer {
	ge := &pipeline.GatewayError{Status: status, Type: pipeline.ErrorType(openaiType), Code: code, Message: msg}
	a := &Answer{status: status, openai: pipeline.AppendErrorBody(nil, ge)}
	a.anthropic = AppendAnthropicError(nil, anthropicType, msg)
	return a
}

// AppendAnthropicError appends an error body in the Anthropic Messages API's shape:
// {"type":"error","error":{"type":typ,"message":msg}}.
func AppendAnthropicError(dst []byte, typ, msg string) []byte {
	return pipeline.AppendAnthropicErrorBody(dst, typ, msg)
}

// Reply answers rc with a in the shape its endpoint's clients expect: Anthropic's on
// /v1/messages and the paths under it (openai.AnthropicPath), OpenAI's elsewhere. The caller may set the reply's RetryAfter before
// returning it.
func (a *Answer) Reply(rc *pipeline.RequestCtx) *pipeline.Reply {
	body := a.openai
	if openai.AnthropicPath(rc.Req.Path) {
		body = a.anthropic
	}
	return rc.Reply(a.status, "application/json", body)
}

func unauthorized(rc *pipeline.RequestCtx, present bool) error {
	if present {
		return refuseKey(rc, errInvalidKey)
	}
	return refuseKey(rc, errMissingKey)
}

// refuseKey answers rc with a, a 401, and the challenge RFC 9110 §11.6.1 asks of one.
func refuseKey(rc *pipeline.RequestCtx, a *Answer) error {
	rc.AddResponseHeader([]byte("WWW-Authenticate"), []byte(`Bearer realm="sluice"`))
	return a.Reply(rc)
}

// EndpointForbidden answers rc with 403: its caller may not call this endpoint.
func EndpointForbidden(rc *pipeline.RequestCtx) error { return errEndpoint.Reply(rc) }
