package harness

import "bytes"

// sseScanner is an incremental, split-safe scanner of a text/event-stream
// body (WHATWG HTML "Server-sent events", §9.2.6 "Interpreting an event
// stream"): lines end in CRLF, LF or CR; a blank line dispatches the event;
// lines starting with ':' are comments; "field: value" strips one leading
// space from the value. Partial lines are kept in a reusable buffer, so feed
// does not allocate once the buffer has grown to the longest line.
//
// For the benchmark an event is a content event when one of its data lines
// holds a non-empty JSON string "content" (an OpenAI chat.completion.chunk
// delta with text); "data: [DONE]" marks the clean end of an OpenAI stream,
// and an "event: error" or a data line starting with {"error" marks an error
// event (DESIGN §5).
type sseScanner struct {
	line   []byte // partial line carried across feeds
	skipLF bool   // previous feed ended in CR: a leading LF belongs to it

	// Per-event state, reset on dispatch.
	hasData, evContent, evDone, evError bool

	// Per-stream results.
	done    bool  // saw a dispatched [DONE] event
	sseErr  bool  // saw an error event
	events  int   // content events
	firstNs int64 // time of the first content event (0: none)
	lastNs  int64 // time of the previous content event
	onFirst func(ns int64)
	onGap   func(ns int64)
}

// maxSSELineBytes bounds a single SSE line the scanner will buffer; longer
// lines are truncated for classification (the bytes are still consumed).
const maxSSELineBytes = 1 << 20

func (s *sseScanner) reset() {
	s.line = s.line[:0]
	s.skipLF = false
	s.hasData, s.evContent, s.evDone, s.evError = false, false, false, false
	s.done, s.sseErr = false, false
	s.events, s.firstNs, s.lastNs = 0, 0, 0
}

// feed scans p, which arrived at time now (ns on the run's clock).
func (s *sseScanner) feed(p []byte, now int64) {
	for len(p) > 0 {
		if s.skipLF {
			s.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexByte(p, '\n')
		limit := p
		if i >= 0 {
			limit = p[:i]
		}
		if j := bytes.IndexByte(limit, '\r'); j >= 0 {
			i = j
		}
		if i < 0 {
			if len(s.line)+len(p) <= maxSSELineBytes {
				s.line = append(s.line, p...)
			}
			return
		}
		line := p[:i]
		if len(s.line) > 0 {
			if len(s.line)+len(line) <= maxSSELineBytes {
				s.line = append(s.line, line...)
			}
			line = s.line
		}
		s.onLine(line, now)
		s.line = s.line[:0]
		if p[i] == '\r' {
			s.skipLF = true
		}
		p = p[i+1:]
	}
}

var (
	sseDone       = []byte("[DONE]")
	sseErrPrefix  = []byte(`{"error"`)
	sseContentKey = []byte(`"content"`)
)

func (s *sseScanner) onLine(line []byte, now int64) {
	if len(line) == 0 {
		s.dispatch(now)
		return
	}
	if line[0] == ':' {
		return
	}
	field, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		field, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		s.hasData = true
		switch {
		case bytes.Equal(value, sseDone):
			s.evDone = true
		case bytes.HasPrefix(value, sseErrPrefix):
			s.evError = true
		case hasContent(value):
			s.evContent = true
		}
	case "event":
		if string(value) == "error" {
			s.evError = true
		}
	}
}

func (s *sseScanner) dispatch(now int64) {
	if s.hasData {
		if s.evDone {
			s.done = true
		}
		if s.evError {
			s.sseErr = true
		}
		if s.evContent && !s.done {
			s.events++
			if s.firstNs == 0 {
				s.firstNs = now
				if s.onFirst != nil {
					s.onFirst(now)
				}
			} else if s.onGap != nil {
				s.onGap(now - s.lastNs)
			}
			s.lastNs = now
		}
	}
	s.hasData, s.evContent, s.evDone, s.evError = false, false, false, false
}

// hasContent reports whether a JSON data value holds a "content" key whose
// value is a non-empty string. It is a byte scan, not a JSON parse: enough
// to tell an OpenAI delta with text from a role-only or usage-only chunk.
func hasContent(v []byte) bool {
	for {
		i := bytes.Index(v, sseContentKey)
		if i < 0 {
			return false
		}
		v = v[i+len(sseContentKey):]
		j := 0
		for j < len(v) && (v[j] == ' ' || v[j] == '\t') {
			j++
		}
		if j < len(v) && v[j] == ':' {
			j++
			for j < len(v) && (v[j] == ' ' || v[j] == '\t') {
				j++
			}
			if j+1 < len(v) && v[j] == '"' && v[j+1] != '"' {
				return true
			}
		}
	}
}
