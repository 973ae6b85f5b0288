package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// ErrorKind classifies a failed request. The names are the keys of
// Result.ErrorsByKind.
type ErrorKind uint8

// Error kinds, in the order a request can fail.
const (
	errNone        ErrorKind = iota
	ErrConnect               // dial failed
	ErrWrite                 // writing the request failed
	ErrTimeout               // the per-request timeout passed
	ErrClosed                // the connection closed before any response byte
	ErrRead                  // a read failed while reading the response head
	ErrBadResponse           // malformed status line, header or chunk framing
	ErrIncomplete            // the body ended before its framing said it would
	ErrStatus4xx             // response status 400-499
	ErrStatus5xx             // response status 500-599
	ErrStatusOther           // any other non-2xx status
	ErrNotSSE                // a stream was asked for, the response is not text/event-stream
	ErrNoDone                // a stream ended without "data: [DONE]"
	ErrNoContent             // a stream carried no content event
	ErrSSEError              // a stream carried an error event
	errKindCount
)

var errKindNames = [errKindCount]string{
	"", "connect", "write", "timeout", "closed", "read", "bad_response", "incomplete",
	"status_4xx", "status_5xx", "status_other", "not_sse", "no_done", "no_content", "sse_error",
}

// String returns the kind's JSON name ("timeout", "status_5xx", ...).
func (k ErrorKind) String() string {
	if k < errKindCount {
		return errKindNames[k]
	}
	return "unknown"
}

// statusKind is the error kind of a response with a status other than 2xx.
func statusKind(status int) ErrorKind {
	switch {
	case status >= 400 && status < 500:
		return ErrStatus4xx
	case status >= 500 && status < 600:
		return ErrStatus5xx
	default:
		return ErrStatusOther
	}
}

// readBufBytes is the size of each connection's read buffer; a response
// head (status line plus headers) must fit in it.
const readBufBytes = 16 << 10

// httpConn is one keep-alive HTTP/1.1 client connection (RFC 9112): it writes
// a prebuilt request and reads the response with its framing (Content-Length,
// chunked, or close-delimited, RFC 9112 §6.3), feeding SSE bodies to an
// sseScanner as bytes arrive. A round trip does not allocate once warm.
type httpConn struct {
	addr string

	mu sync.Mutex // guards c against the canceller
	c  net.Conn

	br      *bufio.Reader // reads through rd
	rd      arrivalReader
	sse     sseScanner
	lastErr error // the read error that ended the last exchange, if one did
	now     int64 // run clock (ns) of the latest read that brought bytes
	clk     func() int64
}

func newHTTPConn(addr string, clk func() int64) *httpConn {
	h := &httpConn{addr: addr, clk: clk, br: bufio.NewReaderSize(nil, readBufBytes)}
	h.rd.h = h
	return h
}

// arrivalReader is the connection as the read buffer sees it: every read that brings bytes
// sets the arrival time h.now, whichever step of the parse asked for them. The bytes a read
// brings arrive together, so an SSE event is stamped with the read that brought its end
// however the target lays the chunked framing out over its writes (a chunk's closing CRLF may
// come with the next chunk, after a wait).
type arrivalReader struct {
	h *httpConn
	c net.Conn
}

func (r *arrivalReader) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	if n > 0 {
		r.h.now = r.h.clk()
	}
	return n, err
}

func (h *httpConn) connect(timeout time.Duration) error {
	return h.connectCtx(context.Background(), timeout)
}

// connectCtx is connect whose dial also ends when ctx does.
func (h *httpConn) connectCtx(ctx context.Context, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	h.mu.Lock()
	h.c = c
	h.mu.Unlock()
	h.rd.c = c
	h.br.Reset(&h.rd)
	return nil
}

func (h *httpConn) close() {
	h.mu.Lock()
	if h.c != nil {
		_ = h.c.Close()
		h.c = nil
	}
	h.mu.Unlock()
}

// abort makes any blocked read or write of the connection return at once.
func (h *httpConn) abort() {
	h.mu.Lock()
	if h.c != nil {
		_ = h.c.SetDeadline(time.Unix(1, 0))
	}
	h.mu.Unlock()
}

// exchange is the outcome of one round trip.
type exchange struct {
	kind      ErrorKind
	status    int   // the final response's status code (0 when none was read)
	keepAlive bool  // the connection may carry another request
	bodyBytes int64 // body bytes read (after de-chunking)
}

func classifyReadErr(err error, gotBytes bool) ErrorKind {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ErrTimeout
	case !gotBytes && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return ErrClosed
	case gotBytes:
		return ErrIncomplete
	}
	return ErrRead
}

// readErr notes err as the connection's last read error and classifies it.
func (h *httpConn) readErr(err error, gotBytes bool) ErrorKind {
	h.lastErr = err
	return classifyReadErr(err, gotBytes)
}

// roundTrip writes req and reads one response. When stream is set the
// response must be an SSE stream ending in [DONE]; its events go to h.sse,
// which the caller has reset and wired.
func (h *httpConn) roundTrip(req []byte, stream bool, deadline time.Time) exchange {
	c := h.c
	if err := c.SetDeadline(deadline); err != nil {
		return exchange{kind: ErrWrite}
	}
	if _, err := c.Write(req); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return exchange{kind: ErrTimeout}
		}
		return exchange{kind: ErrWrite}
	}
	return h.readResponse(stream)
}

// readResponse reads one response from the connection (deadlines are the caller's). When
// stream is set the response must be an SSE stream ending in [DONE]; its events go to h.sse,
// which the caller has reset.
func (h *httpConn) readResponse(stream bool) exchange {
	br := h.br
	var (
		status     int
		line       []byte
		err        error
		chunked    bool
		isSSE      bool
		closeAfter bool
		length     int64 = -1
	)
	// Status line; 1xx interim responses are skipped (RFC 9110 §15.2).
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				return exchange{kind: ErrBadResponse}
			}
			return exchange{kind: h.readErr(err, false)}
		}
		status = parseStatusLine(line)
		if status < 0 {
			return exchange{kind: ErrBadResponse}
		}
		chunked, isSSE, closeAfter, length = false, false, false, -1
		for {
			line, err = br.ReadSlice('\n')
			if err != nil {
				if err == bufio.ErrBufferFull {
					return exchange{kind: ErrBadResponse}
				}
				return exchange{kind: h.readErr(err, true)}
			}
			if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
				break
			}
			name, value, ok := splitHeader(line)
			if !ok {
				return exchange{kind: ErrBadResponse}
			}
			switch {
			case bytes.EqualFold(name, hdrContentLength):
				n, ok := parseDec(value)
				if !ok {
					return exchange{kind: ErrBadResponse}
				}
				length = n
			case bytes.EqualFold(name, hdrTransferEncoding):
				chunked = containsFold(value, tokChunked)
			case bytes.EqualFold(name, hdrConnection):
				closeAfter = containsFold(value, tokClose)
			case bytes.EqualFold(name, hdrContentType):
				isSSE = containsFold(value, tokEventStream)
			}
		}
		if status >= 200 || status == 101 {
			break
		}
	}
	ex := exchange{keepAlive: !closeAfter, status: status}
	scan := stream && isSSE && status >= 200 && status < 300
	switch {
	case status == 204 || status == 304:
	case chunked:
		for {
			line, err = br.ReadSlice('\n')
			if err != nil {
				return exchange{kind: h.readErr(err, true)}
			}
			size, ok := parseChunkSize(line)
			if !ok {
				return exchange{kind: ErrBadResponse}
			}
			if size == 0 {
				// Trailer section up to the empty line (RFC 9112 §7.1.2).
				for {
					line, err = br.ReadSlice('\n')
					if err != nil {
						return exchange{kind: h.readErr(err, true)}
					}
					if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
						break
					}
				}
				break
			}
			if k := h.readBody(size, scan); k != errNone {
				return exchange{kind: k, status: status}
			}
			ex.bodyBytes += size
			line, err = br.ReadSlice('\n')
			if err != nil {
				return exchange{kind: h.readErr(err, true)}
			}
			if len(line) > 2 || (len(line) == 2 && line[0] != '\r') {
				return exchange{kind: ErrBadResponse}
			}
		}
	case length >= 0:
		if k := h.readBody(length, scan); k != errNone {
			return exchange{kind: k, status: status}
		}
		ex.bodyBytes = length
	default:
		// Close-delimited body (RFC 9112 §6.3 rule 8).
		ex.keepAlive = false
		n, k := h.readToEOF(scan)
		if k != errNone {
			return exchange{kind: k, status: status}
		}
		ex.bodyBytes = n
	}
	if status < 200 || status >= 300 {
		ex.kind = statusKind(status)
		return ex
	}
	if stream {
		switch {
		case !isSSE:
			ex.kind = ErrNotSSE
		case h.sse.sseErr:
			ex.kind = ErrSSEError
		case !h.sse.done:
			ex.kind = ErrNoDone
		case h.sse.events == 0:
			ex.kind = ErrNoContent
		}
	}
	return ex
}

// readBody consumes n body bytes, scanning them as SSE when scan is set.
func (h *httpConn) readBody(n int64, scan bool) ErrorKind {
	br := h.br
	for n > 0 {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				return h.readErr(err, true)
			}
		}
		k := br.Buffered()
		if int64(k) > n {
			k = int(n)
		}
		if scan {
			p, _ := br.Peek(k)
			h.sse.feed(p, h.now)
		}
		_, _ = br.Discard(k)
		n -= int64(k)
	}
	return errNone
}

func (h *httpConn) readToEOF(scan bool) (int64, ErrorKind) {
	br := h.br
	var total int64
	for {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if errors.Is(err, io.EOF) {
					return total, errNone
				}
				return total, h.readErr(err, true)
			}
		}
		k := br.Buffered()
		if scan {
			p, _ := br.Peek(k)
			h.sse.feed(p, h.now)
		}
		_, _ = br.Discard(k)
		total += int64(k)
	}
}

var (
	hdrContentLength    = []byte("Content-Length")
	hdrTransferEncoding = []byte("Transfer-Encoding")
	hdrConnection       = []byte("Connection")
	hdrContentType      = []byte("Content-Type")
	tokChunked          = []byte("chunked")
	tokClose            = []byte("close")
	tokEventStream      = []byte("text/event-stream")
)

// parseStatusLine returns the status code of "HTTP/1.x NNN reason\r\n", or -1.
func parseStatusLine(l []byte) int {
	if len(l) < 12 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[8] != ' ' {
		return -1
	}
	code := 0
	for _, c := range l[9:12] {
		if c < '0' || c > '9' {
			return -1
		}
		code = code*10 + int(c-'0')
	}
	if len(l) > 12 && l[12] != ' ' && l[12] != '\r' && l[12] != '\n' {
		return -1
	}
	return code
}

// splitHeader splits "Name: value\r\n" into trimmed name and value.
func splitHeader(l []byte) (name, value []byte, ok bool) {
	c := bytes.IndexByte(l, ':')
	if c <= 0 {
		return nil, nil, false
	}
	return l[:c], bytes.TrimSpace(l[c+1:]), true
}

func parseDec(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseChunkSize parses "HEX[;ext]\r\n" (RFC 9112 §7.1).
func parseChunkSize(l []byte) (int64, bool) {
	var n int64
	digits := 0
	for _, c := range l {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		case c == ';' || c == '\r' || c == '\n' || c == ' ' || c == '\t':
			return n, digits > 0
		default:
			return 0, false
		}
		digits++
		if digits > 15 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return 0, false
}

// containsFold reports whether tok occurs in v, ASCII case-insensitively.
func containsFold(v, tok []byte) bool {
	for i := 0; i+len(tok) <= len(v); i++ {
		if bytes.EqualFold(v[i:i+len(tok)], tok) {
			return true
		}
	}
	return false
}
