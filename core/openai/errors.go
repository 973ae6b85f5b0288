package openai

import (
	"errors"
	"strconv"

	"github.com/sluice-gw/sluice/sse"
)

// Error codes of a ValidationError (the "code" of OpenAI's error body), following the codes
// OpenAI's API gives for the same faults.
const (
	CodeInvalidJSON      = "invalid_json"               // the body is not well-formed JSON (Offset says where)
	CodeInvalidType      = "invalid_type"               // a value of the wrong JSON type, or the body is not an object
	CodeMissingParameter = "missing_required_parameter" // a required parameter is absent
	CodeInvalidValue     = "invalid_value"              // a value outside its set (a role, an empty model)
	CodeEmptyArray       = "empty_array"                // an array that must have elements has none
	CodeBelowMinInteger  = "integer_below_min_value"    // max_tokens 0, n 0
	CodeAboveMaxInteger  = "integer_above_max_value"    // an integer beyond int64
	CodeBelowMinDecimal  = "decimal_below_min_value"    // temperature -1
	CodeAboveMaxDecimal  = "decimal_above_max_value"    // temperature 3
	CodeDuplicateParam   = "duplicate_parameter"        // a parameter sluice reads is named twice
	CodeAmbiguousParam   = "ambiguous_parameter"        // a parameter sluice reads is spelled in another case
)

// ValidationError is a request Peek refuses: the HTTP status (400) and the fields of the error
// body. Messages are stable and name the parameter first ("messages[2].content: expected a
// string or an array of content parts"). A request stage answers it with
//
//	return rc.Reply(e.Status, "application/json", openai.AppendErrorBody(buf, e, ep))
//
// (buf owned by the request, as the reply body is kept by reference), which keeps Param and
// the endpoint's error shape; a pipeline.GatewayError built from Status, Code and Message
// (type invalid_request_error) would lose both.
type ValidationError struct {
	Status  int    // HTTP status: 400
	Param   string // the parameter at fault ("temperature", "messages[2].role"); "" for the body as a whole (null)
	Code    string // one of the Code constants
	Message string
	Offset  int // byte offset in the body of a JSON syntax error (CodeInvalidJSON); -1 otherwise
}

func (e *ValidationError) Error() string { return e.Message }

// ErrUnknownEndpoint is returned by Peek for an Endpoint value that is none of the constants.
var ErrUnknownEndpoint = errors.New("openai: unknown endpoint")

// AppendErrorBody appends the JSON error body of e for endpoint ep to dst, followed by "\n":
// Anthropic's shape on Messages,
//
//	{"type":"error","error":{"type":"invalid_request_error","message":"..."}}
//
// and OpenAI's on the others,
//
//	{"error":{"message":"...","type":"invalid_request_error","param":"..."|null,"code":"..."}}
//
// Strings are JSON-escaped; it does not allocate when dst has room.
func AppendErrorBody(dst []byte, e *ValidationError, ep Endpoint) []byte {
	if ep.AnthropicErrors() {
		dst = append(dst, `{"type":"error","error":{"type":"invalid_request_error","message":`...)
		dst = sse.AppendJSONString(dst, e.Message)
		return append(dst, "}}\n"...)
	}
	dst = append(dst, `{"error":{"message":`...)
	dst = sse.AppendJSONString(dst, e.Message)
	dst = append(dst, `,"type":"invalid_request_error","param":`...)
	if e.Param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = sse.AppendJSONString(dst, e.Param)
	}
	dst = append(dst, `,"code":`...)
	dst = sse.AppendJSONString(dst, e.Code)
	return append(dst, "}}\n"...)
}

// syntaxError builds the error of a malformed body.
func syntaxError(off int, msg string) *ValidationError {
	return &ValidationError{
		Status:  400,
		Code:    CodeInvalidJSON,
		Message: "invalid JSON at byte " + strconv.Itoa(off) + ": " + msg,
		Offset:  off,
	}
}
