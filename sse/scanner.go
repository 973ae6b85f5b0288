// Package sse scans Server-Sent Events streams incrementally, as the gateway
// relays them, by the WHATWG event stream interpretation rules
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation),
// and extracts what the gateway accounts for: token usage and the OpenAI
// "[DONE]" terminator. It also writes the SSE error event the gateway sends
// when an upstream fails mid-stream.
package sse

import (
	"bytes"
	"errors"

	"github.com/sluice-gw/sluice/internal/steps"
)

// DefaultMaxEventBytes is the MaxEventBytes a zero Scanner uses: 1 MiB.
const DefaultMaxEventBytes = 1 << 20

// ErrEventTooLarge is returned by Scanner.Feed when one line, or the joined
// data of one event, exceeds Scanner.MaxEventBytes. The scanner stays in
// this error state until Reset.
var ErrEventTooLarge = errors.New("sse: event exceeds MaxEventBytes")

// Event is one dispatched SSE event. Its slices point into the input given
// to Feed or into the Scanner's own buffers: they are valid only during the
// Handler.OnEvent call and must be copied to be kept.
type Event struct {
	// Type is the value of the last "event" field of the event; empty means
	// the WHATWG default type "message".
	Type []byte
	// ID is the stream's last event ID buffer at dispatch time: set by the
	// last "id" field seen so far in the stream (it persists across events),
	// ignored when the value contains NUL; empty if none.
	ID []byte
	// Data is the values of the event's "data" fields joined by "\n".
	Data []byte
}

// Handler receives the events a Scanner dispatches. It is an interface, not
// a func, so that passing a long-lived handler does not allocate.
type Handler interface {
	// OnEvent is called once per dispatched event, in stream order.
	OnEvent(ev Event)
}

// Scanner is an incremental SSE parser. Feed it the stream in slices of any
// size: the events, and their content, are the same however the stream is
// split. An event that lies entirely in one slice passed to Feed is
// delivered without copying when it has at most one data line; otherwise its
// pieces are copied into internal buffers, bounded by MaxEventBytes.
//
// The zero value is ready to use. A Scanner is not safe for concurrent use.
// Bytes are not UTF-8 validated (they are relayed as received); a leading
// UTF-8 byte order mark is skipped as the WHATWG rules require. Per the
// rules, an event that is not terminated by a blank line when the stream
// ends is never dispatched.
type Scanner struct {
	// MaxEventBytes bounds the length of one line and of the joined data
	// of one event, in bytes; 0 means DefaultMaxEventBytes.
	MaxEventBytes int
	// SkipOversized drops an event that exceeds MaxEventBytes instead of
	// failing: the rest of that event is consumed without being kept, up to
	// its blank line, and scanning goes on with the next event (Dropped
	// counts them). A reader that wants a few small events of a stream (the
	// usage at its end) then still finds them after an enormous one.
	SkipOversized bool

	err      error
	skipping bool  // dropping the rest of an oversized event
	atLine   bool  // while skipping: the last byte consumed ended a line
	dropped  int64 // events dropped for their size
	started  bool  // past the optional byte order mark
	bomN     int   // bytes of the byte order mark matched so far
	skipLF   bool  // the previous slice ended with CR: ignore a leading LF
	line     []byte
	retryMs  int64
	retrySet bool

	// Event being built. xxxView is the current value; when xxxOwned is
	// false it points into the slice being fed and is copied into xxxBuf
	// before Feed returns.
	dataLines int
	dataLen   int
	dataView  []byte
	dataOwned bool
	dataBuf   []byte
	typeView  []byte
	typeOwned bool
	typeBuf   []byte
	idView    []byte
	idOwned   bool
	idBuf     []byte
}

var bom = [3]byte{0xEF, 0xBB, 0xBF}

func (s *Scanner) max() int {
	if s.MaxEventBytes > 0 {
		return s.MaxEventBytes
	}
	return DefaultMaxEventBytes
}

// Reset returns the scanner to the start of a new stream (keeping
// MaxEventBytes and its buffers' capacity).
func (s *Scanner) Reset() {
	*s = Scanner{
		MaxEventBytes: s.MaxEventBytes,
		SkipOversized: s.SkipOversized,
		line:          s.line[:0],
		dataBuf:       s.dataBuf[:0],
		typeBuf:       s.typeBuf[:0],
		idBuf:         s.idBuf[:0],
	}
}

// Retry returns the reconnection time the stream last set with a "retry"
// field (in milliseconds; values that do not fit saturate), and false when
// no valid retry field was seen.
func (s *Scanner) Retry() (ms int64, ok bool) { return s.retryMs, s.retrySet }

// Feed scans the next slice p of the stream and calls h.OnEvent for each
// event completed by a blank line. Feed does not keep p. It returns
// ErrEventTooLarge when a line or an event's data exceeds MaxEventBytes
// (events before that point are delivered; with SkipOversized the event is
// dropped instead and Feed goes on); after an error every call returns the
// same error until Reset. Feed does not allocate once its buffers have grown
// to the stream's largest split event.
func (s *Scanner) Feed(p []byte, h Handler) error {
	if s.err != nil {
		return s.err
	}
	if !s.started {
		for len(p) > 0 && s.bomN < len(bom) && p[0] == bom[s.bomN] {
			s.bomN++
			p = p[1:]
		}
		if s.bomN == len(bom) {
			s.started = true
		} else if len(p) > 0 {
			// Not a byte order mark: the bytes matched so far are content.
			s.started = true
			s.line = append(s.line, bom[:s.bomN]...)
		} else {
			return nil
		}
	}
	if s.skipLF && len(p) > 0 {
		s.skipLF = false
		if p[0] == '\n' {
			p = p[1:]
		}
	}
	for {
		if s.skipping {
			if p = s.skipEvent(p); s.skipping {
				return nil
			}
		}
		rest, oversized := s.scan(p, h)
		if !oversized {
			return nil
		}
		if !s.SkipOversized {
			s.err = ErrEventTooLarge
			return s.err
		}
		s.drop()
		p = rest
	}
}

// scan is Feed past the byte order mark and a pending LF. When a line or an
// event's data exceeds MaxEventBytes it stops and reports it, with the bytes
// after that line's terminator (nil when the line is not terminated in p),
// and sets atLine accordingly for skipEvent.
func (s *Scanner) scan(p []byte, h Handler) (rest []byte, oversized bool) {
	max := s.max()
	ends := NewLineEnds(p)

	// Finish a line started in an earlier slice.
	if len(s.line) > 0 {
		i := ends.Next(0)
		if i < 0 {
			return nil, !s.keepPartial(p, max)
		}
		if len(s.line)+i > max {
			return s.pastLine(p, i), true
		}
		steps.Add(i)
		s.line = append(s.line, p[:i]...)
		if !s.processLine(s.line, true, h, max) {
			return s.pastLine(p, i), true
		}
		s.line = s.line[:0]
		p = s.skipTerminator(p, i)
	}

	for len(p) > 0 {
		off := len(ends.p) - len(p)
		i := ends.Next(off)
		if i < 0 {
			return nil, !s.keepPartial(p, max)
		}
		i -= off
		if i > max || !s.processLine(p[:i], false, h, max) {
			return s.pastLine(p, i), true
		}
		p = s.skipTerminator(p, i)
	}
	s.own()
	return nil, false
}

// pastLine returns what follows the terminator of the oversized line that
// ends at p[i], for skipEvent to go on from a line start.
func (s *Scanner) pastLine(p []byte, i int) []byte {
	s.atLine = true
	return s.skipTerminator(p, i)
}

// drop discards the pending event and what was kept of its current line,
// and starts skipping the rest of it.
func (s *Scanner) drop() {
	s.dropped++
	s.skipping = true
	s.line = s.line[:0]
	s.dataLines, s.dataLen = 0, 0
	s.dataView, s.dataOwned = nil, false
	s.typeView, s.typeOwned = nil, false
	s.own() // an id line already read stays the last event ID, as for any event (WHATWG)
}

// skipEvent consumes p up to the blank line that ends the event being
// dropped and returns what follows it (skipping ends), or nil with skipping
// still on when p ends first. It keeps none of the bytes.
func (s *Scanner) skipEvent(p []byte) []byte {
	ends := NewLineEnds(p)
	for len(p) > 0 {
		off := len(ends.p) - len(p)
		i := ends.Next(off)
		if i < 0 {
			s.atLine = false
			return nil
		}
		i -= off
		blank := i == 0 && s.atLine
		p = s.skipTerminator(p, i)
		s.atLine = true
		if blank {
			s.skipping = false
			return p
		}
	}
	return p
}

// Dropped returns how many events SkipOversized dropped since the last
// Reset.
func (s *Scanner) Dropped() int64 { return s.dropped }

// keepPartial stores an unterminated line for the next Feed and copies the
// pending event's views out of the caller's slice.
// It reports false, keeping nothing, when the line would exceed max; the
// line is then not terminated in p (skipEvent goes on from mid-line).
func (s *Scanner) keepPartial(p []byte, max int) bool {
	if len(s.line)+len(p) > max {
		s.atLine = false
		return false
	}
	steps.Add(len(p) + 1)
	s.line = append(s.line, p...)
	s.own()
	return true
}

// LineEnds finds the line ends of an SSE stream (CR or LF: WHATWG HTML, "event stream
// interpretation") in one slice, from left to right, with the vectorised single-byte search
// (bytes.IndexByte) where bytes.IndexAny would test each byte against the set. It keeps the
// positions of the next LF and of the next CR before it, so that each byte is searched at
// most once for each: looking for the first CR or LF afresh from every line start would
// search the rest of the slice for an LF at every line of a stream whose lines end in CR
// alone, quadratic in the slice's length. The zero value is not ready: use NewLineEnds.
type LineEnds struct {
	p []byte
	// lf is the index of the first LF at or after the last search start (len(p): none); cr
	// the index of the first CR before lf (lf: none). -1: not searched yet.
	lf, cr int
}

// NewLineEnds returns a LineEnds over p.
func NewLineEnds(p []byte) LineEnds { return LineEnds{p: p, lf: -1, cr: -1} }

// Next returns the index in p of the first CR or LF at or after from, or -1 when there is
// none. Calls must not go back: from never decreases. Its work is counted in internal/steps.
func (e *LineEnds) Next(from int) int {
	if e.lf < from {
		i := bytes.IndexByte(e.p[from:], '\n')
		if i < 0 {
			e.lf = len(e.p)
			steps.Add(len(e.p) - from + 1)
		} else {
			e.lf = from + i
			steps.Add(i + 1)
		}
		e.cr = -1
	}
	if e.cr < from {
		j := bytes.IndexByte(e.p[from:e.lf], '\r')
		if j < 0 {
			e.cr = e.lf
			steps.Add(e.lf - from + 1)
		} else {
			e.cr = from + j
			steps.Add(j + 1)
		}
	}
	if e.cr == len(e.p) {
		return -1
	}
	return e.cr
}

// skipTerminator consumes the line terminator at p[i] (CRLF, LF or CR) and
// returns the rest of p. A CR at the very end of p may be the first half of
// a CRLF split across slices: the next Feed skips a leading LF.
func (s *Scanner) skipTerminator(p []byte, i int) []byte {
	if p[i] == '\r' {
		if i+1 < len(p) {
			if p[i+1] == '\n' {
				return p[i+2:]
			}
		} else {
			s.skipLF = true
		}
	}
	return p[i+1:]
}

// own copies the parts of the pending event that still point into the
// caller's slice into the scanner's buffers.
func (s *Scanner) own() {
	if s.dataLines > 0 && !s.dataOwned {
		steps.Add(len(s.dataView))
		s.dataBuf = append(s.dataBuf[:0], s.dataView...)
		s.dataView, s.dataOwned = s.dataBuf, true
	}
	if !s.typeOwned {
		steps.Add(len(s.typeView))
		s.typeBuf = append(s.typeBuf[:0], s.typeView...)
		s.typeView, s.typeOwned = s.typeBuf, true
	}
	if !s.idOwned {
		steps.Add(len(s.idView))
		s.idBuf = append(s.idBuf[:0], s.idView...)
		s.idView, s.idOwned = s.idBuf, true
	}
}

// processLine interprets one line (without terminator). ephemeral means the
// line lives in s.line, which is reused: values are copied at once. It
// reports false when the line makes the event's data exceed max.
func (s *Scanner) processLine(line []byte, ephemeral bool, h Handler, max int) bool {
	steps.Add(len(line) + 1)
	if len(line) == 0 {
		s.dispatch(h)
		return true
	}
	if line[0] == ':' {
		return true // comment
	}
	field, value := line, line[len(line):]
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		field, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		n := s.dataLen + len(value)
		if s.dataLines > 0 {
			n++ // the "\n" joining it to the previous line
		}
		if n > max {
			return false
		}
		switch {
		case s.dataLines == 0 && !ephemeral:
			s.dataView, s.dataOwned = value, false
		case s.dataLines == 0:
			s.dataBuf = append(s.dataBuf[:0], value...)
			s.dataView, s.dataOwned = s.dataBuf, true
		default:
			if !s.dataOwned {
				steps.Add(len(s.dataView))
				s.dataBuf = append(s.dataBuf[:0], s.dataView...)
			}
			s.dataBuf = append(s.dataBuf, '\n')
			s.dataBuf = append(s.dataBuf, value...)
			s.dataView, s.dataOwned = s.dataBuf, true
		}
		s.dataLines++
		s.dataLen = n
	case "event":
		if ephemeral {
			s.typeBuf = append(s.typeBuf[:0], value...)
			s.typeView, s.typeOwned = s.typeBuf, true
		} else {
			s.typeView, s.typeOwned = value, false
		}
	case "id":
		if bytes.IndexByte(value, 0) >= 0 {
			return true
		}
		if ephemeral {
			s.idBuf = append(s.idBuf[:0], value...)
			s.idView, s.idOwned = s.idBuf, true
		} else {
			s.idView, s.idOwned = value, false
		}
	case "retry":
		if ms, ok := parseDigits(value); ok {
			s.retryMs, s.retrySet = ms, true
		}
	}
	return true
}

// dispatch delivers the pending event if it has data (WHATWG: an event with
// an empty data buffer is not dispatched) and clears the data and type.
func (s *Scanner) dispatch(h Handler) {
	if s.dataLines > 0 {
		h.OnEvent(Event{Type: s.typeView, ID: s.idView, Data: s.dataView})
	}
	s.dataLines, s.dataLen = 0, 0
	s.dataView, s.dataOwned = nil, false
	s.typeView, s.typeOwned = nil, false
}

// parseDigits parses a non-empty run of ASCII digits, saturating at the
// largest int64.
func parseDigits(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<63-1-9)/10 {
			n = 1<<63 - 1
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
