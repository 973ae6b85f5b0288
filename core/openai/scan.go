package openai

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-gw/sluice/internal/steps"
)

// MaxDepth is the deepest nesting of objects and arrays a body may have (the top-level object
// is level 1). Deeper bodies are refused as malformed: no request needs it, and Python servers
// fail on recursion well before encoding/json's limit of 10000.
const MaxDepth = 512

// scanner validates and walks one body. A syntax error stops the walk at once (synOff >= 0);
// a semantic error (a value of the wrong type or out of range) is recorded in sem, the first
// one winning, and the walk goes on so that a malformed body is always reported as malformed
// whatever else is wrong with it.
type scanner struct {
	data   []byte
	synOff int    // offset of the syntax error, -1 while none
	synMsg string // what was expected there
	sem    *ValidationError
}

// Syntax error descriptions (the text after "invalid JSON at byte N: ").
const (
	synEOF      = "unexpected end of input"
	synEmpty    = "the body is empty"
	synValue    = "expected a value"
	synKey      = "expected a string (an object key)"
	synColon    = "expected ':' after an object key"
	synObjNext  = "expected ',' or '}' after an object member"
	synArrNext  = "expected ',' or ']' after an array element"
	synCtl      = "control character in a string (it must be escaped)"
	synEscape   = "invalid escape in a string"
	synUTF8     = "invalid UTF-8 in a string"
	synNumber   = "invalid number"
	synLiteral  = "invalid literal (expected true, false or null)"
	synTrailing = "unexpected data after the top-level value"
	synDepth    = "nesting deeper than 512 levels"
	synBOM      = "the body starts with a UTF-8 byte order mark (EF BB BF), which JSON sent over a network must not have (RFC 8259, section 8.1)"
	synNotUTF8  = "the body is not UTF-8 (it starts with a UTF-16 or UTF-32 byte order mark); JSON sent over a network must be UTF-8 (RFC 8259, section 8.1)"
)

// byteOrderMark returns the syntax error of a body that starts with a byte order mark, or "".
// Such a body is refused like any malformed one (Python's json module would strip the mark,
// Go's encoding/json refuses it), but with a message that names the mark: it is invisible in
// most editors and logs.
func byteOrderMark(d []byte) string {
	switch {
	case len(d) >= 3 && d[0] == 0xef && d[1] == 0xbb && d[2] == 0xbf:
		return synBOM
	case len(d) >= 2 && (d[0] == 0xfe && d[1] == 0xff || d[0] == 0xff && d[1] == 0xfe),
		len(d) >= 4 && d[0] == 0 && d[1] == 0 && d[2] == 0xfe && d[3] == 0xff:
		return synNotUTF8
	}
	return ""
}

// syntax records a syntax error at off and returns -1, the error index of every walker.
func (s *scanner) syntax(off int, msg string) int {
	if s.synOff < 0 {
		s.synOff, s.synMsg = off, msg
	}
	return -1
}

// fail records a semantic error unless one is recorded already. Callers build the strings
// only on their error branch, so the happy path does not allocate.
func (s *scanner) fail(code, param, msg string) {
	if s.sem == nil {
		s.sem = &ValidationError{Status: 400, Param: param, Code: code, Message: msg, Offset: -1}
	}
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(d []byte, i int) int {
	start := i
	for i < len(d) && isWS(d[i]) {
		i++
	}
	steps.Add(i - start + 1)
	return i
}

// strClass marks the bytes a string scan must look at: '"', '\\', control characters (which
// must be escaped) and non-ASCII bytes (whose UTF-8 must be valid).
var strClass = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plain8 reports whether none of the 8 bytes of w (read from a string's body) is special in
// the sense of strClass. It is the "has a byte below n" word trick, for '"' and '\\' on w
// xor-ed with them (a zero byte) and for 0x20 on w, without its "& ^x" term: that term only
// clears the top bit of bytes that are 0x80 or more, which the final "| w" marks special
// anyway. A borrow can only mark bytes above one that is special itself, so the answer is
// exact.
func plain8(w uint64) bool {
	q := w ^ (lsb * '"')
	b := w ^ (lsb * '\\')
	return ((q-lsb)|(b-lsb)|(w-lsb*0x20)|w)&msb == 0
}

// scanString validates the string starting at d[i] == '"' and returns the index just past
// its closing quote (-1 on a syntax error) and whether it contains escapes. Control
// characters must be escaped, escapes must be JSON's, and the text must be valid UTF-8
// (RFC 8259 §8.1): a server that replaced invalid bytes would read another string than the
// one the gateway saw.
func (s *scanner) scanString(i int) (end int, escaped bool) {
	end, escaped = s.scanStringAt(i)
	if end < 0 {
		steps.Add(len(s.data) - i + 1) // what a failed scan may have looked at
	} else {
		steps.Add(end - i)
	}
	return end, escaped
}

func (s *scanner) scanStringAt(i int) (end int, escaped bool) {
	d := s.data
	i++
	for {
		for i+8 <= len(d) && plain8(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) && !strClass[d[i]] {
			i++
		}
		if i >= len(d) {
			return s.syntax(len(d), synEOF), false
		}
		switch c := d[i]; {
		case c == '"':
			return i + 1, escaped
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				return s.syntax(len(d), synEOF), false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) {
					return s.syntax(len(d), synEOF), false
				}
				if _, ok := hex4(d[i+2 : i+6]); !ok {
					return s.syntax(i, synEscape), false
				}
				i += 6
			default:
				return s.syntax(i, synEscape), false
			}
		case c < 0x20:
			return s.syntax(i, synCtl), false
		default:
			r, n := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && n <= 1 {
				return s.syntax(i, synUTF8), false
			}
			i += n
		}
	}
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

// unescape appends to dst the text of the already validated string token tok (quotes
// included), decoding escapes as encoding/json does: a \u escape that is not part of a valid
// surrogate pair becomes U+FFFD, and lone reports whether that happened.
func unescape(dst, tok []byte) (out []byte, lone bool) {
	steps.Add(len(tok))
	b := tok[1 : len(tok)-1]
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\\' {
			j := i + 1
			for j < len(b) && b[j] != '\\' {
				j++
			}
			dst = append(dst, b[i:j]...)
			i = j
			continue
		}
		switch b[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(b[i+2:])
			i += 6
			if utf8.ValidRune(r) {
				dst = utf8.AppendRune(dst, r)
				continue
			}
			// A surrogate: valid only as a high one followed by a \u low one.
			if r < 0xDC00 && i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
				if r2, _ := hex4(b[i+2:]); 0xDC00 <= r2 && r2 < 0xE000 {
					dst = utf8.AppendRune(dst, 0x10000+(r-0xD800)<<10+(r2-0xDC00))
					i += 6
					continue
				}
			}
			dst = utf8.AppendRune(dst, utf8.RuneError)
			lone = true
			continue
		default: // '"', '\\', '/'
			dst = append(dst, b[i+1])
		}
		i += 2
	}
	return dst, lone
}

// scanNumber validates the JSON number at d[i] ('-' or a digit) and returns its end (-1 on a
// syntax error) and whether it is written as an integer (no fraction, no exponent).
func (s *scanner) scanNumber(i int) (end int, integer bool) {
	end, integer = s.scanNumberAt(i)
	steps.Add(max(end, i+1) - i)
	return end, integer
}

func (s *scanner) scanNumberAt(i int) (end int, integer bool) {
	d := s.data
	start := i
	if d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return s.syntax(len(d), synEOF), false
	case d[i] == '0':
		i++
	case '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		return s.syntax(start, synNumber), false
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return s.syntax(start, synNumber), false
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return s.syntax(start, synNumber), false
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	return i, integer
}

// scanLiteral validates true, false or null at d[i].
func (s *scanner) scanLiteral(i int) int {
	d := s.data
	var lit string
	switch d[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	default:
		lit = "null"
	}
	if len(d)-i < len(lit) {
		if string(d[i:]) == lit[:len(d)-i] {
			return s.syntax(len(d), synEOF)
		}
		return s.syntax(i, synLiteral)
	}
	if string(d[i:i+len(lit)]) != lit {
		return s.syntax(i, synLiteral)
	}
	return i + len(lit)
}

// skipValue validates the value starting at d[i] (white space before it is skipped) and
// returns the index just past it, or -1 on a syntax error. depth is the nesting level of the
// value's container.
func (s *scanner) skipValue(i, depth int) int {
	d := s.data
	i = skipWS(d, i)
	if i >= len(d) {
		return s.syntax(len(d), synEOF)
	}
	switch c := d[i]; {
	case c == '"':
		i, _ = s.scanString(i)
		return i
	case c == '-' || '0' <= c && c <= '9':
		i, _ = s.scanNumber(i)
		return i
	case c == 't' || c == 'f' || c == 'n':
		return s.scanLiteral(i)
	}
	return s.skipContainer(i, depth)
}

// skipContainer is skipValue for any value, written for objects and arrays: they are walked
// iteratively with a bit stack (1 = object), so a deep body cannot exhaust the goroutine
// stack.
func (s *scanner) skipContainer(i, depth int) int {
	d := s.data
	var stack [MaxDepth / 64]uint64
	base := depth
	for {
		steps.Add(1)
		// A value is expected at i.
		i = skipWS(d, i)
		if i >= len(d) {
			return s.syntax(len(d), synEOF)
		}
		switch c := d[i]; {
		case c == '"':
			i, _ = s.scanString(i)
		case c == '{' || c == '[':
			if depth >= MaxDepth {
				return s.syntax(i, synDepth)
			}
			k := depth - base
			if c == '{' {
				stack[k/64] |= 1 << (k % 64)
			} else {
				stack[k/64] &^= 1 << (k % 64)
			}
			depth++
			i = skipWS(d, i+1)
			if i >= len(d) {
				return s.syntax(len(d), synEOF)
			}
			if d[i] == '}' && c == '{' || d[i] == ']' && c == '[' {
				i++
				depth--
				break
			}
			if c == '{' {
				if i = s.objectKey(i); i < 0 {
					return -1
				}
			}
			continue
		case c == '-' || '0' <= c && c <= '9':
			i, _ = s.scanNumber(i)
		case c == 't' || c == 'f' || c == 'n':
			i = s.scanLiteral(i)
		default:
			return s.syntax(i, synValue)
		}
		if i < 0 {
			return -1
		}
		// After a value: close containers or move to the next element.
		for {
			if depth == base {
				return i
			}
			i = skipWS(d, i)
			if i >= len(d) {
				return s.syntax(len(d), synEOF)
			}
			k := depth - 1 - base
			object := stack[k/64]&(1<<(k%64)) != 0
			if d[i] == ',' {
				i++
				if object {
					if i = s.objectKey(skipWS(d, i)); i < 0 {
						return -1
					}
				}
				break
			}
			if object && d[i] == '}' || !object && d[i] == ']' {
				i++
				depth--
				continue
			}
			if object {
				return s.syntax(i, synObjNext)
			}
			return s.syntax(i, synArrNext)
		}
	}
}

// objectKey validates the key at d[i] and the ':' after it, and returns the index after the
// ':' (-1 on a syntax error).
func (s *scanner) objectKey(i int) int {
	d := s.data
	if i >= len(d) {
		return s.syntax(len(d), synEOF)
	}
	if d[i] != '"' {
		return s.syntax(i, synKey)
	}
	i, _ = s.scanString(i)
	if i < 0 {
		return -1
	}
	return s.colon(i)
}

// colon skips white space and the ':' after a key.
func (s *scanner) colon(i int) int {
	d := s.data
	i = skipWS(d, i)
	if i >= len(d) {
		return s.syntax(len(d), synEOF)
	}
	if d[i] != ':' {
		return s.syntax(i, synColon)
	}
	return i + 1
}

// member reads the next member of an object whose body continues at i (just after '{', or
// after the previous member's value; first says which). It returns the key token (quotes
// included) and whether it has escapes, the index of the value's first byte, and done=true at
// the closing '}' (then vs is the index after it). vs is -1 on a syntax error.
func (s *scanner) member(i int, first bool) (key []byte, escaped bool, vs int, done bool) {
	d := s.data
	i = skipWS(d, i)
	if i >= len(d) {
		return nil, false, s.syntax(len(d), synEOF), false
	}
	if d[i] == '}' {
		return nil, false, i + 1, true
	}
	if !first {
		if d[i] != ',' {
			return nil, false, s.syntax(i, synObjNext), false
		}
		i = skipWS(d, i+1)
		if i >= len(d) {
			return nil, false, s.syntax(len(d), synEOF), false
		}
	}
	if d[i] != '"' {
		return nil, false, s.syntax(i, synKey), false
	}
	ks := i
	i, escaped = s.scanString(i)
	if i < 0 {
		return nil, false, -1, false
	}
	key = d[ks:i]
	if i = s.colon(i); i < 0 {
		return nil, false, -1, false
	}
	i = skipWS(d, i)
	if i >= len(d) {
		return nil, false, s.syntax(len(d), synEOF), false
	}
	return key, escaped, i, false
}

// element reads the position of the next element of an array whose body continues at i (just
// after '[', or after the previous element; first says which): the index of the element's
// first byte, or done=true at the closing ']' (then the index after it); -1 on a syntax error.
func (s *scanner) element(i int, first bool) (vs int, done bool) {
	d := s.data
	i = skipWS(d, i)
	if i >= len(d) {
		return s.syntax(len(d), synEOF), false
	}
	if d[i] == ']' {
		return i + 1, true
	}
	if !first {
		if d[i] != ',' {
			return s.syntax(i, synArrNext), false
		}
		i = skipWS(d, i+1)
		if i >= len(d) {
			return s.syntax(len(d), synEOF), false
		}
	}
	return i, false
}

// nameBuf holds a decoded key or short string value. Every name Peek compares against has at
// most 21 characters, and a character is at most 6 bytes written as a \u escape, so a token
// whose body is longer than 126 bytes names none of them.
type nameBuf [128]byte

// keyName returns the text of a key token, decoding escapes into buf when it has any (a
// token longer than buf cannot be a name Peek compares against, so it is returned undecoded,
// quotes included, and matches nothing).
func keyName(tok []byte, escaped bool, buf *nameBuf) []byte {
	if !escaped {
		return tok[1 : len(tok)-1]
	}
	if len(tok) > len(buf)+2 {
		return tok
	}
	out, _ := unescape(buf[:0], tok) // escapes never expand, so out stays in buf
	return out
}

// valueKind is the JSON type of a value.
type valueKind uint8

const (
	kindInvalid valueKind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// kindAt classifies the value starting at d[i] by its first byte (the value is validated by
// whatever walks it).
func kindAt(d []byte, i int) valueKind {
	switch c := d[i]; {
	case c == '"':
		return kindString
	case c == '{':
		return kindObject
	case c == '[':
		return kindArray
	case c == 't' || c == 'f':
		return kindBool
	case c == 'n':
		return kindNull
	case c == '-' || '0' <= c && c <= '9':
		return kindNumber
	}
	return kindInvalid
}

// parseInt parses a validated JSON integer token; ok is false when it overflows int64.
func parseInt(b []byte) (n int64, ok bool) {
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var u uint64
	for _, c := range b {
		if u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return int64(-u), true // -(1<<63) wraps to itself
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}

// intRead is how a JSON number reads as an integer.
type intRead uint8

const (
	intOK       intRead = iota
	intFraction         // it has a fractional part: not an integer
	intAbove            // above the int64 range
	intBelow            // below the int64 range
)

// intValue returns the integer the validated JSON number token b stands for, as the Python
// servers that serve OpenAI's API read an int parameter (pydantic's lax mode, vLLM's request
// models; llama.cpp reads alike): an integer literal (integer true) is its exact value, and
// any other literal (3.0, 1e3) is read as a float64, which is an integer when it has no
// fractional part. So 3.0 and 30e-1 are 3, 1.0000000000000001 is 1 (its float64), and 3.5
// and 1e-3 are not integers.
func intValue(b []byte, integer bool) (int64, intRead) {
	if integer {
		n, ok := parseInt(b)
		switch {
		case ok:
			return n, intOK
		case b[0] == '-':
			return 0, intBelow
		}
		return 0, intAbove
	}
	switch f := parseFloat(b); {
	case f >= 1<<63: // +Inf too
		return 0, intAbove
	case f < -(1 << 63): // -Inf too
		return 0, intBelow
	case f != math.Trunc(f):
		return 0, intFraction
	default:
		return int64(f), intOK
	}
}

// parseFloat parses a validated JSON number token. Numbers up to 32 bytes are converted
// without allocating (the string does not escape); a longer one allocates, as it should be
// rare.
func parseFloat(b []byte) float64 {
	f, _ := strconv.ParseFloat(string(b), 64) // out of range gives ±Inf, which fails the checks
	return f
}
