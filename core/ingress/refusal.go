package ingress

import (
	"strconv"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// framingError is the gateway's answer to a request its framing refused (err from core/http1,
// or a refusal shaped like one): pipeline.FramingGatewayError, but a head over the header size
// limit, or a body over the body size limit, is named by the entrypoint's setting and its
// value, so that whoever reads the answer knows what to raise.
func framingError(err error, lim *http1.Limits) *pipeline.GatewayError {
	ge := pipeline.FramingGatewayError(err)
	switch {
	case http1.OverHeaderBytes(err):
		ge.Message = overHeaderBytes(ge.Status, lim)
	case ge.Status == 413:
		ge.Message = "request body larger than the entrypoint's max_body_bytes (" + strconv.FormatInt(lim.BodyBytes(), 10) + " bytes)"
	}
	return ge
}

// bodyTooLarge is the refusal of a request body over max_body_bytes that the engine found
// itself (by its Content-Length, or fasthttp's own limit); framingError words it.
var bodyTooLarge = &http1.Error{Status: 413, Msg: "request body larger than the limit"}

// overHeaderBytes is the message of a 414 (the request line alone is over the limit) or 431
// (the head is) for max_header_bytes = lim.HeaderBytes().
func overHeaderBytes(status int, lim *http1.Limits) string {
	n := strconv.Itoa(lim.HeaderBytes())
	if status == 414 {
		return "request line larger than the entrypoint's max_header_bytes (" + n + " bytes; RFC 9112 §3)"
	}
	return "request head larger than the entrypoint's max_header_bytes (" + n + " bytes)"
}
