package pipeline

import (
	"errors"
	"time"

	"github.com/sluice-gw/sluice/pool"
)

// StreamTimeouts are a service's deadlines for a streamed (text/event-stream) response, on
// top of the connection-level ones of its pool (the response head within
// response_header_timeout, no read silent for stream_idle_timeout). Both count from the moment
// the request was sent to the backend that answers, and are checked once the response head
// says the body is an event stream: a response that is not streamed (a whole JSON answer) is
// bounded by the head and idle timeouts alone. Zero disables a deadline.
type StreamTimeouts struct {
	// FirstToken bounds the time from the request being sent to the first byte of the
	// stream's body (what LLM users feel as time to first token): a generation stuck in
	// prefill is cut, whatever its head said.
	FirstToken time.Duration
	// Total bounds the time from the request being sent to the end of the stream: a
	// generation that keeps going past it is cut, however alive.
	Total time.Duration
}

// Enabled reports whether any deadline is set.
func (t StreamTimeouts) Enabled() bool { return t.FirstToken > 0 || t.Total > 0 }

// Gateway errors of the stream deadlines: the JSON answer when nothing was sent yet, the SSE
// error event when the stream had started. A stream the upstream left silent for
// stream_idle_timeout ends with ErrStreamIdle.
var (
	ErrFirstTokenTimeout = &GatewayError{Status: 504, Type: UpstreamError, Code: "first_token_timeout", Message: "the upstream sent no token within the service's first_token_timeout"}
	ErrStreamTimeout     = &GatewayError{Status: 504, Type: UpstreamError, Code: "stream_timeout", Message: "the stream lasted longer than the service's stream_timeout"}
	ErrStreamIdle        = &GatewayError{Status: 504, Type: UpstreamError, Code: "stream_idle_timeout", Message: "the upstream sent nothing within the service's stream_idle_timeout"}

	sseFirstTokenTimeout = newSSEErrorEvents(ErrFirstTokenTimeout)
	sseStreamTimeout     = newSSEErrorEvents(ErrStreamTimeout)
	sseStreamIdle        = newSSEErrorEvents(ErrStreamIdle)
)

// Which deadline cut a stream (RequestCtx.cut).
const (
	cutNone uint8 = iota
	cutFirstToken
	cutTotal
	cutStage // a stage's own deadline (RequestCtx.Expire); deadlineState.stageErr names it
)

// deadlineState is a request's armed stream deadlines, guarded by RequestCtx.cancelMu: the
// timer fires on its own goroutine.
type deadlineState struct {
	timer   *time.Timer // made once per RequestCtx, reused by every request it serves
	gen     uint64      // bumped at every arm and disarm: a late firing of an old arm does nothing
	first   time.Time   // zero: no first-token deadline (or the first byte arrived)
	total   time.Time   // zero: no total deadline
	cut     uint8       // the deadline that aborted the exchange
	armedAt uint64      // gen of the arm the timer belongs to
	// stageErr is what the client gets when cut is cutStage.
	stageErr *GatewayError
}

// armStreamDeadlines starts the service's stream deadlines for the response whose head just
// arrived, counted from sent. It does nothing for a response that is not an event stream or a
// service without them.
func (rc *RequestCtx) armStreamDeadlines() {
	svc := rc.service
	if svc == nil || !svc.StreamTimeouts.Enabled() || !rc.sse || rc.ended {
		return
	}
	t := svc.StreamTimeouts
	sent := rc.sent
	if sent.IsZero() {
		sent = rc.start // an exchange a stage ran itself (Adopt): counted from the request
	}
	rc.cancelMu.Lock()
	d := &rc.dl
	d.gen++
	d.armedAt = d.gen
	d.first, d.total = time.Time{}, time.Time{}
	if t.FirstToken > 0 {
		d.first = sent.Add(t.FirstToken)
	}
	if t.Total > 0 {
		d.total = sent.Add(t.Total)
	}
	wait := time.Until(d.next())
	if d.timer == nil {
		d.timer = time.AfterFunc(max(wait, 0), rc.deadlineFired)
	} else {
		d.timer.Reset(max(wait, 0))
	}
	rc.cancelMu.Unlock()
}

// next returns the earlier armed deadline (zero when none).
func (d *deadlineState) next() time.Time {
	switch {
	case d.first.IsZero():
		return d.total
	case d.total.IsZero() || d.first.Before(d.total):
		return d.first
	}
	return d.total
}

// firstByte drops the first-token deadline once the stream's first byte arrived, leaving the
// timer to the total deadline.
func (rc *RequestCtx) firstByte() {
	rc.cancelMu.Lock()
	d := &rc.dl
	if d.armedAt == d.gen && !d.first.IsZero() && d.cut == cutNone {
		d.first = time.Time{}
		if d.total.IsZero() {
			d.gen++ // nothing left to watch: a firing now is stale
			d.timer.Stop()
		} else {
			d.timer.Reset(max(time.Until(d.total), 0))
		}
	}
	rc.cancelMu.Unlock()
}

// disarmStreamDeadlines stops the deadlines at the end of the request.
func (rc *RequestCtx) disarmStreamDeadlines() {
	rc.cancelMu.Lock()
	d := &rc.dl
	if d.timer != nil {
		d.gen++
		d.timer.Stop()
	}
	d.first, d.total, d.cut, d.stageErr = time.Time{}, time.Time{}, cutNone, nil
	rc.cancelMu.Unlock()
}

// deadlineFired runs on the timer's goroutine: when an armed deadline has passed, it records
// which and aborts the upstream exchange, so that the relay's blocked read returns at once
// and ends the stream with the deadline's error event; a firing for a deadline since moved
// re-arms the timer.
func (rc *RequestCtx) deadlineFired() {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	d := &rc.dl
	if d.armedAt != d.gen || d.cut != cutNone {
		return
	}
	now := time.Now()
	switch {
	case !d.first.IsZero() && !now.Before(d.first):
		d.cut = cutFirstToken
	case !d.total.IsZero() && !now.Before(d.total):
		d.cut = cutTotal
	default:
		if n := d.next(); !n.IsZero() {
			d.timer.Reset(n.Sub(now))
		}
		return
	}
	if rc.hasAbort {
		rc.abort.Abort()
	}
}

// Expire cuts the request's upstream exchange because a deadline that the stage running it
// keeps has passed (a stage that adopted the exchange and bounds it on its own: the
// prefill/decode execution_timeout_ms). e, a gateway error of status 504, names that deadline.
// The exchange is aborted and the request ends as one a stream deadline cut: a client whose
// stream had begun gets e as the SSE error event, one whose body was being read whole before
// its head went out gets e as the answer, and the request counts as an upstream timeout
// (sluice_upstream_errors_total and the access log's upstream_error, reason "timeout"). It does
// nothing when no exchange is in flight (before Adopt, after Finish), when a deadline already
// cut it or when the client left. Safe from any goroutine; a goroutine that may outlive the
// request calls it through a CancelHandle.
func (rc *RequestCtx) Expire(e *GatewayError) { rc.expireSeq(e, 0, false) }

func (rc *RequestCtx) expireSeq(e *GatewayError, seq uint64, check bool) {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	d := &rc.dl
	if (check && seq != rc.seq) || !rc.hasAbort || rc.canceled || d.cut != cutNone {
		return
	}
	d.cut, d.stageErr = cutStage, e
	rc.abort.Abort()
}

// deadlineCut returns which stream deadline aborted the exchange (cutNone: none did).
func (rc *RequestCtx) deadlineCut() uint8 {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	return rc.dl.cut
}

// cutError returns the gateway error of the deadline that aborted the exchange, nil when none
// did.
func (rc *RequestCtx) cutError() *GatewayError {
	rc.cancelMu.Lock()
	defer rc.cancelMu.Unlock()
	switch rc.dl.cut {
	case cutFirstToken:
		return ErrFirstTokenTimeout
	case cutTotal:
		return ErrStreamTimeout
	case cutStage:
		return rc.dl.stageErr
	}
	return nil
}

// streamFailure returns the SSE error event that describes a body read failure err: a
// deadline's, the idle timeout's, or the generic upstream failure.
func (rc *RequestCtx) streamFailure(err error) []byte {
	switch rc.deadlineCut() {
	case cutFirstToken:
		return sseFirstTokenTimeout[rc.errShape]
	case cutTotal:
		return sseStreamTimeout[rc.errShape]
	case cutStage:
		return appendSSEErrorShaped(nil, rc.cutError(), rc.errShape)
	}
	if errors.Is(err, pool.ErrTimeout) {
		return sseStreamIdle[rc.errShape]
	}
	return sseErrorEvent[rc.errShape]
}
