// Package relay turns an upstream response body into the bytes the client gets, without doing
// any I/O itself: the caller reads the upstream and writes the client, the relay only frames
// (Content-Length pass-through, chunked pass-through, re-chunking, close-delimited), follows
// the Server-Sent Events boundaries of the stream, ends a stream that failed mid-way with an
// SSE error event when it can, and times the stream (time to first byte, gaps between reads).
//
// Both ingress engines drive the same Relay through the same steps: each framed read goes to
// the client connection (gnet) or, as payload, to fasthttp.Server's chunked body writer, which
// frames it. Keeping the logic free of sockets is what lets it be tested and fuzzed on byte
// strings alone.
package relay

import (
	"bytes"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/internal/steps"
	"github.com/sluice-gw/sluice/sse"
)

// Framing is how the body bytes are delimited towards the client (RFC 9112 §6.3, §7).
type Framing uint8

// Client framings, chosen by Plan.
const (
	// None: the response has no body (HEAD, 1xx, 204, 304).
	None Framing = iota
	// Length: Content-Length; the upstream's wire bytes pass through unchanged.
	Length
	// ChunkedRaw: chunked on both sides; the upstream's wire bytes (chunk framing included)
	// pass through unchanged.
	ChunkedRaw
	// Chunk: decoded payload, each read re-framed as one chunk (an upstream body delimited by
	// close, or an SSE stream whose boundaries the relay must see, to an HTTP/1.1 client).
	Chunk
	// Close: decoded payload, delimited by closing the connection (an HTTP/1.0 client and a
	// body of unknown length).
	Close
	// Payload: decoded payload that the downstream frames itself (fasthttp.Server writes each
	// write of a body of unknown length as one chunk, and the last chunk at its end).
	Payload
)

// Raw reports whether f forwards the upstream's wire bytes (framing included), so that the
// upstream reader must return them undecoded.
func (f Framing) Raw() bool { return f == Length || f == ChunkedRaw }

// String names the framing for logs and tests.
func (f Framing) String() string {
	switch f {
	case None:
		return "none"
	case Length:
		return "length"
	case ChunkedRaw:
		return "chunked-raw"
	case Chunk:
		return "chunk"
	case Close:
		return "close"
	case Payload:
		return "payload"
	}
	return "invalid"
}

// Plan chooses the client framing for resp (RFC 9112 §6.3, §7) and whether the client
// connection stays open afterwards. An HTTP/1.0 client never gets a chunked response: a body of
// unknown length is delimited by closing the connection instead. An SSE stream that arrives
// chunked is re-chunked (Chunk) rather than passed through, so that the relay sees its event
// boundaries and can end it with an error event after an upstream failure.
func Plan(resp *http1.Response, reqHEAD bool, req *http1.Request) (Framing, bool) {
	keepAlive := req.KeepAlive
	http10 := req.Major == 1 && req.Minor == 0
	switch resp.BodyMode(reqHEAD) {
	case http1.BodyNone:
		return None, keepAlive
	case http1.BodyLength:
		return Length, keepAlive
	case http1.BodyChunked:
		if http10 {
			return Close, false
		}
		if IsEventStream(resp) {
			return Chunk, keepAlive
		}
		return ChunkedRaw, keepAlive
	default: // until close
		if http10 {
			return Close, false
		}
		return Chunk, keepAlive
	}
}

// IsEventStream reports whether resp declares Content-Type text/event-stream (SSE).
func IsEventStream(resp *http1.Response) bool {
	v, ok := resp.HeaderValue("Content-Type")
	return ok && len(v) >= len(eventStream) && bytes.EqualFold(v[:len(eventStream)], eventStream)
}

var eventStream = []byte("text/event-stream")

// IsCoded reports whether resp's body carries a content coding (a Content-Encoding other than
// identity, RFC 9110 §8.4): its bytes are not the events or the JSON they encode, so the
// gateway neither reads them nor writes anything of its own among them.
func IsCoded(resp *http1.Response) bool {
	v, ok := resp.HeaderValue("Content-Encoding")
	if !ok {
		return false
	}
	v = bytes.TrimSpace(v)
	return len(v) > 0 && !bytes.EqualFold(v, identity)
}

var identity = []byte("identity")

// Headroom is the space Frame needs in front of the data it frames (a chunk-size line of up
// to 16 hex digits and CRLF), and Tailroom the space after it (the chunk's CRLF). Buffers
// handed to Frame hold the upstream bytes at buf[Headroom:Headroom+n] with Tailroom to spare.
const (
	Headroom = 18
	Tailroom = 2
)

// ObsKind says what a read told about the stream's timing.
type ObsKind uint8

// Observation kinds returned by Frame.
const (
	ObsNone  ObsKind = iota // not a streamed body (Content-Length), or nothing read
	ObsFirst                // the first body bytes: D is the time since the request started (TTFT)
	ObsGap                  // later bytes: D is the time since the previous read (inter-token latency)
)

// Obs is one timing observation of a streamed body.
type Obs struct {
	Kind ObsKind
	D    time.Duration
}

// Relay is the state of one response body on its way to the client. The zero value is not
// ready: call Reset for every response. A Relay is not safe for concurrent use.
type Relay struct {
	framing Framing
	sse     bool
	started time.Time
	last    time.Time
	bytes   int64
	ended   bool
	ev      eventState
	unsent  int  // payload bytes accounted for and not yet sent (Keep)
	open    int  // payload bytes since the last SSE event boundary
	sentEnd bool // the payload sent so far ends on an SSE event boundary
	sentCR  bool // and its last byte is a CR whose LF, if any, has not been sent
	sentEOL eol  // the last line ending known whole in the payload sent so far
}

// Reset prepares r for a response framed as f; sse marks an event stream (its boundaries are
// tracked; only decoded framings can see them); started is when the request began, the origin
// of the first-byte time.
func (r *Relay) Reset(f Framing, sse bool, started time.Time) {
	*r = Relay{framing: f, sse: sse && !f.Raw(), started: started, sentEnd: true}
	r.ev.reset()
}

// Timed reports whether Pass and Frame time this response's reads (every framing but
// Length, whose body is not a stream): a caller may skip the clock read otherwise.
func (r *Relay) Timed() bool { return r.framing != Length }

// Framing returns the framing r was reset with.
func (r *Relay) Framing() Framing { return r.framing }

// Bytes returns the upstream body bytes relayed so far (wire bytes for raw framings, payload
// otherwise) and the payload of the error event Fail added, the figure counted as response
// bytes.
func (r *Relay) Bytes() int64 { return r.bytes }

// Keep accounts for the upstream bytes p just read, which follow the payload accounted for
// before and not yet sent, and returns how many bytes at the end of that payload (p
// included) the caller should keep back and send after its next read instead of now: the
// start of an SSE event whose blank line has not come, when it is at most limit bytes (0
// otherwise, and always for a stream that is not an event stream). A client dispatches an
// event only at that blank line (WHATWG HTML, "event stream interpretation"), so an event's
// pieces sent as they come gain it nothing and cost it, the gateway and the network one
// write each: an upstream that writes its events in pieces, down to a byte per write, then
// costs one client write per event. The events that did end go out at once.
func (r *Relay) Keep(p []byte, limit int) int {
	r.account(p)
	if !r.sse || r.open == 0 || r.open > limit {
		return 0
	}
	return min(r.open, r.unsent)
}

// Sent records that the first n payload bytes accounted for and not yet sent go to the
// client now, and returns the timing observation of that write (taken at now): TTFT for a
// stream's first, else the gap since the previous one.
func (r *Relay) Sent(n int, now time.Time) (o Obs) {
	r.unsent -= n
	// What stays behind is the open event's start exactly when the bytes sent end on its
	// boundary; a remainder that holds more than that was cut anywhere (treated as inside).
	r.sentEnd = r.unsent == r.open || (r.unsent == 0 && r.ev.atBoundary())
	// What Fail adds must follow the last byte the client got, not the last one read: the
	// bytes sent end at the last boundary, or at the end of what was read.
	if r.unsent == r.open {
		r.sentCR, r.sentEOL = r.ev.cutCR, r.ev.cutEOL
	} else {
		r.sentCR, r.sentEOL = r.ev.afterCR, r.ev.eol
	}
	if r.framing != Length {
		if r.last.IsZero() {
			o = Obs{ObsFirst, now.Sub(r.started)}
		} else {
			o = Obs{ObsGap, now.Sub(r.last)}
		}
		r.last = now
	}
	return o
}

// FrameKept frames for the client, in place as Frame does, the first n payload bytes
// accounted for (Keep) and not yet sent, at buf[Headroom:Headroom+n], and returns their
// bounds with the timing observation of sending them (Sent). buf must have Headroom bytes
// before the data and Tailroom after it; the Tailroom bytes are overwritten, so bytes kept
// back there must be copied away first.
func (r *Relay) FrameKept(buf []byte, n int, now time.Time) (lo, hi int, o Obs) {
	lo, hi = Headroom, Headroom+n
	if n == 0 {
		return lo, lo, Obs{}
	}
	o = r.Sent(n, now)
	if r.framing == Chunk {
		lo = frameChunk(buf, lo, n)
		buf[hi], buf[hi+1] = '\r', '\n'
		hi += 2
	}
	return lo, hi, o
}

// InEvent reports whether the payload accounted for so far ends inside an SSE event: inside a
// line, or after a whole line other than a comment (a field) of an event whose blank line has
// not come. It is false at an event boundary, after whole comment lines that follow one (a
// keep-alive comment, which no client dispatches: nothing is lost if the stream ends there),
// before any byte, and for a response that is not an event stream or whose framing passes
// wire bytes (Raw), whose events the relay does not follow. A body delimited by the
// upstream's close (RFC 9112 §6.3 rule 8) that ends inside an event was cut: a client
// discards the open event at the end of the stream (WHATWG HTML, "event stream
// interpretation") and would see a stream that merely stops.
func (r *Relay) InEvent() bool {
	return r.sse && !r.ev.atBoundary() && (r.ev.open || !r.ev.lineStart)
}

// Drop forgets the payload accounted for and not sent, of a stream that ends without it: its
// upstream failed inside an event, which a client would discard unsent; Fail then ends the
// events that were sent with the error event.
func (r *Relay) Drop() { r.unsent = 0 }

// Frame turns the n upstream bytes at buf[Headroom:Headroom+n] into client bytes, in place,
// and returns their bounds in buf with the timing observation of this read (taken at now).
// buf must have Headroom bytes before the data and Tailroom after it. n = 0 returns an empty
// range and no observation.
func (r *Relay) Frame(buf []byte, n int, now time.Time) (lo, hi int, o Obs) {
	if n > 0 {
		r.account(buf[Headroom : Headroom+n])
	}
	return r.FrameKept(buf, n, now)
}

// Pass accounts for upstream bytes p that go to the client unchanged (every framing but
// Chunk, which needs Frame) and returns the timing observation of this read (taken at now).
func (r *Relay) Pass(p []byte, now time.Time) (o Obs) {
	if len(p) == 0 {
		return Obs{}
	}
	r.account(p)
	return r.Sent(len(p), now)
}

// account counts p, payload read after the bytes accounted for before, as not yet sent, and
// follows the stream's events through it.
func (r *Relay) account(p []byte) {
	r.bytes += int64(len(p))
	r.unsent += len(p)
	if !r.sse {
		return
	}
	if cut := r.ev.feed(p); cut >= 0 {
		r.open = len(p) - cut
	} else {
		r.open += len(p)
	}
}

// End appends to dst what ends a complete body (the last chunk of Chunk framing) and returns
// it. Calling it twice appends nothing the second time.
func (r *Relay) End(dst []byte) []byte {
	if r.ended {
		return dst
	}
	r.ended = true
	if r.framing == Chunk {
		dst = append(dst, http1.LastChunk...)
	}
	return dst
}

// Fail appends to dst what the client gets after the upstream failed mid-body, and returns
// it: for an event stream whose payload ends at an event boundary, the SSE event event (the
// gateway's error event, its lines ended by LF as sse.AppendErrorEvent writes them) framed
// for the client and, for Chunk framing, the last chunk, so the client reads an error instead
// of a silent cut (the stream still gets no "[DONE]"). Anything else gets nothing: the caller
// closes the connection and the client sees the truncation; a client discards an event still
// open at the end of the stream (WHATWG HTML, "event stream interpretation"), where any bytes
// added to close it would have it dispatched as if whole. After a Chunk tail the client's
// response is complete and its connection may be reused.
//
// The event is written in the line endings of the stream (CRLF, LF or CR, the last one the
// client got whole; LF when it got none), so that a client that splits events on its
// stream's own blank line ("\r\n\r\n", say) finds the end of the error event too. When the
// payload sent ends with a CR that ended the last event and the upstream failed before its
// LF could follow, an LF goes first, unless the stream ends its lines with a lone CR: the CR
// already ended the event for a parser that follows the SSE rules, but one that splits
// events on "\r\n\r\n", or on "\n\n" after turning CRLF into LF, would read the error event
// as the rest of that event. The LF completes the CRLF, one line ending (the SSE rules skip
// an LF right after a CR), so it adds no blank line and no parser dispatches an event for it.
func (r *Relay) Fail(dst, event []byte) []byte {
	if r.ended || !r.sse || !r.sentEnd || r.unsent > 0 {
		return dst
	}
	r.ended = true
	switch r.framing {
	case Chunk:
		n := r.failLen(event)
		r.bytes += int64(n)
		dst = http1.AppendChunkHeader(dst, n)
		dst = r.appendFail(dst, event)
		dst = append(dst, '\r', '\n')
		return append(dst, http1.LastChunk...)
	case Close, Payload:
		r.bytes += int64(r.failLen(event))
		return r.appendFail(dst, event)
	}
	return dst
}

// appendFail appends the client bytes of Fail's payload: the LF that completes a CRLF cut
// after its CR, then event in the stream's line endings.
func (r *Relay) appendFail(dst, event []byte) []byte {
	if r.completesCRLF() {
		dst = append(dst, '\n')
	}
	end := r.sentEOL.bytes()
	if len(end) == 1 && end[0] == '\n' {
		return append(dst, event...)
	}
	for {
		i := bytes.IndexByte(event, '\n')
		if i < 0 {
			return append(dst, event...)
		}
		dst = append(dst, event[:i]...)
		dst = append(dst, end...)
		event = event[i+1:]
	}
}

// failLen is the length of what appendFail appends for event.
func (r *Relay) failLen(event []byte) int {
	n := len(event) + bytes.Count(event, lf)*(len(r.sentEOL.bytes())-1)
	if r.completesCRLF() {
		n++
	}
	return n
}

// completesCRLF reports whether the payload sent ends with a CR that an LF must follow, as
// in the stream's other line endings, before anything else is sent.
func (r *Relay) completesCRLF() bool { return r.sentCR && r.sentEOL != eolCR }

var lf = []byte{'\n'}

// frameChunk writes the chunk-size line for n payload bytes ending just before b[lo] and
// returns the new start (RFC 9112 §7.1).
func frameChunk(b []byte, lo, n int) int {
	lo -= 2
	b[lo], b[lo+1] = '\r', '\n'
	for {
		lo--
		b[lo] = "0123456789abcdef"[n&0xf]
		n >>= 4
		if n == 0 {
			return lo
		}
	}
}

// eol is a line ending of an SSE stream (WHATWG HTML, "event stream interpretation").
type eol uint8

// Line endings; eolNone: none known yet.
const (
	eolNone eol = iota
	eolLF
	eolCRLF
	eolCR
)

// bytes returns the line ending e, LF for eolNone (the gateway's own).
func (e eol) bytes() []byte {
	switch e {
	case eolCRLF:
		return crlf
	case eolCR:
		return crlf[:1]
	}
	return lf
}

var crlf = []byte{'\r', '\n'}

// eventState follows the line structure of an SSE stream (WHATWG HTML, "event stream
// interpretation": a line ends in CRLF, LF or CR; a blank line dispatches the event) just far
// enough to know whether the bytes so far end on an event boundary, and which line endings
// the stream uses, so that bytes the relay adds after it match them.
type eventState struct {
	lineStart bool // the next byte starts a line
	blank     bool // the line that ended last was blank (or nothing was sent)
	afterCR   bool // the last byte was CR: an LF now completes that CRLF
	eol       eol  // the last line ending known whole (a CR is known lone by the byte after it)
	cutCR     bool // the byte before the last event boundary is a CR (its LF came later, or not yet)
	cutEOL    eol  // eol at the last event boundary
	// open: a line other than a comment (one starting with ':') began since the last blank
	// line, so the event has something a client would dispatch or apply; whole comment lines
	// alone open none.
	open bool
}

func (s *eventState) reset() { *s = eventState{lineStart: true, blank: true} }

func (s *eventState) atBoundary() bool { return s.lineStart && s.blank }

// feed follows the stream through p and returns the offset in p just past the last event
// boundary in it (past the LF of a CRLF whose CR is in p), -1 when there is none.
func (s *eventState) feed(p []byte) int {
	steps.Add(len(p) + 1)
	ends := sse.NewLineEnds(p)
	cut := -1
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.afterCR {
			s.afterCR = false
			if c == '\n' {
				// The LF of a CRLF that already ended the line. When the CR that ended an
				// event came in an earlier read, the event is sent: the LF alone goes with
				// the next one rather than in a write of its own.
				s.eol = eolCRLF
				if s.blank && i > 0 {
					cut = i + 1
					s.cutCR, s.cutEOL = false, eolCRLF
				}
				continue
			}
			s.eol = eolCR
		}
		switch c {
		case '\r', '\n':
			s.blank = s.lineStart
			s.lineStart = true
			s.afterCR = c == '\r'
			if !s.afterCR {
				s.eol = eolLF
			}
			if s.blank {
				cut = i + 1
				s.cutCR, s.cutEOL = s.afterCR, s.eol
				s.open = false
			}
		default:
			if s.lineStart && c != ':' {
				s.open = true
			}
			// A run of ordinary bytes: skip to the next line ending at once.
			j := ends.Next(i)
			s.lineStart, s.blank = false, false
			if j < 0 {
				return cut
			}
			i = j - 1
		}
	}
	return cut
}
