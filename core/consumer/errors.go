package consumer

import (
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/sse"
)

// Answers of the api-key middleware and the grant checks, in the error shape each API's
// clients parse: OpenAI's for the OpenAI endpoints, Anthropic's for /v1/messages (its SDKs read
// error.type). Prebuilt: refusing a request allocates nothing.
var (
	errMissingKey = newAnswer(401, "invalid_request_error", "authentication_error", "missing_api_key",
		"no API key: send it as Authorization: Bearer <key> or X-Api-Key: <key>")
	errInvalidKey = newAnswer(401, "invalid_request_error", "authentication_error", "invalid_api_key",
		"the API key is not valid")
	errEndpoint = newAnswer(403, "permission_error", "permission_error", "endpoint_not_granted",
		"this API key may not call this endpoint")
)

// answer is one refusal in both shapes.
type answer struct {
	status            int
	openai, anthropic []byte
}

func newAnswer(status int, openaiType, anthropicType, code, msg string) *answer {
	ge := &pipeline.GatewayError{Status: status, Type: pipeline.ErrorType(openaiType), Code: code, Message: msg}
	a := &answer{status: status, openai: pipeline.AppendErrorBody(nil, ge)}
	a.anthropic = AppendAnthropicError(nil, anthropicType, msg)
	return a
}

// AppendAnthropicError appends an error body in the Anthropic Messages API's shape:
// {"type":"error","error":{"type":typ,"message":msg}}.
func AppendAnthropicError(dst []byte, typ, msg string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = sse.AppendJSONString(dst, typ)
	dst = append(dst, `,"message":`...)
	dst = sse.AppendJSONString(dst, msg)
	return append(dst, "}}\n"...)
}

// reply answers rc with a in the shape its endpoint's clients expect.
func (a *answer) reply(rc *pipeline.RequestCtx) error {
	body := a.openai
	if isMessages(rc.Req.Path) {
		body = a.anthropic
	}
	return rc.Reply(a.status, "application/json", body)
}

func unauthorized(rc *pipeline.RequestCtx, present bool) error {
	rc.AddResponseHeader([]byte("WWW-Authenticate"), []byte(`Bearer realm="sluice"`))
	if present {
		return errInvalidKey.reply(rc)
	}
	return errMissingKey.reply(rc)
}

// EndpointForbidden answers rc with 403: its caller may not call this endpoint.
func EndpointForbidden(rc *pipeline.RequestCtx) error { return errEndpoint.reply(rc) }

func isMessages(path []byte) bool { return string(path) == "/v1/messages" }
