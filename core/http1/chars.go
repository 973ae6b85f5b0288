package http1

import "encoding/binary"

// tokenChar marks tchar (RFC 9110 §5.6.2): field names, methods, transfer codings.
var tokenChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return
}()

// valueChar marks bytes allowed inside a field value (RFC 9110 §5.5): HTAB, SP, VCHAR, obs-text.
// NUL, CR, LF and the other controls are rejected.
var valueChar = func() (t [256]bool) {
	t['\t'] = true
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] = true
	}
	return
}()

// targetChar marks bytes allowed in a request-target: visible US-ASCII except '#'
// (RFC 9112 §3.2, RFC 3986 §3.5: a fragment is never sent).
var targetChar = func() (t [256]bool) {
	for c := 0x21; c < 0x7f; c++ {
		t[c] = true
	}
	t['#'] = false
	return
}()

// hostChar marks bytes allowed in a Host value: reg-name, IPv4, IP-literal and port
// (RFC 3986 §3.2.2), i.e. unreserved / pct-encoded / sub-delims / ":" / "[" / "]".
var hostChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~%!$&'()*+,;=:[]" {
		t[c] = true
	}
	return
}()

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// equalFold reports whether b equals the lower-case ASCII string s, ignoring ASCII case in b.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// equalFoldAny compares b and s ignoring ASCII case in both.
func equalFoldAny(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func equalFoldBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func trimOWS(b []byte) []byte {
	for len(b) > 0 && isOWS(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isOWS(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// nextListElem returns the next element of a comma-separated list (RFC 9110 §5.6.1), trimmed of
// OWS, and the rest after the comma. Empty elements are returned as empty slices.
func nextListElem(b []byte) (elem, rest []byte) {
	for i := 0; i < len(b); i++ {
		if b[i] == ',' {
			return trimOWS(b[:i]), b[i+1:]
		}
	}
	return trimOWS(b), nil
}

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// invalidValueByte returns the index of the first byte of v that is not allowed in a field value
// (see valueChar), or -1. It checks 8 bytes at a time for controls (< 0x20) and DEL, falling back
// to the table for the word that has one (HTAB is valid but takes the slow path).
func invalidValueByte(v []byte) int {
	i := 0
	for ; len(v)-i >= 8; i += 8 {
		w := binary.LittleEndian.Uint64(v[i:])
		// A byte < 0x20 (its high bit clear) or equal to 0x7f sets its high bit in one of these.
		less := (w - swarOnes*0x20) &^ w & swarHigh
		x := w ^ (swarOnes * 0x7f)
		del := (x - swarOnes) &^ x & swarHigh
		if less|del != 0 {
			break
		}
	}
	for ; i < len(v); i++ {
		if !valueChar[v[i]] {
			return i
		}
	}
	return -1
}

// equalFoldUnderscore is equalFold where '_' in b also matches '-' in s: some servers map
// "Content_Length" to Content-Length (CGI-style header names), a request-smuggling vector.
func equalFoldUnderscore(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := lower(b[i])
		if c == '_' {
			c = '-'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
