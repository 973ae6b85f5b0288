package pipeline

import (
	"errors"
	"strconv"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pool"
	"github.com/sluice-gw/sluice/sse"
)

// ErrorType is the OpenAI error "type" field (https://platform.openai.com/docs/guides/error-codes).
type ErrorType string

// Error types the gateway itself emits.
const (
	InvalidRequest ErrorType = "invalid_request_error"
	NotFound       ErrorType = "not_found_error"
	RateLimit      ErrorType = "rate_limit_error"
	UpstreamError  ErrorType = "upstream_error"
	ServerError    ErrorType = "server_error"
)

// GatewayError is an error the gateway answers itself: an HTTP status and the
// fields of the OpenAI-style body {"error":{"message","type","param","code"}}.
type GatewayError struct {
	Status     int
	Type       ErrorType
	Code       string // machine-readable, e.g. "no_route", "upstream_timeout"
	Message    string
	RetryAfter int // seconds; sent as Retry-After on 429/503 when > 0
}

func (e *GatewayError) Error() string { return e.Code + ": " + e.Message }

// Preallocated gateway errors: the hot path returns these, never builds new ones.
var (
	ErrNoRoute           = &GatewayError{Status: 404, Type: NotFound, Code: "no_route", Message: "no router matches this request"}
	ErrNoBackend         = &GatewayError{Status: 503, Type: ServerError, Code: "no_backend", Message: "no healthy backend is available for this service", RetryAfter: 1}
	ErrUpstreamDial      = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_unreachable", Message: "the upstream could not be reached"}
	ErrUpstreamTimeout   = &GatewayError{Status: 504, Type: UpstreamError, Code: "upstream_timeout", Message: "the upstream did not answer in time"}
	ErrUpstreamProto     = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_protocol_error", Message: "the upstream sent a malformed response"}
	ErrUnexpectedUpgrade = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_protocol_error", Message: "the upstream switched protocols without an upgrade request"}
	ErrUpstreamClosed    = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_closed", Message: "the upstream closed the connection before answering"}
	ErrUpstreamCut       = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_closed", Message: "the upstream closed the connection before the response was complete"}
	ErrInternal          = &GatewayError{Status: 500, Type: ServerError, Code: "internal_error", Message: "the gateway failed to handle the request"}
	// ErrBodyCut answers a request whose body the engine stopped reading at its route's
	// bound (http1.Request.BodyCut) when no stage refused it: the body-limit middleware's
	// answer.
	ErrBodyCut = &GatewayError{Status: 413, Type: InvalidRequest, Code: "body_too_large", Message: "the request body is larger than this route accepts"}
	// ErrGatewayResources: the gateway could not open an upstream connection for want of its
	// own descriptors, memory or local ports (pool.LocalResource); no upstream is at fault.
	ErrGatewayResources = &GatewayError{Status: 503, Type: ServerError, Code: "gateway_resources_exhausted", Message: "the gateway has no descriptor, memory or local port left for an upstream connection", RetryAfter: 1}
	// ErrAtCapacity answers a model request whose targets had no server left because their
	// workers report max_active sequences running: 429 model_at_capacity with Retry-After,
	// the answer of a full admission queue, since the model is busy, not broken (a sequence
	// slot frees in about a request's time). A server left out for another reason
	// (unhealthy, stale, another generation) still gives ErrNoBackend when none is at
	// capacity, or ErrGatewayResources when the gateway could not observe it for want of its
	// own descriptors, memory or ports.
	ErrAtCapacity = &GatewayError{Status: 429, Type: RateLimit, Code: "model_at_capacity",
		Message: "every server of the model is at capacity (its workers report their maximum of running sequences); retry shortly", RetryAfter: 1}
)

// UpstreamGatewayError maps an error from pool.Exchange.RoundTrip to the response the client
// gets: 504 for timeouts, 502 otherwise (RFC 9110 §15.6.3, §15.6.5).
func UpstreamGatewayError(err error) *GatewayError {
	switch {
	case errors.Is(err, pool.ErrTimeout):
		return ErrUpstreamTimeout
	case errors.Is(err, pool.ErrDial):
		return ErrUpstreamDial
	case errors.Is(err, pool.ErrUpstreamProto):
		return ErrUpstreamProto
	default:
		return ErrUpstreamClosed
	}
}

// UpstreamReason names the metrics reason of an error from pool.Exchange.RoundTrip.
func UpstreamReason(err error) string {
	switch {
	case errors.Is(err, pool.ErrTimeout):
		return metrics.ReasonTimeout
	case errors.Is(err, pool.ErrDial):
		return metrics.ReasonDial
	case errors.Is(err, pool.ErrUpstreamProto):
		return metrics.ReasonProtocol
	default:
		return metrics.ReasonClosed
	}
}

// FramingGatewayError maps a request framing error from core/http1 to a gateway error with the
// same status (400, 413, 414, 431, 501, 505).
func FramingGatewayError(err error) *GatewayError {
	var fe *http1.Error
	if errors.As(err, &fe) {
		code := "bad_request"
		switch fe.Status {
		case 408:
			code = "request_timeout"
		case 413:
			code = "request_too_large"
		case 414:
			code = "uri_too_long"
		case 431:
			code = "request_header_fields_too_large"
		case 501:
			code = "not_implemented"
		case 505:
			code = "http_version_not_supported"
		}
		return &GatewayError{Status: fe.Status, Type: InvalidRequest, Code: code, Message: fe.Msg}
	}
	return &GatewayError{Status: 400, Type: InvalidRequest, Code: "bad_request", Message: err.Error()}
}

// AppendErrorBody appends the OpenAI-style JSON error body of e to dst.
func AppendErrorBody(dst []byte, e *GatewayError) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = sse.AppendJSONString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = sse.AppendJSONString(dst, string(e.Type))
	dst = append(dst, `,"param":null,"code":`...)
	dst = sse.AppendJSONString(dst, e.Code)
	return append(dst, "}}\n"...)
}

// ErrorShape is the JSON shape of the error bodies and SSE error events the gateway writes for
// a request: OpenAI's by default, Anthropic's for Anthropic Messages API clients.
type ErrorShape uint8

// The error shapes.
const (
	OpenAIErrors    ErrorShape = iota // {"error":{"message","type","param","code"}}
	AnthropicErrors                   // {"type":"error","error":{"type","message"}}
)

// AppendAnthropicErrorBody appends an error body in the Anthropic Messages API's shape:
// {"type":"error","error":{"type":typ,"message":msg}} and a newline.
func AppendAnthropicErrorBody(dst []byte, typ, msg string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = sse.AppendJSONString(dst, typ)
	dst = append(dst, `,"message":`...)
	dst = sse.AppendJSONString(dst, msg)
	return append(dst, "}}\n"...)
}

// AnthropicErrorType is the Anthropic error type of an HTTP status, after the mapping the
// Anthropic API documents (its "Errors" page): 529 and 503 overloaded, anything unlisted
// api_error.
func AnthropicErrorType(status int) string {
	switch status {
	case 400, 405, 408, 413, 415:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	}
	return "api_error"
}

// appendErrorBodyShaped appends e's body in shape s.
func appendErrorBodyShaped(dst []byte, e *GatewayError, s ErrorShape) []byte {
	if s == AnthropicErrors {
		return AppendAnthropicErrorBody(dst, AnthropicErrorType(e.Status), e.Message)
	}
	return AppendErrorBody(dst, e)
}

// appendSSEErrorShaped appends the SSE error event of e in shape s; Anthropic's streaming
// error is "event: error" with the error body as data, as OpenAI's is.
func appendSSEErrorShaped(dst []byte, e *GatewayError, s ErrorShape) []byte {
	if s == AnthropicErrors {
		dst = append(dst, "event: error\ndata: "...)
		dst = AppendAnthropicErrorBody(dst, AnthropicErrorType(e.Status), e.Message)
		return append(dst, '\n')
	}
	return AppendSSEError(dst, e)
}

// sseErrorEvents holds e's SSE error event in each shape, made once.
type sseErrorEvents [2][]byte

func newSSEErrorEvents(e *GatewayError) sseErrorEvents {
	return sseErrorEvents{appendSSEErrorShaped(nil, e, OpenAIErrors), appendSSEErrorShaped(nil, e, AnthropicErrors)}
}

// SetErrorShape sets the shape of the error bodies and SSE error events the gateway writes
// for this request from now on (a model router sets Anthropic's on /v1/messages). Errors
// written before it, such as the entrypoint's refusals of malformed requests, are OpenAI's.
func (rc *RequestCtx) SetErrorShape(s ErrorShape) { rc.errShape = s }

// AppendErrorResponse appends a complete HTTP/1.1 error response (status line, Date and the
// other headers, JSON body) for e to dst. keepAlive false adds "Connection: close". The answer
// to a HEAD request (head) has the body's length but not the body (RFC 9110 §9.3.2).
func AppendErrorResponse(dst []byte, e *GatewayError, major, minor int, keepAlive, head bool) []byte {
	dst = http1.AppendStatusLine(dst, 1, 1, e.Status, nil)
	dst = appendDate(dst, time.Now())
	dst = append(dst, "Content-Type: application/json\r\n"...)
	if e.RetryAfter > 0 {
		dst = append(dst, "Retry-After: "...)
		dst = strconv.AppendInt(dst, int64(e.RetryAfter), 10)
		dst = append(dst, "\r\n"...)
	}
	switch {
	case !keepAlive:
		dst = append(dst, "Connection: close\r\n"...)
	case major == 1 && minor == 0:
		dst = append(dst, "Connection: keep-alive\r\n"...)
	}
	bodyStart := len(dst)
	dst = AppendErrorBody(dst, e)
	body := len(dst) - bodyStart
	// Move the body behind the Content-Length header: build the header in a small stack buffer.
	var hdr [64]byte
	h := append(hdr[:0], "Content-Length: "...)
	h = strconv.AppendInt(h, int64(body), 10)
	h = append(h, "\r\n\r\n"...)
	dst = append(dst, h...) // grow
	copy(dst[bodyStart+len(h):], dst[bodyStart:bodyStart+body])
	copy(dst[bodyStart:], h)
	if head {
		return dst[:bodyStart+len(h)]
	}
	return dst
}

// ErrUpstreamStream is reported to an SSE client whose upstream failed mid-stream.
var ErrUpstreamStream = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_stream_error", Message: "the upstream failed during the stream"}

// AppendSSEError appends the SSE event that ends a client's stream after an upstream failure
// ("event: error" with the OpenAI-style error body of e as data). The stream then
// ends without "data: [DONE]", so OpenAI clients raise an error instead of taking a truncated
// answer for a complete one.
func AppendSSEError(dst []byte, e *GatewayError) []byte {
	return sse.AppendErrorEvent(dst, e.Message, string(e.Type), e.Code)
}
