package affinity

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluice-gw/sluice/internal/steps"
)

// The walk reports where it stopped with a negative index in place of the next one.
const (
	stopMalformed = -1 // not well-formed JSON where the walk needed it
	stopFull      = -2 // the canonical stream reached MaxScanBytes
	stopDepth     = -3 // nesting deeper than MaxDepth
	stopCostly    = -4 // the objects written scanned more than the walk's budget
)

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(d []byte, i int) int {
	for i < len(d) && isWS(d[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the string token starting at d[i] == '"' and
// whether it holds escapes, or stopMalformed when it is not terminated. It finds quotes with
// bytes.IndexByte (vectorised) and decides whether one is escaped by the parity of the
// backslashes before it, so that long text costs a memchr, not a byte loop.
func stringEnd(d []byte, i int) (int, bool) {
	i++
	esc := false
	for {
		j := bytes.IndexByte(d[i:], '"')
		if j < 0 {
			return stopMalformed, false
		}
		q := i + j
		if !esc && bytes.IndexByte(d[i:q], '\\') >= 0 {
			esc = true
		}
		if esc {
			// The run of backslashes before q starts at or after i: d[i-1] is the opening
			// quote or a quote already found to be escaped, never a backslash.
			n := 0
			for q-1-n >= i && d[q-1-n] == '\\' {
				n++
			}
			if n%2 == 1 {
				i = q + 1
				continue
			}
		}
		return q + 1, esc
	}
}

// skipValue returns the index just past the value starting at d[i] (not white space), or
// stopMalformed when it is not terminated. It is lenient (brackets are counted, not matched;
// scalars end at the next delimiter): the values it skips are either validated by the
// caller's own walk later or not read at all.
func skipValue(d []byte, i int) int {
	if i >= len(d) {
		return stopMalformed
	}
	switch d[i] {
	case '"':
		e, _ := stringEnd(d, i)
		return e
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				e, _ := stringEnd(d, i)
				if e < 0 {
					return stopMalformed
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return stopMalformed
	case '}', ']', ',', ':':
		return stopMalformed
	}
	s := i
	for i < len(d) && !isWS(d[i]) && d[i] != ',' && d[i] != '}' && d[i] != ']' {
		i++
	}
	if i == s {
		return stopMalformed
	}
	return i
}

// numberEnd returns the end of the JSON number (RFC 8259 grammar) starting at d[i], or
// stopMalformed.
func numberEnd(d []byte, i int) int {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return stopMalformed
	case d[i] == '0':
		i++
	case '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		return stopMalformed
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return stopMalformed
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return stopMalformed
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	return i
}

// hex4 decodes the 4 hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

const hexDigits = "0123456789abcdef"

// appendRune appends r in its canonical string form: '"' and '\\' escaped, control
// characters as \b \t \n \f \r or \u00xx (lowercase hex), anything else as raw UTF-8. Every
// spelling of a string decodes to one text, and this writes one spelling per text.
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r == '"':
		return append(dst, '\\', '"')
	case r == '\\':
		return append(dst, '\\', '\\')
	case r >= 0x20:
		return utf8.AppendRune(dst, r)
	}
	switch r {
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
}

// appendCapped appends b to dst without letting dst grow past limit bytes; full reports that
// b did not fit.
func appendCapped(dst, b []byte, limit int) ([]byte, bool) {
	if room := limit - len(dst); len(b) > room {
		return append(dst, b[:max(room, 0)]...), true
	}
	return append(dst, b...), false
}

// canonString appends the canonical form of the string token starting at d[i] == '"'
// (quotes included) to dst, which it lets grow to at most limit bytes. It returns the index
// just past the token, or stopFull when the limit cut the string (dst then holds exactly
// limit bytes), or stopMalformed.
//
// The canonical form is the decoded text written as appendRune writes it. Text between
// escapes is copied as it is (raw JSON string text is already canonical), as are the escapes
// \" \\ \b \f \n \r \t; \/ and \uXXXX are decoded and rewritten. A \u escape of a lone UTF-16
// surrogate decodes to U+FFFD, as encoding/json decodes it.
func canonString(dst, d []byte, i, limit int) ([]byte, int) {
	out, e := canonStringEnd(dst, d, i, limit)
	if e < 0 {
		steps.Add(len(d) - i) // what a failed or cut scan may have looked at
	} else {
		steps.Add(e - i)
	}
	return out, e
}

func canonStringEnd(dst, d []byte, i, limit int) ([]byte, int) {
	run := i // the next bytes to copy unchanged, opening quote included
	i++
	q := -1 // the next '"' at or after i, which may be escaped
	var full bool
	for {
		if q < i {
			j := bytes.IndexByte(d[i:], '"')
			if j < 0 {
				return dst, stopMalformed
			}
			q = i + j
		}
		k := bytes.IndexByte(d[i:q], '\\')
		if k < 0 {
			if dst, full = appendCapped(dst, d[run:q+1], limit); full {
				return dst, stopFull
			}
			return dst, q + 1
		}
		b := i + k
		if b+1 >= len(d) {
			return dst, stopMalformed
		}
		switch d[b+1] {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			i = b + 2
			continue
		case '/':
			if dst, full = appendCapped(dst, d[run:b], limit); full {
				return dst, stopFull
			}
			if len(dst) >= limit {
				return dst, stopFull
			}
			dst = append(dst, '/')
			i = b + 2
		case 'u':
			if b+6 > len(d) {
				return dst, stopMalformed
			}
			r, ok := hex4(d[b+2:])
			if !ok {
				return dst, stopMalformed
			}
			i = b + 6
			if utf16.IsSurrogate(r) {
				if r < 0xDC00 && i+6 <= len(d) && d[i] == '\\' && d[i+1] == 'u' {
					if r2, ok := hex4(d[i+2:]); ok && 0xDC00 <= r2 && r2 < 0xE000 {
						r = utf16.DecodeRune(r, r2)
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			if dst, full = appendCapped(dst, d[run:b], limit); full {
				return dst, stopFull
			}
			var enc [8]byte
			if dst, full = appendCapped(dst, appendRune(enc[:0], r), limit); full {
				return dst, stopFull
			}
		default:
			return dst, stopMalformed
		}
		run = i
	}
}
