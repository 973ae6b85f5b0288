package config

import (
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The HTTP policy middlewares: header edits, path prefix stripping, CORS, client address
// allow-lists and request body limits (docs/config.md#middlewares).
const (
	MiddlewareHeaders     = "headers"
	MiddlewareStripPrefix = "strip-prefix"
	MiddlewareCORS        = "cors"
	MiddlewareIPAllow     = "ip-allow"
	MiddlewareBodyLimit   = "body-limit"
)

// Defaults and bounds of the HTTP policy middlewares' options.
const (
	// DefaultCORSMaxAge is how long a browser may cache a preflight's answer
	// (Access-Control-Max-Age).
	DefaultCORSMaxAge = 10 * time.Minute
	// MaxCORSMaxAge bounds cors max_age: browsers cap it at 2 hours (Chromium) or 24 (Firefox).
	MaxCORSMaxAge = 24 * time.Hour
	// MaxBodyLimitBytes bounds body-limit max_bytes (1 TiB): larger is a typo.
	MaxBodyLimitBytes = 1 << 40
	// maxHeaderEdits bounds the fields one headers middleware sets or removes per list.
	maxHeaderEdits = 64
	// maxHeaderValueLen bounds a value set by a headers middleware.
	maxHeaderValueLen = 8 << 10
)

// DefaultCORSMethods and DefaultCORSHeaders are what a preflight is allowed when cors
// allow_methods and allow_headers are absent: what OpenAI-compatible browser clients send.
var (
	DefaultCORSMethods = []string{"GET", "HEAD", "POST"}
	DefaultCORSHeaders = []string{"Authorization", "Content-Type"}
)

// HeaderPair is one field a headers middleware sets.
type HeaderPair struct{ Name, Value string }

// HeadersOptions are the options of a headers middleware: fields removed and set on the
// request before it goes upstream, and on the upstream's response before it goes to the
// client. Removal runs first, so that set replaces a field the other side sent.
type HeadersOptions struct {
	// RequestSet are fields set on the upstream request (request_set, a table of name =
	// value), replacing the client's fields of that name.
	RequestSet []HeaderPair
	// RequestRemove are field names removed from the request (request_remove).
	RequestRemove []string
	// ResponseSet are fields set on the response to the client (response_set), replacing the
	// upstream's fields of that name.
	ResponseSet []HeaderPair
	// ResponseRemove are field names removed from the upstream's response (response_remove).
	ResponseRemove []string
}

// StripPrefixOptions are the options of a strip-prefix middleware.
type StripPrefixOptions struct {
	// Prefixes are path prefixes (prefixes), each starting with '/'. The first that matches
	// the request path at a segment boundary is removed before the request goes upstream
	// ("/api" turns "/api/v1/models" into "/v1/models" and "/api" into "/", and leaves
	// "/apix" alone); the upstream learns it from X-Forwarded-Prefix.
	Prefixes []string
}

// CORSOptions are the options of a cors middleware (the Fetch standard's CORS protocol).
type CORSOptions struct {
	// AllowOrigins are the origins allowed to read responses (allow_origins), each
	// "scheme://host[:port]" as browsers send it, or "*" for any. Required.
	AllowOrigins []string
	// AllowMethods are the methods a preflight allows (allow_methods). Default GET, HEAD, POST.
	AllowMethods []string
	// AllowHeaders are the request fields a preflight allows (allow_headers). Default
	// Authorization, Content-Type.
	AllowHeaders []string
	// ExposeHeaders are response fields scripts may read besides the safelisted ones
	// (expose_headers). Default none.
	ExposeHeaders []string
	// AllowCredentials lets requests with cookies or HTTP authentication read the response
	// (allow_credentials). Default false; not with the origin "*".
	AllowCredentials bool
	// MaxAge is how long a browser may cache a preflight answer (max_age). Default 10m.
	MaxAge time.Duration
}

// IPAllowOptions are the options of an ip-allow middleware.
type IPAllowOptions struct {
	// SourceRange are the addresses and networks allowed (source_range), as trusted_ips
	// writes them. A request from any other client address is answered 403. Behind a
	// trusted proxy the client address is the one the proxy forwarded.
	SourceRange []netip.Prefix
}

// BodyLimitOptions are the options of a body-limit middleware.
type BodyLimitOptions struct {
	// MaxBytes is the largest request body the router accepts, in bytes (max_bytes); a larger
	// one is answered 413. Required, 0..MaxBodyLimitBytes. The entrypoint's max_body_bytes
	// still bounds what is read at all.
	MaxBytes int64
}

func init() {
	for _, t := range []string{MiddlewareHeaders, MiddlewareStripPrefix, MiddlewareCORS, MiddlewareIPAllow, MiddlewareBodyLimit} {
		middlewareTypes[t] = true
	}
	knownOptions[MiddlewareHeaders] = []string{"request_remove", "request_set", "response_remove", "response_set"}
	knownOptions[MiddlewareStripPrefix] = []string{"prefixes"}
	knownOptions[MiddlewareCORS] = []string{"allow_credentials", "allow_headers", "allow_methods", "allow_origins", "expose_headers", "max_age"}
	knownOptions[MiddlewareIPAllow] = []string{"source_range"}
	knownOptions[MiddlewareBodyLimit] = []string{"max_bytes"}
}

// validateEdgeOptions checks the options of an HTTP policy middleware and fills its field of
// m. It reports false for another type.
func (c *Config) validateEdgeOptions(e *errs, name string, m *Middleware) bool {
	o := &optionChecker{c: c, e: e, name: name, m: m}
	switch m.Type {
	case MiddlewareHeaders:
		o.unknownKeys()
		h := &HeadersOptions{
			RequestSet:     o.headerTable("request_set"),
			RequestRemove:  o.fieldNames("request_remove"),
			ResponseSet:    o.headerTable("response_set"),
			ResponseRemove: o.fieldNames("response_remove"),
		}
		if len(m.Options) == 0 {
			e.add(c.Pos("middlewares", name), "middlewares.%s: a headers middleware needs request_set, request_remove, response_set or response_remove", name)
		}
		m.Headers = h
	case MiddlewareStripPrefix:
		o.unknownKeys()
		o.required("prefixes", `e.g. prefixes = ["/api"]`)
		sp := &StripPrefixOptions{}
		for i, p := range o.strings("prefixes") {
			if !strings.HasPrefix(p, "/") || p == "/" || strings.ContainsAny(p, "?#% \t") {
				e.add(c.ValuePos("middlewares", name, "prefixes", strconv.Itoa(i)), "middlewares.%s.prefixes[%d] %q: want a path prefix such as \"/api\" (starting with '/', not \"/\" alone, no query or escapes)", name, i, p)
				continue
			}
			sp.Prefixes = append(sp.Prefixes, p)
		}
		m.StripPrefix = sp
	case MiddlewareCORS:
		o.unknownKeys()
		o.required("allow_origins", `e.g. allow_origins = ["https://app.example.com"] or ["*"]`)
		co := &CORSOptions{
			AllowOrigins:     o.strings("allow_origins"),
			AllowMethods:     o.tokens("allow_methods", DefaultCORSMethods),
			AllowHeaders:     o.tokens("allow_headers", DefaultCORSHeaders),
			ExposeHeaders:    o.tokens("expose_headers", nil),
			AllowCredentials: o.boolean("allow_credentials", false),
			MaxAge:           o.duration("max_age", DefaultCORSMaxAge, 0, MaxCORSMaxAge),
		}
		for i, origin := range co.AllowOrigins {
			at := c.ValuePos("middlewares", name, "allow_origins", strconv.Itoa(i))
			switch {
			case origin == "*":
				if co.AllowCredentials {
					e.add(at, "middlewares.%s.allow_origins: \"*\" cannot be combined with allow_credentials = true (browsers refuse it): list the origins", name)
				}
			case !validOrigin(origin):
				e.add(at, "middlewares.%s.allow_origins[%d] %q: want an origin such as \"https://app.example.com\" (scheme://host[:port], no path) or \"*\"", name, i, origin)
			}
		}
		m.CORS = co
	case MiddlewareIPAllow:
		o.unknownKeys()
		o.required("source_range", `e.g. source_range = ["10.0.0.0/8", "192.0.2.7"]`)
		ia := &IPAllowOptions{}
		for i, s := range o.strings("source_range") {
			p, msg := parseTrustedIP(s)
			if msg != "" {
				e.add(c.ValuePos("middlewares", name, "source_range", strconv.Itoa(i)), "middlewares.%s.source_range[%d] %q: %s", name, i, s, msg)
				continue
			}
			ia.SourceRange = append(ia.SourceRange, p)
		}
		m.IPAllow = ia
	case MiddlewareCompress:
		c.validateCompressOptions(e, name, m)
	case MiddlewareRetry:
		c.validateRetryOptions(e, name, m)
	case MiddlewareBodyLimit:
		o.unknownKeys()
		o.required("max_bytes", "the largest request body in bytes, e.g. max_bytes = 1048576")
		m.BodyLimit = &BodyLimitOptions{MaxBytes: int64(o.integer("max_bytes", 0, 0, MaxBodyLimitBytes))}
	default:
		return false
	}
	return true
}

// validOrigin reports whether s is a serialized origin: scheme "://" host [":" port], lower
// case as browsers send it (RFC 6454 §6.2).
func validOrigin(s string) bool {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || rest == "" || strings.ContainsAny(rest, "/?#@ ") || s != strings.ToLower(s) {
		return false
	}
	return strings.IndexFunc(scheme, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')
	}) < 0
}

// listOption says what a middleware's array of strings holds, for the message on an empty one.
type listOption struct {
	what string   // one element, e.g. `method such as "POST"`
	def  []string // the default when the key is absent; nil: none
	// none: the key may be absent, and an empty array means the same (no element).
	none bool
	// required: the key may not be absent, so the message does not offer that.
	required bool
}

// listOptions are the middleware options strings reads, by key.
var listOptions = map[string]listOption{
	"prefixes":        {what: `path prefix such as "/api"`, required: true},
	"allow_origins":   {what: `origin such as "https://app.example.com", or "*" for any`, required: true},
	"allow_methods":   {what: `method such as "POST"`, def: DefaultCORSMethods},
	"allow_headers":   {what: `request field name such as "Content-Type"`, def: DefaultCORSHeaders},
	"expose_headers":  {none: true},
	"source_range":    {what: `network such as "10.0.0.0/8" or address such as "192.0.2.7"`, required: true},
	"request_remove":  {what: `field name such as "Server"`},
	"response_remove": {what: `field name such as "Server"`},
	"encodings":       {what: `of "zstd", "br" or "gzip"`, def: DefaultCompressEncodings},
	"content_types":   {what: `media type such as "application/json" or "text/*"`, def: DefaultCompressTypes},
}

// emptyList is the message on an empty array for a key whose default is def (written as a
// TOML array; "" when it has none): what to write instead.
func emptyList(what, def string, required bool) string {
	msg := "is empty: list at least one " + what
	switch {
	case required:
	case def != "":
		msg += ", or remove the key for the default " + def
	default:
		msg += ", or remove the key"
	}
	return msg
}

// tomlStrings writes ss as a TOML array of strings.
func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// strings reads option k (one of listOptions) as an array of strings, non-empty unless the
// option allows it; nil when absent, empty or wrong.
func (o *optionChecker) strings(k string) []string {
	v, ok := o.value(k)
	if !ok {
		return nil
	}
	a, isArr := v.([]any)
	if !isArr {
		o.typeError(k, "an array of strings", v)
		return nil
	}
	if len(a) == 0 {
		if lo := listOptions[k]; !lo.none {
			def := ""
			if lo.def != nil {
				def = tomlStrings(lo.def)
			}
			o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s %s", o.name, k, emptyList(lo.what, def, lo.required))
		}
		return nil
	}
	out := make([]string, 0, len(a))
	for i, x := range a {
		s, isStr := x.(string)
		if !isStr || s == "" {
			ip := strconv.Itoa(i)
			o.e.add(o.c.ValuePos("middlewares", o.name, k, ip), "middlewares.%s.%s[%s] must be a non-empty string, not %s", o.name, k, ip, tomlType(x))
			continue
		}
		out = append(out, s)
	}
	return out
}

// tokens reads option k as an array of tokens (methods, field names); def when absent.
func (o *optionChecker) tokens(k string, def []string) []string {
	if _, ok := o.m.Options[k]; !ok {
		return def
	}
	out := o.strings(k)
	for i, s := range out {
		if strings.IndexFunc(s, notTokenChar) >= 0 {
			o.e.add(o.c.ValuePos("middlewares", o.name, k, strconv.Itoa(i)), "middlewares.%s.%s[%d] %q: want a token (letters, digits and !#$%%&'*+-.^_`|~)", o.name, k, i, s)
		}
	}
	return out
}

// fieldNames reads option k as header field names that a headers middleware may edit.
func (o *optionChecker) fieldNames(k string) []string {
	out := o.strings(k)
	if len(out) > maxHeaderEdits {
		o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s: %d fields, want at most %d", o.name, k, len(out), maxHeaderEdits)
	}
	for i, s := range out {
		o.checkFieldName(s, []string{"middlewares", o.name, k, strconv.Itoa(i)})
	}
	return out
}

// headerTable reads option k as a table of field name = value.
func (o *optionChecker) headerTable(k string) []HeaderPair {
	v, ok := o.value(k)
	if !ok {
		return nil
	}
	t, isTable := v.(map[string]any)
	if !isTable {
		o.typeError(k, `a table of field name = "value", e.g. { "X-Env" = "prod" }`, v)
		return nil
	}
	if len(t) > maxHeaderEdits {
		o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s: %d fields, want at most %d", o.name, k, len(t), maxHeaderEdits)
	}
	var out []HeaderPair
	for _, name := range sortedNames(t) {
		at := []string{"middlewares", o.name, k, name}
		o.checkFieldName(name, at)
		s, isStr := t[name].(string)
		if !isStr {
			o.e.add(o.c.ValuePos(at...), "middlewares.%s.%s.%s must be a string, not %s", o.name, k, name, tomlType(t[name]))
			continue
		}
		if len(s) > maxHeaderValueLen || strings.ContainsAny(s, "\r\n\x00") {
			o.e.add(o.c.ValuePos(at...), "middlewares.%s.%s.%s: a field value has no CR, LF or NUL and at most %d bytes (RFC 9110 §5.5)", o.name, k, name, maxHeaderValueLen)
			continue
		}
		out = append(out, HeaderPair{Name: name, Value: s})
	}
	return out
}

// framingFields are fields a headers middleware must not touch: the request was parsed and
// routed with them, and the gateway frames and connects each side itself.
var framingFields = []string{"host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"}

func (o *optionChecker) checkFieldName(s string, at []string) {
	switch {
	case s == "" || len(s) > maxAPIKeyHeaderNameLen || strings.IndexFunc(s, notTokenChar) >= 0:
		o.e.add(o.c.Pos(at...), "middlewares.%s: %q is not a header field name (RFC 9110 §5.1)", o.name, s)
	case oneOf(strings.ToLower(s), framingFields):
		o.e.add(o.c.Pos(at...), "middlewares.%s: %q frames or routes the message and cannot be edited by a headers middleware", o.name, s)
	}
}

// boolean reads option k as a boolean; def when absent.
func (o *optionChecker) boolean(k string, def bool) bool {
	v, ok := o.value(k)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		o.typeError(k, "true or false", v)
		return def
	}
	return b
}

// ---- compress ----

// MiddlewareCompress codes response bodies (gzip, zstd, br) by the client's Accept-Encoding.
const MiddlewareCompress = "compress"

// Content codings of a compress middleware's encodings.
const (
	EncodingGzip = "gzip"
	EncodingZstd = "zstd"
	EncodingBr   = "br"
)

// Defaults of a compress middleware.
const (
	// DefaultCompressMinSize is the shortest body coded when its length is known, in bytes:
	// below about a kilobyte the coding's framing eats the gain.
	DefaultCompressMinSize = 1024
)

// DefaultCompressEncodings and DefaultCompressTypes are a compress middleware's codings
// (preferred first) and content types when not configured.
var (
	DefaultCompressEncodings = []string{EncodingZstd, EncodingBr, EncodingGzip}
	DefaultCompressTypes     = []string{"text/*", "application/json", "application/x-ndjson", "application/javascript", "application/xml", "application/problem+json", "image/svg+xml"}
)

// CompressOptions are the options of a compress middleware.
type CompressOptions struct {
	// Encodings are the codings offered, preferred first when the client weighs several
	// alike (encodings): "zstd", "br", "gzip". Default all three in that order.
	Encodings []string
	// MinSize is the shortest body coded, in bytes (min_size): a body whose Content-Length is
	// smaller goes as it is. A body of unknown length is coded. Default 1024.
	MinSize int64
	// ContentTypes are the media types coded (content_types), "type/subtype" or "type/*".
	// text/event-stream is never coded, whatever this says.
	ContentTypes []string
}

func init() {
	middlewareTypes[MiddlewareCompress] = true
	knownOptions[MiddlewareCompress] = []string{"content_types", "encodings", "min_size"}
}

// validateCompressOptions checks a compress middleware and fills m.Compress.
func (c *Config) validateCompressOptions(e *errs, name string, m *Middleware) {
	o := &optionChecker{c: c, e: e, name: name, m: m}
	o.unknownKeys()
	co := &CompressOptions{
		Encodings:    o.tokens("encodings", DefaultCompressEncodings),
		MinSize:      int64(o.integer("min_size", DefaultCompressMinSize, 0, MaxBodyLimitBytes)),
		ContentTypes: DefaultCompressTypes,
	}
	if _, ok := m.Options["content_types"]; ok {
		co.ContentTypes = o.strings("content_types")
	}
	seen := map[string]bool{}
	for i, enc := range co.Encodings {
		at := c.ValuePos("middlewares", name, "encodings", strconv.Itoa(i))
		switch {
		case !oneOf(enc, []string{EncodingZstd, EncodingBr, EncodingGzip}):
			e.add(at, "middlewares.%s.encodings[%d] %q: want \"zstd\", \"br\" or \"gzip\"%s", name, i, enc, meant(enc, []string{EncodingZstd, EncodingBr, EncodingGzip}))
		case seen[enc]:
			e.add(at, "middlewares.%s.encodings: %q is listed twice", name, enc)
		}
		seen[enc] = true
	}
	for i, t := range co.ContentTypes {
		typ, sub, ok := strings.Cut(t, "/")
		if !ok || typ == "" || sub == "" || typ == "*" || strings.ContainsAny(t, "; ") {
			e.add(c.ValuePos("middlewares", name, "content_types", strconv.Itoa(i)), "middlewares.%s.content_types[%d] %q: want a media type such as \"application/json\" or \"text/*\"", name, i, t)
		}
	}
	m.Compress = co
}

// ---- retry ----

// MiddlewareRetry sends a failed request again, before any response byte reached the client.
const MiddlewareRetry = "retry"

// Defaults and bounds of a retry middleware.
const (
	DefaultRetryAttempts       = 3
	MaxRetryAttempts           = 10
	DefaultRetryInitialBackoff = 100 * time.Millisecond
	DefaultRetryMaxBackoff     = 2 * time.Second
	MaxRetryBackoff            = time.Minute
	DefaultRetryBudget         = 0.2
	DefaultRetryMinRetries     = 10
	MaxRetryMinRetries         = 1_000_000
)

// DefaultRetryStatuses are the upstream statuses retried when statuses is absent: a proxy's
// or a server's "not now" (RFC 9110 §15.6.3–15.6.5).
var DefaultRetryStatuses = []int{502, 503, 504}

// RetryOptions are the options of a retry middleware. Only requests that may be sent twice
// are retried (an idempotent method or an Idempotency-Key), and only before any response
// byte reached the client.
type RetryOptions struct {
	// Attempts is the most attempts of one request, the first included (attempts), 2..10.
	// Default 3.
	Attempts int
	// InitialBackoff is the wait before the first retry (initial_backoff); each further retry
	// waits twice as long, up to MaxBackoff, with jitter. Default 100ms.
	InitialBackoff time.Duration
	// MaxBackoff bounds a wait (max_backoff). Default 2s.
	MaxBackoff time.Duration
	// Budget is the retries allowed as a fraction of the requests (budget), 0..1: each request
	// adds Budget to a bank that each retry takes one from, so that retries cannot multiply
	// the load of a failing upstream. Default 0.2.
	Budget float64
	// MinRetries is what the budget's bank holds at most and starts with (min_retries), 1 or
	// more: the retries a quiet route may make in a row. Default 10.
	MinRetries int
	// Statuses are the upstream statuses retried (statuses). Default [502, 503, 504].
	Statuses []int
}

func init() {
	middlewareTypes[MiddlewareRetry] = true
	knownOptions[MiddlewareRetry] = []string{"attempts", "budget", "initial_backoff", "max_backoff", "min_retries", "statuses"}
}

// validateRetryOptions checks a retry middleware and fills m.Retry.
func (c *Config) validateRetryOptions(e *errs, name string, m *Middleware) {
	o := &optionChecker{c: c, e: e, name: name, m: m}
	o.unknownKeys()
	r := &RetryOptions{
		Attempts:       o.integer("attempts", DefaultRetryAttempts, 2, MaxRetryAttempts),
		InitialBackoff: o.duration("initial_backoff", DefaultRetryInitialBackoff, 0, MaxRetryBackoff),
		MaxBackoff:     o.duration("max_backoff", DefaultRetryMaxBackoff, 0, MaxRetryBackoff),
		Budget:         o.number("budget", DefaultRetryBudget, 0, 1),
		MinRetries:     o.integer("min_retries", DefaultRetryMinRetries, 1, MaxRetryMinRetries),
		Statuses:       DefaultRetryStatuses,
	}
	if r.MaxBackoff < r.InitialBackoff {
		e.add(c.ValuePos(o.path("max_backoff")...), "middlewares.%s.max_backoff %v is shorter than initial_backoff %v", name, r.MaxBackoff, r.InitialBackoff)
	}
	if v, ok := o.value("statuses"); ok {
		a, isArr := v.([]any)
		switch {
		case !isArr:
			o.typeError("statuses", "an array of 5xx statuses such as [502, 503]", v)
		case len(a) == 0:
			def := make([]string, len(DefaultRetryStatuses))
			for i, n := range DefaultRetryStatuses {
				def[i] = strconv.Itoa(n)
			}
			e.add(c.ValuePos(o.path("statuses")...), "middlewares.%s.statuses %s", name, emptyList("5xx status such as 503", "["+strings.Join(def, ", ")+"]", false))
		default:
			r.Statuses = nil
			for i, x := range a {
				n, isInt := x.(int64)
				if !isInt || n < 500 || n > 599 {
					e.add(c.ValuePos("middlewares", name, "statuses", strconv.Itoa(i)), "middlewares.%s.statuses[%d]: want a 5xx status (a 4xx is the client's to fix, a 2xx-3xx an answer)", name, i)
					continue
				}
				r.Statuses = append(r.Statuses, int(n))
			}
		}
	}
	m.Retry = r
}
