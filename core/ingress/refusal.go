package ingress

import (
	"strconv"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// framingError is the gateway's answer to a request its framing refused (err from core/http1,
// or a refusal shaped like one): pipeline.FramingGatewayError, but a head over the header size
// limit is named by the entrypoint's setting and its value, so that whoever reads the answer
// knows what to raise.
func framingError(err error, lim *http1.Limits) *pipeline.GatewayError {
	ge := pipeline.FramingGatewayError(err)
	if http1.OverHeaderBytes(err) {
		ge.Message = overHeaderBytes(ge.Status, lim)
	}
	return ge
}

// overHeaderBytes is the message of a 414 (the request line alone is over the limit) or 431
// (the head is) for max_header_bytes = lim.HeaderBytes().
func overHeaderBytes(status int, lim *http1.Limits) string {
	n := strconv.Itoa(lim.HeaderBytes())
	if status == 414 {
		return "request line larger than the entrypoint's max_header_bytes (" + n + " bytes; RFC 9112 §3)"
	}
	return "request head larger than the entrypoint's max_header_bytes (" + n + " bytes)"
}
