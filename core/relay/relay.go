// Package relay turns an upstream response body into the bytes the client gets, without doing
// any I/O itself: the caller reads the upstream and writes the client, the relay only frames
// (Content-Length pass-through, chunked pass-through, re-chunking, close-delimited), follows
// the Server-Sent Events boundaries of the stream, ends a stream that failed mid-way with an
// SSE error event when it can, and times the stream (time to first byte, gaps between reads).
//
// Both ingress engines drive the same Relay: the gnet engine pushes each framed read to its
// event loop, the fasthttp engine pulls payload for fasthttp.Server to frame. Keeping the
// logic free of sockets is what lets it be tested and fuzzed on byte strings alone.
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
	// Payload: decoded payload that the downstream frames itself (fasthttp.Server chunks a
	// body stream of unknown length on its own).
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
}

// Reset prepares r for a response framed as f; sse marks an event stream (its boundaries are
// tracked; only decoded framings can see them); started is when the request began, the origin
// of the first-byte time.
func (r *Relay) Reset(f Framing, sse bool, started time.Time) {
	*r = Relay{framing: f, sse: sse && !f.Raw(), started: started}
	r.ev.reset()
}

// Timed reports whether Pass and Frame time this response's reads (every framing but
// Length, whose body is not a stream): a caller may skip the clock read otherwise.
func (r *Relay) Timed() bool { return r.framing != Length }

// Framing returns the framing r was reset with.
func (r *Relay) Framing() Framing { return r.framing }

// Bytes returns the upstream body bytes relayed so far (wire bytes for raw framings, payload
// otherwise), the figure counted as response bytes.
func (r *Relay) Bytes() int64 { return r.bytes }

// AtEventBoundary reports whether the payload relayed so far ends where a new SSE event may
// start (nothing sent yet, or the last line was blank), for any of the line endings the SSE
// format allows (LF, CRLF, CR).
func (r *Relay) AtEventBoundary() bool { return r.ev.atBoundary() }

// Frame turns the n upstream bytes at buf[Headroom:Headroom+n] into client bytes, in place,
// and returns their bounds in buf with the timing observation of this read (taken at now).
// buf must have Headroom bytes before the data and Tailroom after it. n = 0 returns an empty
// range and no observation.
func (r *Relay) Frame(buf []byte, n int, now time.Time) (lo, hi int, o Obs) {
	lo, hi = Headroom, Headroom+n
	if n == 0 {
		return lo, lo, Obs{}
	}
	o = r.Pass(buf[lo:hi], now)
	if r.framing == Chunk {
		lo = frameChunk(buf, lo, n)
		buf[hi], buf[hi+1] = '\r', '\n'
		hi += 2
	}
	return lo, hi, o
}

// Pass accounts for upstream bytes p that go to the client unchanged (every framing but
// Chunk, which needs Frame) and returns the timing observation of this read (taken at now).
func (r *Relay) Pass(p []byte, now time.Time) (o Obs) {
	if len(p) == 0 {
		return Obs{}
	}
	r.bytes += int64(len(p))
	if r.framing != Length {
		if r.last.IsZero() {
			o = Obs{ObsFirst, now.Sub(r.started)}
		} else {
			o = Obs{ObsGap, now.Sub(r.last)}
		}
		r.last = now
	}
	if r.sse {
		r.ev.feed(p)
	}
	return o
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
// gateway's error event) framed for the client and, for Chunk framing, the last chunk, so the
// client reads an error instead of a silent cut (the stream still gets no "[DONE]"). Anything
// else gets nothing: the caller closes the connection and the client sees the truncation.
// After a Chunk tail the client's response is complete and its connection may be reused.
func (r *Relay) Fail(dst, event []byte) []byte {
	if r.ended || !r.sse || !r.ev.atBoundary() {
		return dst
	}
	r.ended = true
	switch r.framing {
	case Chunk:
		dst = http1.AppendChunkHeader(dst, len(event))
		dst = append(dst, event...)
		dst = append(dst, '\r', '\n')
		return append(dst, http1.LastChunk...)
	case Close, Payload:
		return append(dst, event...)
	}
	return dst
}

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

// eventState follows the line structure of an SSE stream (WHATWG HTML, "event stream
// interpretation": a line ends in CRLF, LF or CR; a blank line dispatches the event) just far
// enough to know whether the bytes so far end on an event boundary.
type eventState struct {
	lineStart bool // the next byte starts a line
	blank     bool // the line that ended last was blank (or nothing was sent)
	afterCR   bool // the last byte was CR: an LF now completes that CRLF
}

func (s *eventState) reset() { *s = eventState{lineStart: true, blank: true} }

func (s *eventState) atBoundary() bool { return s.lineStart && s.blank }

func (s *eventState) feed(p []byte) {
	steps.Add(len(p) + 1)
	ends := sse.NewLineEnds(p)
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.afterCR {
			s.afterCR = false
			if c == '\n' {
				continue // the LF of a CRLF that already ended the line
			}
		}
		switch c {
		case '\r', '\n':
			s.blank = s.lineStart
			s.lineStart = true
			s.afterCR = c == '\r'
		default:
			// A run of ordinary bytes: skip to the next line ending at once.
			j := ends.Next(i)
			s.lineStart, s.blank = false, false
			if j < 0 {
				return
			}
			i = j - 1
		}
	}
}
