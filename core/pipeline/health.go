package pipeline

import (
	"time"

	"github.com/sluice-gw/sluice/core/metrics"
)

// observeHealth tells the passive health of the request's service how its backend did: a
// failure is a 5xx from the upstream, or an upstream failure other than a connect failure (a
// timeout, a reset before the head, a stream cut after its 200), which the choice counts
// itself. A client that left judges nobody, nor does an answer the gateway gave for its own
// reasons. now is when the request ended.
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
		svc.Health.ObserveAt(b.LB.ID, o.Status >= 500, now)
	}
}
