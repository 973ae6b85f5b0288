package http1

import "errors"

// Error is a framing error together with the HTTP status the gateway answers with:
// 400 (malformed message), 413 (body over Limits.MaxBodyBytes), 414 (request line alone over
// Limits.MaxHeaderBytes), 431 (head over Limits.MaxHeaderBytes or Limits.MaxHeaderCount), 501 (unknown transfer coding),
// 505 (HTTP version other than 1.0/1.1) for requests, and 502 (Bad Gateway, RFC 9110 §15.6.3)
// for any malformed upstream response head. After an *Error the connection must be closed:
// the message framing can no longer be trusted (RFC 9112 §6.3).
//
// The package returns shared *Error values (never allocated per failure); do not modify them.
type Error struct {
	Status int    // HTTP status code to answer with
	Msg    string // what was wrong, without the offending bytes
}

// Error returns "http1: <status>: <msg>".
func (e *Error) Error() string {
	return "http1: " + itoa3(e.Status) + ": " + e.Msg
}

func itoa3(n int) string {
	if n < 100 || n > 999 {
		return "???"
	}
	return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
}

// ErrNeedMore reports that the head is incomplete (no blank line yet): the caller waits for more
// bytes. It is not an *Error. Use CheckPartialHead to enforce the header size limit while waiting.
var ErrNeedMore = errors.New("http1: incomplete message head, need more bytes")

func newErr(status int, msg string) *Error { return &Error{Status: status, Msg: msg} }

// ErrAsteriskForm refuses an asterisk-form request-target ("*") with a method other than
// OPTIONS (RFC 9112 §3.2.4). It is exported for the servers that parse with net/http (the admin
// API), so that they answer such a request as the gateway does.
var ErrAsteriskForm = newErr(400, "asterisk-form request-target is only for OPTIONS (RFC 9112 §3.2.4)")

// Request errors (RFC 9112 unless noted).
var (
	errReqLine          = newErr(400, "malformed request line (RFC 9112 §3)")
	errMethod           = newErr(400, "invalid method token (RFC 9112 §3.1)")
	errTarget           = newErr(400, "invalid request-target (RFC 9112 §3.2)")
	errConnect          = newErr(501, "CONNECT is not supported: the gateway does not open tunnels (RFC 9110 §9.3.6)")
	errDotSegment       = newErr(400, "request path has a dot segment (RFC 3986 §5.2.4): resolve it before sending")
	errVersionSyntax    = newErr(400, "malformed HTTP-version (RFC 9112 §2.3)")
	errTargetSpace      = newErr(400, "whitespace in the request-target: percent-encode it (%20, RFC 9112 §3.2, §3)")
	errVersion          = newErr(505, "HTTP version not supported (only HTTP/1.x)")
	errH2Preface        = newErr(505, "HTTP/2 connection preface: this server speaks HTTP/1.0 and HTTP/1.1 only, not HTTP/2 with prior knowledge (RFC 9113 §3.3, §3.4)")
	errBareLF           = newErr(400, "line not terminated by CRLF (bare LF, RFC 9112 §2.2)")
	errBareCR           = newErr(400, "bare CR in message head (RFC 9112 §2.2)")
	errObsFold          = newErr(400, "obsolete line folding or whitespace before a field line (RFC 9112 §5.2, §2.2)")
	errFieldName        = newErr(400, "invalid field name (RFC 9110 §5.1)")
	errSpaceBeforeColon = newErr(400, "whitespace between field name and colon (RFC 9112 §5.1)")
	errNoColon          = newErr(400, "field line without colon (RFC 9112 §5)")
	errFieldValue       = newErr(400, "invalid character in field value (NUL, CR, LF or CTL, RFC 9110 §5.5)")
	errTrailingBytes    = newErr(400, "bytes after the blank line that ends the head")
	errURITooLong       = newErr(414, "request line larger than the header size limit (RFC 9112 §3)")
	errHeadTooLarge     = newErr(431, "request head larger than the header size limit")
	errTooManyHeaders   = newErr(431, "too many header fields")
	errBadCL            = newErr(400, "invalid Content-Length (RFC 9110 §8.6)")
	errDiffCL           = newErr(400, "multiple differing Content-Length values (RFC 9112 §6.3)")
	errCLAndTE          = newErr(400, "both Transfer-Encoding and Content-Length (RFC 9112 §6.3, request smuggling)")
	errTENotChunked     = newErr(400, "Transfer-Encoding final coding is not chunked (RFC 9112 §6.3)")
	errTEChunkedTwice   = newErr(400, "chunked applied more than once (RFC 9112 §7)")
	errTESyntax         = newErr(400, "malformed Transfer-Encoding (RFC 9112 §6.1)")
	errTEUnknown        = newErr(501, "unknown transfer coding (RFC 9112 §6.1)")
	errTECoded          = newErr(501, "request transfer codings other than chunked are not supported (RFC 9112 §6.1): send Content-Encoding instead")
	errTEInHTTP10       = newErr(400, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 §6.1)")
	errNoHost           = newErr(400, "missing Host in an HTTP/1.1 request (RFC 9112 §3.2)")
	errDupHost          = newErr(400, "more than one Host field (RFC 9112 §3.2)")
	errDupCredentials   = newErr(400, "more than one Authorization or Proxy-Authorization field (RFC 9110 §11.6.2, §11.7.2: one set of credentials)")
	errBadHost          = newErr(400, "invalid Host (RFC 9110 §7.2)")
	errBodyTooLarge     = newErr(413, "body larger than the body size limit")
	errAmbiguousName    = newErr(400, "Content_Length or Transfer_Encoding field name (underscore variant, request smuggling)")
)

// Response errors: the gateway answers the client 502 for any of them.
var (
	errRespLine       = newErr(502, "malformed status line (RFC 9112 §4)")
	errRespVersion    = newErr(502, "unsupported HTTP version")
	errRespStatus     = newErr(502, "invalid status code (RFC 9110 §15)")
	errRespReason     = newErr(502, "invalid reason phrase (RFC 9112 §4)")
	errRespBareLF     = newErr(502, "line not terminated by CRLF")
	errRespBareCR     = newErr(502, "bare CR in head")
	errRespObsFold    = newErr(502, "obsolete line folding (RFC 9112 §5.2)")
	errRespFieldName  = newErr(502, "invalid field name")
	errRespSpaceColon = newErr(502, "whitespace between field name and colon")
	errRespNoColon    = newErr(502, "field line without colon")
	errRespFieldValue = newErr(502, "invalid character in field value")
	errRespTrailing   = newErr(502, "bytes after the blank line that ends the head")
	errRespTooLarge   = newErr(502, "response head larger than the header size limit")
	errRespTooMany    = newErr(502, "too many header fields")
	errRespBadCL      = newErr(502, "invalid Content-Length")
	errRespDiffCL     = newErr(502, "multiple differing Content-Length values")
	errRespCLAndTE    = newErr(502, "both Transfer-Encoding and Content-Length (response splitting)")
	errRespTESyntax   = newErr(502, "malformed Transfer-Encoding")
	errRespTETwice    = newErr(502, "chunked applied more than once")
)

// Chunked coding errors (RFC 9112 §7.1).
var (
	errChunkSize      = newErr(400, "invalid chunk size (RFC 9112 §7.1)")
	errChunkSizeLong  = newErr(400, "chunk size longer than 16 hex digits")
	errChunkCRLF      = newErr(400, "missing CRLF in chunked framing (RFC 9112 §7.1)")
	errChunkExt       = newErr(400, "invalid chunk extension (RFC 9112 §7.1.1)")
	errChunkExtLong   = newErr(400, "chunk extension longer than the limit")
	errTrailer        = newErr(400, "invalid trailer section (RFC 9112 §7.1.2)")
	errTrailerTooLong = newErr(400, "trailer section larger than the limit")
	errChunkedTooBig  = newErr(413, "chunked body larger than the body size limit")
)
