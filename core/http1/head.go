package http1

import (
	"bytes"

	"github.com/sluice-gw/sluice/internal/steps"
)

// FindHeadEnd locates a complete message head at the start of b.
//
// Leading empty lines (CRLF) before a request line are skipped per RFC 9112 §2.2; skip is how many
// bytes were skipped (valid even when the head is incomplete: the caller may discard them). n is
// the length of the head that starts at b[skip], through and including the blank line that ends
// it, or -1 when that blank line has not arrived yet. So the head is b[skip : skip+n] and the
// body (if any) starts at b[skip+n].
//
// A blank line ended by a bare LF also ends the head, so that the parser sees it and rejects the
// bare LF with 400 at once (see the package doc). FindHeadEnd does not enforce limits: while
// n == -1, call CheckPartialHead(b[skip:], lim).
//
// A caller that looks for a head again each time more of it arrives should use a HeadScan,
// which does not scan the same bytes twice.
func FindHeadEnd(b []byte) (skip, n int) {
	var s HeadScan
	return s.Find(b)
}

// HeadScan is FindHeadEnd for a head that arrives in pieces: Find resumes where the previous
// call stopped, so that finding a head of n bytes costs O(n) however many pieces it came in
// (FindHeadEnd on the whole buffer each time costs O(n) per piece, and a client sending its
// head a few bytes at a time would make the gateway's work quadratic in the head's size).
// The zero value is ready; Reset it for the next message.
type HeadScan struct {
	skip    int  // leading CRLF bytes skipped
	started bool // past the leading empty lines
	line    int  // offset of the first line not yet known to be complete
	next    int  // offset where the search for its LF resumes
}

// Reset prepares s for the next message.
func (s *HeadScan) Reset() { *s = HeadScan{} }

// Scanned returns how many bytes of the input the previous Find covered (0 after Reset): the
// next b must be at least this long.
func (s *HeadScan) Scanned() int {
	if !s.started {
		return s.skip
	}
	return s.next
}

// Find returns what FindHeadEnd(b) returns. Each b must extend the b of the previous call
// since the last Reset (the same bytes, perhaps followed by more), as a connection's input
// buffer does until the head is consumed.
func (s *HeadScan) Find(b []byte) (skip, n int) {
	if !s.started {
		from := s.skip
		for len(b)-s.skip >= 2 && b[s.skip] == '\r' && b[s.skip+1] == '\n' {
			s.skip += 2
		}
		steps.Add(s.skip - from + 1)
		if len(b)-s.skip == 0 || len(b)-s.skip == 1 && b[s.skip] == '\r' {
			return s.skip, -1 // perhaps more leading empty lines
		}
		s.started, s.line, s.next = true, s.skip, s.skip
	}
	for {
		i := bytes.IndexByte(b[s.next:], '\n')
		if i < 0 {
			steps.Add(len(b) - s.next + 1)
			s.next = len(b)
			return s.skip, -1
		}
		steps.Add(i + 1)
		end := s.next + i // the line is b[s.line:end]; it is blank when empty or a lone CR
		if end == s.line || end == s.line+1 && b[s.line] == '\r' {
			return s.skip, end + 1 - s.skip
		}
		s.line, s.next = end+1, end+1
	}
}

// fieldErrors selects the errors returned by parseFields (request or response flavour).
type fieldErrors struct {
	bareLF, bareCR, obsFold, name, spaceColon, noColon, value, trailing, tooMany error
}

var reqFieldErrors = fieldErrors{
	bareLF: errBareLF, bareCR: errBareCR, obsFold: errObsFold, name: errFieldName,
	spaceColon: errSpaceBeforeColon, noColon: errNoColon, value: errFieldValue,
	trailing: errTrailingBytes, tooMany: errTooManyHeaders,
}

var respFieldErrors = fieldErrors{
	bareLF: errRespBareLF, bareCR: errRespBareCR, obsFold: errRespObsFold, name: errRespFieldName,
	spaceColon: errRespSpaceColon, noColon: errRespNoColon, value: errRespFieldValue,
	trailing: errRespTrailing, tooMany: errRespTooMany,
}

// nextLine returns the line starting at buf[pos] without its CRLF, and the offset after the LF.
// It returns ErrNeedMore when no LF follows and e.bareLF when the LF is not preceded by CR.
func nextLine(buf []byte, pos int, e *fieldErrors) (line []byte, next int, err error) {
	i := bytes.IndexByte(buf[pos:], '\n')
	if i < 0 {
		steps.Add(len(buf) - pos + 1)
		return nil, 0, ErrNeedMore
	}
	steps.Add(i + 1)
	if i == 0 || buf[pos+i-1] != '\r' {
		return nil, 0, e.bareLF
	}
	return buf[pos : pos+i-1], pos + i + 1, nil
}

// parseFields parses the field lines of buf starting at pos, through the blank line that must end
// buf (RFC 9112 §5), appending them to headers.
func parseFields(buf []byte, pos int, headers []HeaderField, maxCount int, e *fieldErrors) ([]HeaderField, error) {
	for {
		line, next, err := nextLine(buf, pos, e)
		if err != nil {
			return headers, err
		}
		if len(line) == 0 {
			if next != len(buf) {
				return headers, e.trailing
			}
			return headers, nil
		}
		steps.Add(len(line)) // the name, value and trim loops below
		if isOWS(line[0]) {
			return headers, e.obsFold
		}
		i := 0
		for i < len(line) && tokenChar[line[i]] {
			i++
		}
		if i == len(line) {
			return headers, e.noColon
		}
		if c := line[i]; c != ':' {
			switch {
			case c == '\r':
				return headers, e.bareCR
			case i > 0 && isOWS(c):
				return headers, e.spaceColon
			default:
				return headers, e.name
			}
		}
		if i == 0 {
			return headers, e.name
		}
		v := line[i+1:]
		if j := invalidValueByte(v); j >= 0 {
			if v[j] == '\r' {
				return headers, e.bareCR
			}
			return headers, e.value
		}
		if len(headers) >= maxCount {
			return headers, e.tooMany
		}
		headers = append(headers, HeaderField{Key: line[:i:i], Value: trimOWS(v)})
		pos = next
	}
}

// parseVersion parses "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3, case-sensitive).
func parseVersion(b []byte) (major, minor int, ok bool) {
	if len(b) != 8 || b[0] != 'H' || b[1] != 'T' || b[2] != 'T' || b[3] != 'P' || b[4] != '/' ||
		b[6] != '.' || b[5] < '0' || b[5] > '9' || b[7] < '0' || b[7] > '9' {
		return 0, 0, false
	}
	return int(b[5] - '0'), int(b[7] - '0'), true
}

// parseContentLength parses a Content-Length value, which may be a list of identical values
// (RFC 9110 §8.6, RFC 9112 §6.3), against cur (-1 when no earlier field). It returns the length,
// bad for a syntax error and differ for values that disagree.
func parseContentLength(v []byte, cur int64) (n int64, bad, differ bool) {
	steps.Add(len(v) + 1)
	n = cur
	elems := 0
	for rest := v; ; {
		var el []byte
		el, rest = nextListElem(rest)
		if len(el) > 0 {
			elems++
			var x int64
			if len(el) > 18 { // 10^18-1 fits in int64; longer values are not a plausible length
				return n, true, false
			}
			for _, c := range el {
				if c < '0' || c > '9' {
					return n, true, false
				}
				x = x*10 + int64(c-'0')
			}
			if n >= 0 && x != n {
				return n, false, true
			}
			n = x
		}
		if rest == nil {
			break
		}
	}
	if elems == 0 {
		return n, true, false
	}
	return n, false, false
}

// teState accumulates Transfer-Encoding fields (RFC 9112 §6.1), which may be split over lines.
type teState struct {
	present      bool // a Transfer-Encoding field was seen
	codings      int  // non-empty codings seen
	sawChunked   bool // chunked was seen
	chunkedLast  bool // the final coding so far is chunked
	chunkedTwice bool // chunked appeared more than once (RFC 9112 §7)
	unknown      bool // a coding other than chunked/gzip/x-gzip/deflate/compress/x-compress
	syntax       bool // a malformed element
}

func (t *teState) add(v []byte) {
	steps.Add(len(v) + 1)
	t.present = true
	for rest := v; ; {
		var el []byte
		el, rest = nextListElem(rest)
		if len(el) > 0 {
			name, params := el, []byte(nil)
			for i, c := range el {
				if c == ';' {
					name, params = trimOWS(el[:i]), el[i:]
					break
				}
			}
			t.addCoding(name, params)
		}
		if rest == nil {
			return
		}
	}
}

func (t *teState) addCoding(name, params []byte) {
	if len(name) == 0 {
		t.syntax = true
		return
	}
	for _, c := range name {
		if !tokenChar[c] {
			t.syntax = true
			return
		}
	}
	t.codings++
	if equalFold(name, "chunked") {
		if params != nil {
			t.syntax = true // chunked takes no parameters (RFC 9112 §7)
		}
		if t.sawChunked {
			t.chunkedTwice = true
		}
		t.sawChunked, t.chunkedLast = true, true
		return
	}
	switch {
	case equalFold(name, "gzip"), equalFold(name, "x-gzip"), equalFold(name, "deflate"),
		equalFold(name, "compress"), equalFold(name, "x-compress"):
	default:
		t.unknown = true
	}
	t.chunkedLast = false
}

// connState accumulates Connection fields (RFC 9110 §7.6.1): a comma list of case-insensitive
// tokens, possibly over several lines.
type connState struct {
	close, keepAlive, upgrade bool
}

// addConnection parses one Connection value, appending its tokens to tokens.
func (c *connState) add(v []byte, tokens [][]byte) [][]byte {
	steps.Add(len(v) + 1)
	for rest := v; ; {
		var el []byte
		el, rest = nextListElem(rest)
		if len(el) > 0 {
			switch {
			case equalFold(el, "close"):
				c.close = true
			case equalFold(el, "keep-alive"):
				c.keepAlive = true
			case equalFold(el, "upgrade"):
				c.upgrade = true
			}
			tokens = append(tokens, el)
		}
		if rest == nil {
			return tokens
		}
	}
}
