package sse

import (
	"bytes"

	"github.com/sluice-gw/sluice/internal/steps"
)

// MaxUsageObjectBytes bounds the "usage" object a UsageReader keeps: a usage object is a few
// hundred bytes (counts and their details); a larger one is not read.
const MaxUsageObjectBytes = 16 << 10

// UsageReader reads the top-level "usage" object of a JSON object that arrives in pieces (a
// response body, read by read), as ParseUsage reads it from the whole: it follows the
// object's structure as the bytes go by and keeps only the usage object, so a body of any
// length (an embeddings batch of megabytes, whose usage comes after its vectors) costs no
// memory beyond that object. The zero value is ready; Reset readies it for another body. It
// does not allocate once its buffer has grown to the usage object.
type UsageReader struct {
	depth   int  // nesting of objects and arrays at the current byte; 1: the top-level object's members
	inStr   bool // inside a string
	esc     bool // inside a string, just after a backslash
	started bool // the top-level value began
	notObj  bool // the top-level value is not an object: nothing to find
	state   uint8
	key     [len("usage") + 1]byte // the start of the current top-level key
	keyLen  int
	obj     []byte // the usage object, as far as it has come
	capture bool   // obj is being filled
	found   bool   // obj holds the whole usage object
	over    bool   // the usage object exceeded MaxUsageObjectBytes
}

// States of a UsageReader between the top-level object's members.
const (
	urKey   uint8 = iota // before a member's key (after '{' or ',')
	urInKey              // inside a member's key
	urColon              // after a key, before its ':'
	urValue              // after ':', before the value
	urRest               // inside or after a member's value, before ',' or '}'
)

// Reset readies r for another body, keeping its buffer.
func (r *UsageReader) Reset() {
	*r = UsageReader{obj: r.obj[:0]}
}

// Usage returns the usage of the body fed so far, with ParseUsage's result for the whole when
// the body is well-formed JSON: ok is false when the body is not a JSON object, has no
// top-level "usage" object (or its usage object did not come whole, or exceeded
// MaxUsageObjectBytes), or the usage object is malformed. The members before the usage
// object are followed by their strings and brackets, not checked: a body malformed there
// (`{"a":1 2,"usage":{…}}`, which ParseUsage refuses) may still give its usage.
func (r *UsageReader) Usage() (Usage, bool) {
	if !r.found {
		return Usage{}, false
	}
	return parseUsageObject(r.obj, 0)
}

// Feed reads the next piece of the body. p is not kept.
func (r *UsageReader) Feed(p []byte) {
	steps.Add(len(p) + 1)
	for i := 0; i < len(p) && !r.found && !r.notObj && !r.over; {
		if r.inStr {
			i = r.inString(p, i)
			continue
		}
		c := p[i]
		if !r.started {
			if isWS(c) {
				i++
				continue
			}
			r.started = true
			if c != '{' {
				r.notObj = true
				return
			}
			r.depth, r.state = 1, urKey
			i++
			continue
		}
		if r.depth == 1 {
			i = r.member(p, i)
			continue
		}
		// Inside a member's value: only strings and brackets matter, and the end of the
		// usage object being kept.
		j := i
		for j < len(p) && !structural[p[j]] {
			j++
		}
		if r.capture {
			r.keep(p[i:j])
		}
		if j == len(p) {
			return
		}
		c = p[j]
		switch c {
		case '"':
			r.inStr = true
		case '{', '[':
			r.depth++
		case '}', ']':
			r.depth--
		}
		if r.capture {
			r.keep(p[j : j+1])
			if r.depth == 1 {
				r.capture, r.found = false, true
			}
		}
		i = j + 1
	}
}

// structural marks the bytes that change a UsageReader's state outside strings, below the
// top level.
var structural = func() (t [256]bool) {
	for _, c := range []byte(`"{}[]`) {
		t[c] = true
	}
	return t
}()

// member reads the top level at p[i] (depth 1, outside strings) and returns where to go on.
func (r *UsageReader) member(p []byte, i int) int {
	c := p[i]
	if isWS(c) {
		return i + 1
	}
	switch r.state {
	case urKey:
		if c == '"' {
			r.inStr, r.state, r.keyLen = true, urInKey, 0
		}
		// '}' (an empty object, or a trailing comma) ends the object: nothing more is
		// read, as ParseUsage finds nothing past it.
		if c == '}' {
			r.depth--
			r.notObj = true
		}
		return i + 1
	case urColon:
		if c == ':' {
			r.state = urValue
		}
		return i + 1
	case urValue:
		r.state = urRest
		if r.isUsageKey() && c == '{' {
			r.capture = true
			r.obj = append(r.obj[:0], '{')
			r.depth++
			return i + 1
		}
		if r.isUsageKey() {
			// "usage" is null or not an object: ParseUsage stops at the first one too.
			r.notObj = true
			return i + 1
		}
		return r.valueByte(c, i)
	}
	// urRest: a scalar value's bytes, or the ',' or '}' after a value.
	switch c {
	case ',':
		r.state = urKey
		return i + 1
	case '}':
		r.depth--
		r.notObj = true // the top-level object ended without a usage object
		return i + 1
	}
	return r.valueByte(c, i)
}

// valueByte starts a member's value at p[i] == c (a string or a container) or passes a
// scalar's byte.
func (r *UsageReader) valueByte(c byte, i int) int {
	switch c {
	case '"':
		r.inStr = true
	case '{', '[':
		r.depth++
	}
	return i + 1
}

// isUsageKey reports whether the last top-level key was exactly "usage" (raw bytes, as
// ParseUsage compares them).
func (r *UsageReader) isUsageKey() bool {
	return r.keyLen == len("usage") && string(r.key[:r.keyLen]) == "usage"
}

// inString reads string bytes from p[i] up to the closing quote, which it passes too, and
// returns where to go on.
func (r *UsageReader) inString(p []byte, i int) int {
	start := i
	if r.esc {
		r.esc = false
		i++
	}
	for i < len(p) {
		q := bytes.IndexByte(p[i:], '"')
		seg := p[i:]
		if q >= 0 {
			seg = p[i : i+q]
		}
		if b := bytes.IndexByte(seg, '\\'); b >= 0 {
			// Pass the escape and the byte it escapes, which may be in the next piece.
			i += b + 1
			if i == len(p) {
				r.esc = true
				break
			}
			i++
			continue
		}
		if q < 0 {
			i = len(p)
			break
		}
		i += q + 1
		r.inStr = false
		break
	}
	if r.depth == 1 && r.state == urInKey {
		r.keyBytes(p[start:i])
		if !r.inStr {
			r.state = urColon
		}
	}
	if r.capture {
		r.keep(p[start:i])
	}
	return i
}

// keyBytes adds b, bytes of a top-level key (with its closing quote when it ends in b), to
// the start of the key kept; a key longer than "usage" matches nothing.
func (r *UsageReader) keyBytes(b []byte) {
	if !r.inStr && len(b) > 0 {
		b = b[:len(b)-1] // the closing quote
	}
	for _, c := range b {
		if r.keyLen < len(r.key) {
			r.key[r.keyLen] = c
		}
		r.keyLen++
	}
}

// keep adds b to the usage object, giving it up past MaxUsageObjectBytes.
func (r *UsageReader) keep(b []byte) {
	if len(r.obj)+len(b) > MaxUsageObjectBytes {
		r.over, r.capture, r.obj = true, false, r.obj[:0]
		return
	}
	r.obj = append(r.obj, b...)
}
