package http1

// Response is a parsed response head from an upstream. Same ownership rules as Request: slices
// point into the Response's own copy of the head and stay valid until the next Reset or
// ParseResponseHead.
type Response struct {
	Major, Minor int    // 1.0 or 1.1 (a later HTTP/1 minor version is 1.1, RFC 9110 §2.5)
	Status       int    // status code, 100..599 (RFC 9110 §15)
	Reason       []byte // reason phrase, possibly empty (RFC 9112 §4)

	Headers []HeaderField // all field lines in order, as received

	ContentLength int64 // body length in bytes; -1 when absent or when Transfer-Encoding is present
	Chunked       bool  // Transfer-Encoding with chunked as the final coding

	// KeepAlive reports whether the connection may be reused after this response (RFC 9112 §9.3):
	// 1.1 unless Connection: close, 1.0 only with Connection: keep-alive, and never when the body
	// is delimited by closing the connection or Transfer-Encoding came in an HTTP/1.0 response
	// (RFC 9112 §6.1). It assumes the response carries a body when its status allows one.
	KeepAlive bool

	buf        []byte
	connTokens [][]byte
	connIndex  tokenIndex
	teOther    bool // Transfer-Encoding present with a final coding other than chunked
}

// Reset clears r for reuse, keeping the capacity of its buffers.
func (r *Response) Reset() {
	r.Major, r.Minor, r.Status = 0, 0, 0
	r.Reason = nil
	r.Headers = r.Headers[:0]
	r.ContentLength = -1
	r.Chunked, r.KeepAlive, r.teOther = false, false, false
	r.buf = r.buf[:0]
	r.connTokens = r.connTokens[:0]
	r.connIndex.reset()
}

// ParseResponseHead resets r, copies head into r and parses it. head is exactly one head as
// found by FindHeadEnd (status line, field lines, blank line). lim may be nil (defaults);
// lim.MaxBodyBytes does not apply to responses.
//
// It returns ErrNeedMore when head does not end in a blank line, or an *Error with Status 502
// for a malformed status line (version other than 1.0/1.1, status outside 100..599), bad field
// syntax, a bare CR or LF, a head over the limits, an invalid or differing Content-Length, both
// Content-Length and Transfer-Encoding, or chunked applied twice (RFC 9112 §4, §5, §6.3).
// A transfer coding this package does not know is not an error: the body is then relayed as is.
// After an error r's fields are unspecified.
func (r *Response) ParseResponseHead(head []byte, lim *Limits) error {
	r.Reset()
	if len(head) > lim.HeaderBytes() {
		return errRespTooLarge
	}
	r.buf = append(r.buf, head...)
	buf := r.buf
	e := &respFieldErrors

	line, pos, err := nextLine(buf, 0, e)
	if err != nil {
		return err
	}
	if err := r.parseStatusLine(line); err != nil {
		return err
	}
	r.Headers, err = parseFields(buf, pos, r.Headers, lim.HeaderCount(), e)
	if err != nil {
		return err
	}

	var (
		te   teState
		conn connState
	)
	for i := range r.Headers {
		h := &r.Headers[i]
		k := h.Key
		switch len(k) {
		case 10:
			if equalFold(k, "connection") {
				r.connTokens = conn.add(h.Value, r.connTokens)
			}
		case 14:
			if equalFold(k, "content-length") {
				n, bad, differ := parseContentLength(h.Value, r.ContentLength)
				if bad {
					return errRespBadCL
				}
				if differ {
					return errRespDiffCL
				}
				r.ContentLength = n
			}
		case 17:
			if equalFold(k, "transfer-encoding") {
				te.add(h.Value)
			}
		}
	}

	r.connIndex.build(r.connTokens)
	if r.Minor == 1 {
		r.KeepAlive = !conn.close
	} else {
		r.KeepAlive = conn.keepAlive && !conn.close
	}
	if te.present {
		switch {
		case r.ContentLength >= 0:
			return errRespCLAndTE
		case te.syntax || te.codings == 0:
			return errRespTESyntax
		case te.chunkedTwice:
			return errRespTETwice
		}
		r.Chunked = te.chunkedLast
		r.teOther = !te.chunkedLast
		if r.Minor == 0 {
			r.KeepAlive = false // RFC 9112 §6.1: faulty framing, close after this message
		}
	}
	if r.BodyMode(false) == BodyUntilClose {
		r.KeepAlive = false
	}
	return nil
}

// parseStatusLine parses HTTP-version SP 3DIGIT SP reason-phrase (RFC 9112 §4). A missing SP
// after the status code is accepted (empty reason).
func (r *Response) parseStatusLine(line []byte) error {
	if len(line) < 12 || line[8] != ' ' {
		if len(line) >= 9 && line[8] == '\r' {
			return errRespBareCR
		}
		return errRespLine
	}
	major, minor, ok := parseVersion(line[:8])
	if !ok {
		return errRespLine
	}
	if major != 1 {
		return errRespVersion
	}
	// A later minor version of HTTP/1 is processed as HTTP/1.1 (RFC 9110 §2.5).
	r.Major, r.Minor = 1, min(minor, 1)
	s := line[9:12]
	if s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' {
		return errRespStatus
	}
	r.Status = int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0')
	rest := line[12:]
	if len(rest) == 0 {
		r.Reason = rest
		return nil
	}
	if rest[0] != ' ' {
		if rest[0] == '\r' {
			return errRespBareCR
		}
		return errRespStatus
	}
	rest = rest[1:]
	for _, c := range rest {
		if !valueChar[c] {
			if c == '\r' {
				return errRespBareCR
			}
			return errRespReason
		}
	}
	r.Reason = rest
	return nil
}

// BodyMode tells how a response body is delimited (RFC 9112 §6.3).
type BodyMode uint8

const (
	// BodyNone: no body (response to HEAD, 1xx, 204, 304).
	BodyNone BodyMode = iota
	// BodyLength: exactly ContentLength bytes follow.
	BodyLength
	// BodyChunked: the chunked coding follows; decode with ChunkedDecoder.
	BodyChunked
	// BodyUntilClose: the body runs until the upstream closes the connection.
	BodyUntilClose
)

// String returns the mode's name ("none", "length", "chunked", "until-close").
func (m BodyMode) String() string {
	switch m {
	case BodyNone:
		return "none"
	case BodyLength:
		return "length"
	case BodyChunked:
		return "chunked"
	case BodyUntilClose:
		return "until-close"
	}
	return "invalid"
}

// BodyMode applies RFC 9112 §6.3 to r: a response to HEAD, any 1xx, 204 and 304 -> BodyNone;
// Transfer-Encoding with chunked final -> BodyChunked; any other Transfer-Encoding ->
// BodyUntilClose; Content-Length -> BodyLength; otherwise BodyUntilClose. (A 2xx answer to
// CONNECT switches to a tunnel; that is the caller's decision.)
func (r *Response) BodyMode(requestWasHEAD bool) BodyMode {
	switch {
	case requestWasHEAD, r.Status < 200, r.Status == 204, r.Status == 304:
		return BodyNone
	case r.Chunked:
		return BodyChunked
	case r.teOther:
		return BodyUntilClose
	case r.ContentLength >= 0:
		return BodyLength
	}
	return BodyUntilClose
}

// HeaderValue returns the value of the first field named name (ASCII case-insensitive).
func (r *Response) HeaderValue(name string) ([]byte, bool) {
	return headerValue(r.Headers, name)
}
