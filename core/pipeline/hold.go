package pipeline

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/relay"
)

// A streaming caller that has to wait before its request can go upstream (a cold start: no
// replica of the service is ready yet) is answered at once with the head of an event stream,
// and gets an SSE comment line every keep-alive interval while it waits, so that proxies and
// load balancers between it and the gateway do not cut an idle connection. When the wait
// ends, the request goes upstream as any other, and the upstream's events follow the
// comments; a wait that fails (its deadline passed, the queue was closed) or an upstream
// that answers with an error ends the stream with an SSE error event, never with [DONE].
//
// A service hook offers this by implementing HoldHook; the pipeline asks it before
// OnService, for streaming callers only, and then calls OnService with a keep-alive tick
// (RequestCtx.KeepAliveTick) until it stops answering ErrStillWaiting.

// HoldHook is a ServiceHook that can hold a streaming caller with keep-alives instead of
// blocking before the response head.
type HoldHook interface {
	ServiceHook
	// WouldWait reports whether OnService would make rc wait now (a refusal, such as a full
	// queue, is not a wait), and how often a waiting caller gets a keep-alive. A hook may
	// take rc's place in its queue there, so that the answer still holds when OnService
	// runs; OnServiceDone runs for rc either way.
	WouldWait(rc *RequestCtx) (every time.Duration, wait bool)
}

// ErrStillWaiting is what a HoldHook's OnService returns when the request's keep-alive tick
// fired while it waited: the pipeline sends the caller a keep-alive and calls OnService
// again, which goes on waiting where it was.
var ErrStillWaiting = errors.New("pipeline: still waiting")

// errHold ends Begin for a request whose streaming caller is held.
var errHold = errors.New("pipeline: held")

// keepAliveComment is the SSE comment line a held caller gets (WHATWG HTML, event stream
// interpretation: a line starting with a colon is ignored).
var keepAliveComment = []byte(": keep-alive\n\n")

var (
	hdrContentType  = []byte("Content-Type")
	hdrCacheControl = []byte("Cache-Control")
	valEventStream  = []byte("text/event-stream")
	valNoCache      = []byte("no-cache")
)

// holdState is a held request's wait.
type holdState struct {
	hook     HoldHook
	index    int // of the hook in its service's hooks: the ones after it run when it lets go
	every    time.Duration
	ticker   *time.Ticker
	resolved bool
}

// KeepAliveTick returns a channel that receives when a held streaming caller is due a
// keep-alive, for a HoldHook's wait (nil, which never receives, when the caller is not held).
func (rc *RequestCtx) KeepAliveTick() <-chan time.Time {
	if h := &rc.hold; rc.held && h.ticker != nil {
		return h.ticker.C
	}
	return nil
}

// wantsStream reports whether the caller asked for a streamed answer: an OpenAI request body
// with "stream": true, or Accept: text/event-stream.
func (rc *RequestCtx) wantsStream() bool {
	if v, ok := rc.Req.HeaderValue("Accept"); ok && bytes.Contains(v, valEventStream) {
		return true
	}
	ep, ok := openai.EndpointForPath(rc.Req.Path)
	if !ok {
		return false
	}
	var r openai.Request
	return openai.Peek(ep, rc.Req.Body, &r) == nil && r.Stream
}

// mayHold reports whether hook h of the request's service at index i holds the request: it
// would wait and the caller streams. It then keeps the hold for the body phase.
func (rc *RequestCtx) mayHold(h ServiceHook, i int) bool {
	hh, ok := h.(HoldHook)
	if !ok || rc.isHEAD {
		return false
	}
	every, wait := hh.WouldWait(rc)
	if !wait || every <= 0 || !rc.wantsStream() {
		return false
	}
	rc.hold = holdState{hook: hh, index: i, every: every}
	return true
}

// planHeld makes the response an event stream whose head goes out now.
func (rc *RequestCtx) planHeld() {
	rc.held = true
	f := relay.Chunk
	switch {
	case rc.Req.Major == 1 && rc.Req.Minor == 0:
		f, rc.keepAlive = relay.Close, false
	case rc.FramesBodies:
		f = relay.Payload
	}
	rc.framing, rc.sse = f, true
	rc.outcome.Status = 200
	rc.relay.Reset(f, true, rc.start)
	rc.streaming = true
	rc.route.M.StreamStarted()
}

// appendHeldHead appends the head of a held stream.
func (rc *RequestCtx) appendHeldHead(dst []byte) []byte {
	dst = http1.AppendStatusLine(dst, 1, 1, 200, nil)
	dst = appendField(dst, hdrContentType, valEventStream)
	dst = appendField(dst, hdrCacheControl, valNoCache)
	dst = rc.appendOwnFields(dst)
	if rc.framing == relay.Chunk {
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	}
	return appendConnection(dst, &rc.Req, rc.keepAlive)
}

// holdStep waits for the held request's next event. ka reports that a keep-alive is due;
// otherwise the wait is over and the request went upstream: err is nil when the upstream's
// head is in (rc.x), else the answer the wait or the exchange ended with.
func (rc *RequestCtx) holdStep() (ka bool, err error) {
	h := &rc.hold
	if h.ticker == nil {
		h.ticker = time.NewTicker(h.every)
	}
	err = h.hook.OnService(rc)
	if err == ErrStillWaiting {
		return true, nil
	}
	h.ticker.Stop()
	h.resolved = true
	if err != nil {
		return false, err
	}
	if s := rc.service; s != nil {
		for _, x := range s.Hooks[h.index+1:] {
			if err := x.OnService(rc); err != nil {
				return false, err
			}
		}
	}
	return false, rc.exchange()
}

// maxHeldErrorBytes bounds the upstream error body turned into a held stream's error event.
const maxHeldErrorBytes = 16 << 10

// afterHold turns the end of a held request's wait into what follows the keep-alives: nil
// when the upstream's event stream follows (relayed as any stream), or the error event that
// ends the stream (the wait failed, or the upstream answered with an error or not a stream).
// gone reports that the client left.
func (rc *RequestCtx) afterHold(err error) (event []byte, gone bool) {
	if err == errClientGone || rc.Canceled() {
		rc.outcome.Canceled = true
		rc.keepAlive = false
		return nil, true
	}
	if err != nil {
		ge, ok := err.(*GatewayError)
		if !ok && !errors.As(err, &ge) {
			ge = ErrInternal
		}
		rc.outcome.UpstreamError = metrics.ReasonStream
		if ge.Status == 504 {
			rc.outcome.UpstreamError = metrics.ReasonTimeout
		}
		rc.ended, rc.keepAlive = true, false
		return appendSSEErrorShaped(nil, ge, rc.errShape), false
	}
	resp := &rc.x.Resp
	ok := resp.Status >= 200 && resp.Status < 300
	if ok && relay.IsEventStream(resp) && !relay.IsCoded(resp) {
		if err := rc.route.Chain.onResponse(rc); err != nil {
			rc.dropUpstream()
			rc.ended, rc.keepAlive = true, false
			return appendSSEErrorShaped(nil, ErrInternal, rc.errShape), false
		}
		rc.armStreamDeadlines()
		return nil, false
	}
	rc.outcome.UpstreamError = metrics.ReasonStream
	if ok && relay.IsEventStream(resp) {
		// The upstream coded its events although asked for identity (appendUpstreamHead): they
		// cannot go out under the head the client has, which names no coding.
		coding, _ := resp.HeaderValue("Content-Encoding")
		rc.dropUpstream()
		rc.ended, rc.keepAlive = true, false
		return appendSSEErrorShaped(nil, codedStreamError(coding), rc.errShape), false
	}
	// The upstream refused (or answered without a stream) after the head went out: its answer
	// becomes the stream's error event, its OpenAI error object when it sent one.
	body := make([]byte, 0, 512)
	buf := make([]byte, 4096)
	for len(body) < maxHeldErrorBytes {
		n, rerr := rc.x.ReadBody(buf, false)
		body = append(body, buf[:n]...)
		if rerr != nil {
			break
		}
	}
	status := resp.Status
	rc.dropUpstream()
	rc.ended, rc.keepAlive = true, false
	body = bytes.TrimSpace(body)
	if len(body) > 0 && len(body) <= maxHeldErrorBytes && body[0] == '{' && !bytes.ContainsAny(body, "\r\n") {
		ev := append([]byte("event: error\ndata: "), body...)
		return append(ev, "\n\n"...), false
	}
	ge := &GatewayError{Status: status, Type: UpstreamError, Code: "upstream_error", Message: "the upstream answered " + http1.StatusText(status)}
	if ok {
		// A success, but not the event stream the caller asked for.
		ge.Status, ge.Message = 502, "the upstream answered "+strconv.Itoa(status)+" "+http1.StatusText(status)+" without an event stream"
		if ct, has := resp.HeaderValue("Content-Type"); has {
			ge.Message += " (Content-Type: " + fieldShown(ct) + ")"
		}
	}
	return appendSSEErrorShaped(nil, ge, rc.errShape), false
}

// codedStreamError is the error event of a held stream whose upstream answered its event
// stream with the content coding coding (Content-Encoding), which it was asked not to use.
func codedStreamError(coding []byte) *GatewayError {
	return &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_error",
		Message: "the upstream coded its event stream (Content-Encoding: " + fieldShown(coding) +
			") although the gateway asked for none (Accept-Encoding: identity): a held stream relays events uncoded"}
}

// maxFieldShown bounds the bytes of an upstream's field value quoted in an error message.
const maxFieldShown = 64

// fieldShown is an upstream's field value as an error message quotes it: at most
// maxFieldShown bytes, "…" marking a cut.
func fieldShown(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) > maxFieldShown {
		return string(v[:maxFieldShown]) + "…"
	}
	return string(v)
}

// writeHeld writes a held stream to ds: its head, then its body (relayHeld).
func (rc *RequestCtx) writeHeld(ds Downstream) error {
	hb := GetBuf()
	*hb = rc.appendHeldHead((*hb)[:0])
	if err := ds.Send(hb, 0, len(*hb)); err != nil {
		return rc.clientLeft()
	}
	return rc.relayHeld(ds)
}

// relayHeld writes the body of a held stream to ds: keep-alives while it waits, then the
// upstream's events or the error event that ends it.
func (rc *RequestCtx) relayHeld(ds Downstream) error {
	for {
		ka, err := rc.holdStep()
		if ka {
			if rc.sendRaw(ds, keepAliveComment) != nil {
				return rc.clientLeft()
			}
			continue
		}
		ev, gone := rc.afterHold(err)
		if gone {
			return errClientGone
		}
		if ev != nil {
			if rc.sendRaw(ds, ev) != nil {
				return rc.clientLeft()
			}
			return rc.sendTail(ds, rc.relay.End)
		}
		return rc.relayTo(ds)
	}
}

// sendRaw sends p as stream bytes of the held response, framed for the client, without
// counting them as the upstream's (no timing observation); they count as the gateway's own
// body bytes (Outcome.BytesOut).
func (rc *RequestCtx) sendRaw(ds Downstream, p []byte) error {
	rc.ownOut += int64(len(p))
	bp := GetBuf()
	b := (*bp)[:0]
	if rc.framing == relay.Chunk {
		b = http1.AppendChunkHeader(b, len(p))
		b = append(b, p...)
		b = append(b, '\r', '\n')
	} else {
		b = append(b, p...)
	}
	*bp = b
	return ds.Send(bp, 0, len(b))
}
