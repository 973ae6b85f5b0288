package harness

import (
	"bytes"

	"github.com/sluice-gw/sluice/sse"
)

// sseScanner classifies a text/event-stream body for the benchmark as bytes arrive. The event
// framing (WHATWG HTML "Server-sent events": CRLF/LF/CR line ends, comments, fields, dispatch on
// a blank line, split-safe) is the gateway's own sse.Scanner; this type only decides what each
// event means. An event is a content event when one of its data lines holds a non-empty JSON
// string "content" (an OpenAI chat.completion.chunk delta with text); "data: [DONE]" marks the
// clean end of an OpenAI stream, and an "event: error" or a data line starting with {"error"
// marks an error event. feed does not allocate once warm.
type sseScanner struct {
	sc  sse.Scanner
	now int64 // arrival time of the bytes being fed

	// Per-stream results.
	done    bool  // saw a dispatched [DONE] event
	sseErr  bool  // saw an error event
	events  int   // content events
	firstNs int64 // time of the first content event (0: none)
	lastNs  int64 // time of the previous content event
	onFirst func(ns int64)
	onGap   func(ns int64)

	// capture keeps the text of the content events in text, as JSON string content (escapes
	// kept), so that a conversation can send the reply back verbatim.
	capture bool
	text    []byte
}

// maxSSELineBytes bounds one event the scanner buffers; a larger event is dropped (its bytes
// are still consumed) and scanning goes on with the next one.
const maxSSELineBytes = 1 << 20

func (s *sseScanner) reset() {
	s.sc.Reset()
	s.sc.MaxEventBytes, s.sc.SkipOversized = maxSSELineBytes, true
	s.done, s.sseErr = false, false
	s.events, s.firstNs, s.lastNs = 0, 0, 0
	s.text = s.text[:0]
}

// feed scans p, which arrived at time now (ns on the run's clock).
func (s *sseScanner) feed(p []byte, now int64) {
	s.sc.MaxEventBytes, s.sc.SkipOversized = maxSSELineBytes, true
	s.now = now
	_ = s.sc.Feed(p, s) // never fails: an oversized event is skipped
}

var (
	sseErrPrefix  = []byte(`{"error"`)
	sseContentKey = []byte(`"content"`)
)

// OnEvent implements sse.Handler: it classifies one dispatched event by its data lines.
func (s *sseScanner) OnEvent(ev sse.Event) {
	evDone, evError, evContent := false, string(ev.Type) == "error", false
	for data := ev.Data; ; {
		line := data
		i := bytes.IndexByte(data, '\n')
		if i >= 0 {
			line = data[:i]
		}
		switch {
		case sse.IsDone(line):
			evDone = true
		case bytes.HasPrefix(line, sseErrPrefix):
			evError = true
		case hasContent(line):
			evContent = true
			if s.capture && !s.done {
				s.text = append(s.text, contentValue(line)...)
			}
		}
		if i < 0 {
			break
		}
		data = data[i+1:]
	}
	if evDone {
		s.done = true
	}
	if evError {
		s.sseErr = true
	}
	if evContent && !s.done {
		s.events++
		if s.firstNs == 0 {
			s.firstNs = s.now
			if s.onFirst != nil {
				s.onFirst(s.now)
			}
		} else if s.onGap != nil {
			s.onGap(s.now - s.lastNs)
		}
		s.lastNs = s.now
	}
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

// contentValue returns the first non-empty "content" string of a JSON data value as it is
// written (escapes kept, quotes removed); nil when there is none. Like hasContent, it is a
// byte scan.
func contentValue(v []byte) []byte {
	for {
		i := bytes.Index(v, sseContentKey)
		if i < 0 {
			return nil
		}
		v = v[i+len(sseContentKey):]
		j := 0
		for j < len(v) && (v[j] == ' ' || v[j] == '\t') {
			j++
		}
		if j >= len(v) || v[j] != ':' {
			continue
		}
		j++
		for j < len(v) && (v[j] == ' ' || v[j] == '\t') {
			j++
		}
		if j+1 >= len(v) || v[j] != '"' || v[j+1] == '"' {
			continue
		}
		start := j + 1
		for k := start; k < len(v); k++ {
			switch v[k] {
			case '\\':
				k++
			case '"':
				return v[start:k]
			}
		}
		return nil
	}
}
