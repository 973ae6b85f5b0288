package pipeline

import (
	"errors"
	"io"
	"slices"
	"time"

	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/relay"
	"github.com/sluice-gw/sluice/pool"
)

// A body cut short by its upstream (RFC 9112 §8) can be answered cleanly only while the
// client has no byte of the response: once the head is out, all that is left is to close the
// connection mid-body. So a short Content-Length body whose first bytes came with the
// upstream's head is read whole before its head is written. An upstream that sends body bytes
// with its head has the body in hand, and the rest follows at once, so the wait costs nothing;
// if it fails to follow, the client gets the gateway's 502 (504 for a stall) instead of a
// truncated 200, which many clients report only as a broken connection. Bodies that may be
// streams (chunked, event streams), those whose head came alone and those over
// wholeBodyBytes go to the client as they come: their head goes out at once.

// wholeBodyBytes is the largest Content-Length body read whole before its head is written.
// It bounds what one request buffers, on an event loop too.
const wholeBodyBytes = earlyBodyBytes

// collects reports whether the response body is to be read whole before its head is written:
// a Content-Length body of at most wholeBodyBytes that is not an event stream, passes
// through unchanged, and whose first bytes arrived with the upstream's head.
func (rc *RequestCtx) collects() bool {
	return !rc.replied && !rc.ended && !rc.held && rc.enc == nil && !rc.sse &&
		rc.framing == relay.Length && rc.x.Resp.ContentLength <= wholeBodyBytes && rc.x.Buffered() > 0
}

// CollectBody reads the response body whole before the head is written, when collects says
// so; WriteHead calls it, and an engine that hands the body to its own server (fasthttp) calls
// it before it starts the response and then takes the body with TakeWholeBody. It returns nil
// once the response is ready to write: the body is held whole, or is relayed as it comes, or
// it failed and the response is now the gateway's answer (Replied: 502, or 504 for a stall,
// counted and logged as an upstream failure). It returns pool.ErrWouldBlock on an event loop
// while the rest of the body has not arrived (call again when the upstream sends more), and
// ErrClientGone when the client left meanwhile.
func (rc *RequestCtx) CollectBody() error {
	if rc.whole == nil {
		if !rc.collects() {
			return nil
		}
		rc.whole = GetBuf()
		*rc.whole = slices.Grow((*rc.whole)[:0], int(rc.x.Resp.ContentLength))
	}
	for !rc.ended {
		b := *rc.whole
		n, err := rc.x.ReadBody(b[len(b):cap(b)], true)
		*rc.whole = b[:len(b)+n]
		switch {
		case err == nil:
			rc.ended = rc.x.Done()
		case errors.Is(err, io.EOF):
			rc.ended = true
		case err == pool.ErrWouldBlock:
			return err
		default:
			return rc.collectFailed(err)
		}
	}
	return nil
}

// collectFailed makes the answer of a body that failed while it was read whole: the client
// left, or the upstream failed, which the client gets as the gateway's error.
func (rc *RequestCtx) collectFailed(err error) error {
	rc.releaseWhole()
	if rc.Canceled() {
		rc.dropUpstream()
		rc.answer(errClientGone)
		return errClientGone
	}
	rc.outcome.UpstreamError = UpstreamReason(err)
	ge := UpstreamGatewayError(err)
	if cut := rc.cutError(); cut != nil {
		// A deadline aborted the exchange: the abort is its doing, not the upstream's.
		rc.outcome.UpstreamError, ge = metrics.ReasonTimeout, cut
	}
	rc.ep.elog.upstreamFailed(rc.route.Name, rc.backend.URL, "body", err)
	rc.dropUpstream() // none of its bytes went to the client
	if ge == ErrUpstreamClosed {
		ge = ErrUpstreamCut // it did answer: the body is what it cut short
	}
	rc.fail(ge)
	return nil
}

// TakeWholeBody returns the body CollectBody read whole, valid until Finish, and counts it as
// relayed to the client (call it once); false when there is none (the body is relayed as it
// comes).
func (rc *RequestCtx) TakeWholeBody() ([]byte, bool) { return rc.takeWholeBody(time.Time{}) }

// takeWholeBody is TakeWholeBody with the clock reading of the event that completed the body
// (zero: read the clock if the relay times this framing).
func (rc *RequestCtx) takeWholeBody(now time.Time) ([]byte, bool) {
	if rc.whole == nil || rc.replied {
		return nil, false
	}
	b := *rc.whole
	if len(b) > 0 {
		rc.observe(rc.relay.Pass(b, rc.stamp(now)))
		rc.route.Chain.onBody(rc, b)
	}
	return b, true
}

func (rc *RequestCtx) releaseWhole() {
	if rc.whole != nil {
		ReleaseBuf(rc.whole)
		rc.whole = nil
	}
}
