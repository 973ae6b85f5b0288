package pipeline

import (
	"time"

	"github.com/sluice-gw/sluice/core/metrics"
)

// ServerFailure reports whether an upstream's answer of status counts against the server,
// for the stages that judge backends by their answers (passive health, a circuit breaker): a
// 5xx, except 501 Not Implemented and 505 HTTP Version Not Supported. Those two say that the
// server does not support what the request asked for, a method or a protocol version (RFC
// 9110 §15.6.2, §15.6.6): any client provokes them at will, from a server that works, and
// counting them would let one client take a backend out for every other. (HAProxy's
// "observe layer7" makes the same two exceptions.)
func ServerFailure(status int) bool {
	return status >= 500 && status != 501 && status != 505
}

// observeHealth tells the passive health of the request's service how its backend did: a
// failure is an answer ServerFailure counts, or an upstream failure other than a connect
// failure (a timeout, a reset before the head, a stream cut after its 200), which the choice
// counts itself. A client that left judges nobody, nor does an answer the gateway gave for
// its own reasons. now is when the request ended.
func (rc *RequestCtx) observeHealth(now time.Time) {
	b, svc := rc.tried, rc.service
	o := &rc.outcome
	if b == nil || svc == nil || svc.Health == nil || o.Canceled || o.UpstreamError == metrics.ReasonDial {
		return
	}
	if id := b.LB.ID; id >= len(svc.Backends) || svc.Backends[id] != b {
		return // a backend of the service a fallback moved the request from
	}
	switch {
	case o.UpstreamError != "":
		svc.Health.ObserveAt(b.LB.ID, true, now)
	case !o.GatewayReply && o.Status > 0:
		svc.Health.ObserveAt(b.LB.ID, ServerFailure(o.Status), now)
	}
}
