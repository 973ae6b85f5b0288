package http1

import (
	"bytes"

	"github.com/sluice-gw/sluice/internal/steps"
)

// HeaderField is one field line. Key and Value are sub-slices of the owning message's buffer;
// Value is trimmed of optional whitespace (RFC 9112 §5.1). Key keeps the case it was received in.
type HeaderField struct {
	Key, Value []byte
}

// Request is a parsed request head plus its body, which the caller (or the chunked decoder)
// fills. It is reusable: Reset keeps capacity. All slices point into the Request's own copy of
// the head, so the caller's input buffer may be reused after ParseRequestHead returns; they stay
// valid until the next Reset or ParseRequestHead.
type Request struct {
	Method   []byte // request method token, case-sensitive (RFC 9110 §9.1)
	URI      []byte // request-target as received (RFC 9112 §3.2)
	Path     []byte // URI up to '?' in normal form (see normalisePath); for absolute-form the path part ("/" when empty); "*" for asterisk-form
	RawQuery []byte // URI after the first '?', without it; nil when there is none

	Major, Minor int // 1.0 or 1.1: a later HTTP/1 minor version is 1.1 (RFC 9110 §2.5), another major version *Error 505
	// SentMinor is the minor version as the request line has it (2 for "HTTP/1.2"), 0..9:
	// what a TRACE reflects (RFC 9110 §9.3.8). Minor is what the request is served as.
	SentMinor int

	Headers []HeaderField // all field lines in order, as received

	// Host is the Host field value (required exactly once in HTTP/1.1, RFC 9112 §3.2); for an
	// absolute-form target it is the target's authority instead (RFC 9112 §3.2.2). Nil when absent.
	Host []byte

	ContentLength  int64 // body length in bytes; -1 when absent (also when Chunked)
	Chunked        bool  // Transfer-Encoding with chunked as the final coding
	KeepAlive      bool  // persistent connection (RFC 9112 §9.3): 1.1 unless "close", 1.0 only with "keep-alive"
	ExpectContinue bool  // HTTP/1.1 with Expect: 100-continue (RFC 9110 §10.1.1)
	Upgrade        bool  // HTTP/1.1 with Connection: upgrade and an Upgrade field (RFC 9110 §7.8)

	Body []byte // filled by the caller; owned by the Request and reused

	// BodyCut, above 0, says the engine stopped reading the body once it knew the body to be
	// at least BodyCut bytes long (by its Content-Length, or as its chunks came): Body holds
	// at most the part read, and the request must be refused, never sent on. 0: the body was
	// read whole.
	BodyCut int64

	buf        []byte     // owned copy of the head
	hostName   []byte     // Host without port
	connTokens [][]byte   // tokens named in Connection fields (hop-by-hop)
	connIndex  tokenIndex // connTokens hashed, when there are many
}

// Reset clears r for reuse, keeping the capacity of its buffers.
func (r *Request) Reset() {
	r.Method, r.URI, r.Path, r.RawQuery = nil, nil, nil, nil
	r.Major, r.Minor, r.SentMinor = 0, 0, 0
	r.Headers = r.Headers[:0]
	r.Host, r.hostName = nil, nil
	r.ContentLength = -1
	r.Chunked, r.KeepAlive, r.ExpectContinue, r.Upgrade = false, false, false, false
	r.Body = r.Body[:0]
	r.BodyCut = 0
	r.buf = r.buf[:0]
	r.connTokens = r.connTokens[:0]
	r.connIndex.reset()
}

var slashPath = []byte("/")

// ParseRequestHead resets r, copies head into r and parses it. head is exactly one head as found
// by FindHeadEnd (without the skipped prefix): request line, field lines, blank line. lim may be
// nil (defaults).
//
// It returns ErrNeedMore when head does not end in a blank line, or an *Error (after which
// r's fields are unspecified and the connection must be closed):
//   - 400: malformed request line or target, bad field name or value characters, whitespace
//     before a colon, obs-fold, a bare CR or LF, bytes after the blank line, an invalid or
//     duplicated-with-different-values Content-Length, both Transfer-Encoding and
//     Content-Length, a Transfer-Encoding whose final coding is not chunked or that applies
//     chunked twice, any Transfer-Encoding in HTTP/1.0, a missing, duplicated or invalid Host
//     in HTTP/1.1 (RFC 9112 §2.2, §3, §5, §6.1, §6.3; RFC 9110 §5.5, §8.6), a field named
//     Content_Length or Transfer_Encoding (servers that map '_' to '-' would frame differently),
//     and more than one Authorization or Proxy-Authorization field (RFC 9110 §5.3, §11.6.2,
//     §11.7.2: neither is a list, so which credentials count would depend on who reads them);
//   - 413: Content-Length over lim.MaxBodyBytes;
//   - 414: head over lim.MaxHeaderBytes within its request line (see HeadTooLarge);
//   - 431: head over lim.MaxHeaderBytes in its field lines, or more than lim.MaxHeaderCount fields;
//   - 501: a transfer coding other than chunked, gzip, deflate, compress (and x- aliases), and
//     any coding besides chunked in a request (gzip, chunked: the gateway does not decode it);
//   - 501: the CONNECT method (tunnels are not proxied);
//   - 505: an HTTP version other than 1.0 and 1.1.
func (r *Request) ParseRequestHead(head []byte, lim *Limits) error {
	r.Reset()
	if len(head) > lim.HeaderBytes() {
		return r.headTooLarge(head, lim)
	}
	if err := methodRefusal(head); err != nil {
		return err
	}
	r.buf = append(r.buf, head...)
	buf := r.buf
	e := &reqFieldErrors

	line, pos, err := nextLine(buf, 0, e)
	if err != nil {
		return err
	}
	if err := r.parseRequestLine(line); err != nil {
		return err
	}
	if len(r.Path) > 0 && r.Path[0] == '/' && needsNormalising(r.Path) {
		// The normal form goes after the head in r.buf: URI keeps the target as received.
		start := len(r.buf)
		if r.buf, err = normalisePath(r.buf, r.Path, lim.EncodedSlashAllowed()); err != nil {
			return err
		}
		r.Path = r.buf[start:len(r.buf):len(r.buf)]
		if lim.EncodedSlashAllowed() && hasDotSegmentBetweenSeparators(r.Path) {
			return errDotSegment
		}
	}
	r.Headers, err = parseFields(buf, pos, r.Headers, lim.HeaderCount(), e)
	if err != nil {
		return err
	}

	var (
		te        teState
		conn      connState
		hosts     int
		auths     int // Authorization fields
		proxyAuth int // Proxy-Authorization fields
		host      []byte
		upgradeHd bool
		expect100 bool
	)
	for i := range r.Headers {
		h := &r.Headers[i]
		k := h.Key
		switch len(k) {
		case 4:
			if equalFold(k, "host") {
				hosts++
				host = h.Value
			}
		case 6:
			if equalFold(k, "expect") && equalFold(h.Value, "100-continue") {
				expect100 = true
			}
		case 7:
			if equalFold(k, "upgrade") {
				upgradeHd = true
			}
		case 10:
			if equalFold(k, "connection") {
				r.connTokens = conn.add(h.Value, r.connTokens)
			}
		case 13:
			if equalFold(k, "authorization") {
				auths++
			}
		case 19:
			if equalFold(k, "proxy-authorization") {
				proxyAuth++
			}
		case 14:
			if equalFoldUnderscore(k, "content-length") && !equalFold(k, "content-length") {
				return errAmbiguousName
			}
			if equalFold(k, "content-length") {
				n, bad, differ := parseContentLength(h.Value, r.ContentLength)
				if bad {
					return errBadCL
				}
				if differ {
					return errDiffCL
				}
				r.ContentLength = n
			}
		case 17:
			if equalFold(k, "transfer-encoding") {
				te.add(h.Value)
			} else if equalFoldUnderscore(k, "transfer-encoding") {
				return errAmbiguousName
			}
		}
	}

	http11 := r.Minor == 1
	if te.present {
		switch {
		case !http11:
			return errTEInHTTP10
		case r.ContentLength >= 0:
			return errCLAndTE
		case te.syntax || te.codings == 0:
			return errTESyntax
		case te.chunkedTwice:
			return errTEChunkedTwice
		case te.unknown:
			return errTEUnknown
		case !te.chunkedLast:
			return errTENotChunked
		case te.codings > 1:
			// gzip, chunked and the like: the body is decoded from chunked only, so forwarding it
			// would drop the coding and hand the upstream compressed bytes it cannot recognise.
			return errTECoded
		}
		r.Chunked = true
	}
	if auths > 1 || proxyAuth > 1 {
		return errDupCredentials
	}
	if r.ContentLength > lim.BodyBytes() {
		return errBodyTooLarge
	}
	r.connIndex.build(r.connTokens)

	// RFC 9112 §3.2: 400 for an HTTP/1.1 request without Host, for more than one Host, and for
	// an invalid Host value, even when an absolute-form target supplies the authority.
	if hosts > 1 {
		return errDupHost
	}
	if hosts == 0 && http11 {
		return errNoHost
	}
	if host != nil {
		name, ok := splitHostPort(host)
		if !ok {
			return errBadHost
		}
		if r.Host == nil {
			r.Host, r.hostName = host, name
		}
	}
	if r.Host != nil && r.hostName == nil { // authority of an absolute-form target
		name, ok := splitHostPort(r.Host)
		if !ok {
			return errTarget
		}
		r.hostName = name
	}

	if http11 {
		r.KeepAlive = !conn.close
		r.ExpectContinue = expect100
		r.Upgrade = conn.upgrade && upgradeHd
	} else {
		r.KeepAlive = conn.keepAlive && !conn.close
	}
	return nil
}

// parseRequestLine parses method SP request-target SP HTTP-version (RFC 9112 §3), single spaces.
func (r *Request) parseRequestLine(line []byte) error {
	steps.Add(len(line))
	i := 0
	for i < len(line) && tokenChar[line[i]] {
		i++
	}
	if i == len(line) {
		return errReqLine
	}
	if c := line[i]; c != ' ' {
		if c == '\r' {
			return errBareCR
		}
		return errMethod
	}
	if i == 0 {
		return errReqLine
	}
	r.Method = line[:i:i]
	rest := line[i+1:]
	j := 0
	for j < len(rest) && targetChar[rest[j]] {
		j++
	}
	if j == len(rest) {
		return errReqLine
	}
	if c := rest[j]; c != ' ' {
		if c == '\r' {
			return errBareCR
		}
		return errTarget
	}
	if j == 0 {
		return errReqLine
	}
	r.URI = rest[:j:j]
	ver := rest[j+1:]
	if bytes.IndexByte(ver, '\r') >= 0 {
		return errBareCR
	}
	major, minor, ok := parseVersion(ver)
	if !ok {
		if k := bytes.LastIndexByte(ver, ' '); k >= 0 {
			if _, _, ok := parseVersion(ver[k+1:]); ok {
				// The line ends in a valid HTTP-version after more than two spaces: an
				// unencoded space in the target, which a server must not guess around
				// (RFC 9112 §3) but can name.
				return errTargetSpace
			}
		}
		return errVersionSyntax
	}
	if major == 2 && minor == 0 && string(r.Method) == "PRI" && string(r.URI) == "*" {
		return errH2Preface
	}
	if major != 1 {
		return errVersion
	}
	// A later minor version of HTTP/1 is processed as HTTP/1.1, the highest this server
	// implements (RFC 9110 §2.5, RFC 9112 §2.3): only the major version can be refused.
	r.Major, r.Minor, r.SentMinor = 1, min(minor, 1), minor
	return r.parseTarget()
}

// parseTarget splits r.URI into Path and RawQuery for the request-target forms a gateway serves
// (RFC 9112 §3.2): origin-form, absolute-form (Host taken from it) and asterisk-form (OPTIONS
// only). CONNECT (authority-form) is refused with 501.
func (r *Request) parseTarget() error {
	u := r.URI
	path := u
	if q := bytes.IndexByte(u, '?'); q >= 0 {
		path, r.RawQuery = u[:q:q], u[q+1:]
	}
	if string(r.Method) == "CONNECT" {
		// A tunnel, not a request a gateway routes: forwarding it would hand the client a raw
		// TCP pipe to whatever the upstream connects to (RFC 9110 §9.3.6).
		return errConnect
	}
	switch {
	case u[0] == '/':
		r.Path = path
	case len(u) == 1 && u[0] == '*':
		if string(r.Method) != "OPTIONS" {
			return ErrAsteriskForm // RFC 9112 §3.2.4: asterisk-form is only for server-wide OPTIONS
		}
		r.Path = u
	case hasPrefixFold(u, "http://") || hasPrefixFold(u, "https://"):
		s := bytes.IndexByte(u, ':') + 3
		auth := path[s:]
		p := bytes.IndexByte(auth, '/')
		if p >= 0 {
			auth, r.Path = auth[:p:p], auth[p:]
		} else {
			r.Path = slashPath
		}
		if len(auth) == 0 {
			return errTarget
		}
		r.Host = auth // RFC 9112 §3.2.2: the target's authority replaces Host
	default:
		return errTarget
	}
	if hasDotSegment(r.Path) {
		return errDotSegment
	}
	return nil
}

// hasDotSegment reports whether path has a "." or ".." segment, literal or percent-encoded
// (%2e). Routers match the path as sent while an upstream may resolve dot segments (RFC 3986
// §5.2.4), so /public/../admin could pass a PathPrefix(`/public`) rule: such requests are
// refused rather than guessed at. Clients resolve dot segments before sending.
func hasDotSegment(path []byte) bool {
	steps.Add(len(path) + 1)
	for i := 0; i < len(path); {
		if path[i] != '/' {
			i++
			continue
		}
		j := i + 1
		for j < len(path) && path[j] != '/' {
			j++
		}
		if isDotSegment(path[i+1 : j]) {
			return true
		}
		i = j
	}
	return false
}

func isDotSegment(seg []byte) bool {
	dots := 0
	for i := 0; i < len(seg); {
		switch {
		case seg[i] == '.':
			i++
		case i+2 < len(seg) && seg[i] == '%' && seg[i+1] == '2' && (seg[i+2] == 'e' || seg[i+2] == 'E'):
			i += 3
		default:
			return false
		}
		dots++
		if dots > 2 {
			return false
		}
	}
	return dots == 1 || dots == 2
}

func hasPrefixFold(b []byte, s string) bool {
	return len(b) >= len(s) && equalFold(b[:len(s)], s)
}

// splitHostPort validates a Host value (uri-host [":" port], RFC 9110 §7.2) and returns the host
// without the port. An empty value is valid (RFC 9112 §3.2).
func splitHostPort(h []byte) (name []byte, ok bool) {
	steps.Add(len(h) + 1)
	for _, c := range h {
		if !hostChar[c] {
			return nil, false
		}
	}
	name, port := h, []byte(nil)
	if len(h) > 0 && h[0] == '[' {
		end := bytes.IndexByte(h, ']')
		if end < 0 {
			return nil, false
		}
		name, port = h[:end+1], h[end+1:]
		if len(port) > 0 && port[0] != ':' {
			return nil, false
		}
		if bytes.IndexByte(name[1:end], '[') >= 0 {
			return nil, false
		}
	} else if c := bytes.IndexByte(h, ':'); c >= 0 {
		name, port = h[:c], h[c:]
	}
	if bytes.IndexByte(name, ']') >= 0 && name[0] != '[' {
		return nil, false
	}
	if len(port) > 0 {
		port = port[1:]
		if len(port) > 5 {
			return nil, false
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return nil, false
			}
		}
	}
	return name[:len(name):len(name)], true
}
