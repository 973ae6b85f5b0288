package http1

import (
	"bytes"
	"errors"
)

// Default limits, used for zero fields of Limits.
const (
	// DefaultMaxHeaderBytes bounds the request line plus all header lines, in bytes.
	DefaultMaxHeaderBytes = 16384
	// DefaultMaxHeaderCount bounds the number of header field lines.
	DefaultMaxHeaderCount = 100
	// DefaultMaxBodyBytes bounds a request body (Content-Length or chunked payload total), in bytes.
	DefaultMaxBodyBytes int64 = 16 << 20
)

// Limits bound what a parser accepts. Zero fields take the Default* values; a nil *Limits means
// all defaults. Exceeding MaxHeaderBytes gives *Error 414 for a request whose request line
// alone does not fit and 431 for one whose field lines do not (see HeadTooLarge); more than
// MaxHeaderCount fields gives 431; an upstream response over either gets 502; a request Content-Length over MaxBodyBytes gives 413.
// MaxBodyBytes does not apply to responses.
type Limits struct {
	MaxHeaderBytes int   // request line + all header lines, bytes; default 16384
	MaxHeaderCount int   // header field lines; default 100
	MaxBodyBytes   int64 // request body, bytes; default 16 MiB
	// AllowEncodedSlash accepts %2F, %5C and a raw '\' in request paths (kept as sent); by
	// default they are refused with 400, as upstreams disagree on whether they separate segments.
	AllowEncodedSlash bool
}

// EncodedSlashAllowed reports whether %2F, %5C and '\' may appear in a request path.
func (l *Limits) EncodedSlashAllowed() bool { return l != nil && l.AllowEncodedSlash }

// HeaderBytes returns the effective header size limit in bytes.
func (l *Limits) HeaderBytes() int {
	if l == nil || l.MaxHeaderBytes <= 0 {
		return DefaultMaxHeaderBytes
	}
	return l.MaxHeaderBytes
}

// HeaderCount returns the effective limit on header field lines.
func (l *Limits) HeaderCount() int {
	if l == nil || l.MaxHeaderCount <= 0 {
		return DefaultMaxHeaderCount
	}
	return l.MaxHeaderCount
}

// BodyBytes returns the effective request body limit in bytes (set it as
// ChunkedDecoder.MaxBodyBytes when decoding a chunked request body).
func (l *Limits) BodyBytes() int64 {
	if l == nil || l.MaxBodyBytes <= 0 {
		return DefaultMaxBodyBytes
	}
	return l.MaxBodyBytes
}

// CheckPartialHead is for callers waiting on an incomplete head (FindHeadEnd returned n == -1):
// head is the bytes buffered so far, without the skipped leading CRLFs. Once they hold a whole
// request line (ended by CRLF within lim's header limit) that ParseRequestHead would refuse, it
// returns that line's *Error (400, 501 or 505, as RFC 9112 §3 and RFC 9110 §15.6.6 give
// them), so that a request refused by its first line is answered without waiting for a blank
// line that may never come: the HTTP/2 connection preface (RFC 9113 §3.4) is followed by
// binary frames, not by field lines. Else, once they exceed the header limit, the *Error of
// HeadTooLarge. Otherwise it returns ErrNeedMore. The request line is judged first, so the
// answer does not depend on how many bytes past it had arrived.
func CheckPartialHead(head []byte, lim *Limits) error {
	if len(head) > lim.HeaderBytes() {
		return HeadTooLarge(head, lim) // judges the request line first
	}
	if err := methodRefusal(head); err != nil {
		return err
	}
	if i := bytes.IndexByte(head, '\n'); i > 0 && head[i-1] == '\r' {
		var r Request
		if err := r.parseRequestLine(head[: i-1 : i-1]); err != nil {
			return err
		}
	}
	return ErrNeedMore
}

// HeadTooLarge returns the *Error for a request head (without leading CRLFs) known to exceed
// lim's header limit: 414 when the limit runs out inside the request line, that is when no LF
// ends a line within the first HeaderBytes bytes, so that the request-target alone is what
// does not fit (RFC 9112 §3, RFC 9110 §15.5.15); the request line's own refusal when a CRLF
// ends it within the limit and ParseRequestHead would refuse it; else 431, the field lines do
// not fit (RFC 6585 §5). A refused request line comes first so that the answer does not depend
// on how many bytes past it had arrived when the head was judged (CheckPartialHead judges the
// line as soon as it is whole).
func HeadTooLarge(head []byte, lim *Limits) error {
	var r Request
	return r.headTooLarge(head, lim)
}

// CheckLeadingEmptyLines refuses n bytes of empty lines (CRLF) received before a request
// line once they reach the header size limit, as a head that large (431): RFC 9112 §2.2 asks
// a server to ignore at least one, not any number, and a reader that drops them as they come
// needs this bound to end a connection that sends nothing else. (At the limit rather than
// past it: a reader whose buffer is the limit's size would be full of them.)
func CheckLeadingEmptyLines(n int, lim *Limits) error {
	if n >= lim.HeaderBytes() {
		return errHeadTooLarge
	}
	return nil
}

// OverHeaderBytes reports whether err refuses a request because its head, or its request line
// alone, is larger than the header size limit (the 431 or 414 of HeadTooLarge,
// CheckPartialHead and ParseRequestHead), so that a server can name its own setting in the
// answer.
func OverHeaderBytes(err error) bool {
	var fe *Error
	return errors.As(err, &fe) && (fe == errHeadTooLarge || fe == errURITooLong)
}

// headTooLarge is HeadTooLarge with r as the scratch request: the request line is copied into
// r.buf and parsed there, so that head does not leak into r (ParseRequestHead's callers keep
// their buffers off the heap).
func (r *Request) headTooLarge(head []byte, lim *Limits) error {
	within := head[:min(len(head), lim.HeaderBytes())]
	if err := methodRefusal(within); err != nil {
		return err
	}
	i := bytes.IndexByte(within, '\n')
	if i < 0 {
		return errURITooLong
	}
	if i > 0 && within[i-1] == '\r' {
		r.buf = append(r.buf[:0], within[:i-1]...)
		if err := r.parseRequestLine(r.buf[:len(r.buf):len(r.buf)]); err != nil {
			return err
		}
	}
	return errHeadTooLarge
}

// methodRefusal returns the refusal of a request line that starts with b, as soon as b shows
// it: a byte that no method token holds (RFC 9110 §9.1, tchar) before the space that ends the
// method, or a line that starts with a space. Otherwise, while b may still begin a valid
// request line, nil. It is judged before anything else about a head, whole or partial, so that
// bytes that are not HTTP (a TLS ClientHello sent to a plaintext port, binary junk) get 400 at
// once instead of waiting for a line end or the header limit, and the answer does not depend
// on how the bytes arrived.
func methodRefusal(b []byte) error {
	for i, c := range b {
		if tokenChar[c] {
			continue
		}
		switch c {
		case ' ':
			if i == 0 {
				return errReqLine
			}
			return nil
		case '\r', '\n':
			return nil // the line's end: the whole line is judged
		}
		return errMethod
	}
	return nil
}
