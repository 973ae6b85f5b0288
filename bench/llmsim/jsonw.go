package llmsim

import (
	"net/http"
	"strconv"

	"github.com/sluice-gw/sluice/sse"
)

// appendJSONString appends s as a JSON string (RFC 8259 §7), escaped as the gateway escapes.
func appendJSONString(dst []byte, s string) []byte { return sse.AppendJSONString(dst, s) }

// appendJSONStringOrNull appends s as a JSON string, or null when s is empty.
func appendJSONStringOrNull(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, s)
}

// errorType returns the OpenAI error type for an HTTP status.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status < 500:
		return "invalid_request_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable"
	}
	return "server_error"
}

// writeError writes an OpenAI-style error body {"error":{"message","type","param","code"}}
// with the status (param and code are null when empty).
func writeError(w http.ResponseWriter, status int, msg, param, code string) {
	b := make([]byte, 0, 128+len(msg))
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, errorType(status))
	b = append(b, `,"param":`...)
	b = appendJSONStringOrNull(b, param)
	b = append(b, `,"code":`...)
	b = appendJSONStringOrNull(b, code)
	b = append(b, "}}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	w.Write(b)
}

// writeJSON writes a complete JSON body with status 200.
func writeJSON(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// anthropicErrorType returns the Anthropic error type for an HTTP status.
func anthropicErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status < 500:
		return "invalid_request_error"
	case status == http.StatusServiceUnavailable || status == 529:
		return "overloaded_error"
	}
	return "api_error"
}

// writeAnthropicError writes an Anthropic-style error body
// {"type":"error","error":{"type","message"}} with the status. Anthropic's shape has no
// param or code: the message names the field at fault.
func writeAnthropicError(w http.ResponseWriter, status int, msg, param, code string) {
	b := make([]byte, 0, 96+len(msg))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendJSONString(b, anthropicErrorType(status))
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, "}}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == 529 {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	w.Write(b)
}
