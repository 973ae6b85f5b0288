package pool

import (
	"crypto/tls"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = 5 * time.Minute // LLM time to first token can be long
	DefaultIdleTimeout           = 90 * time.Second
	DefaultStreamIdleTimeout     = 5 * time.Minute
	DefaultMaxIdleConns          = 1024

	// headBufInitBytes is the initial per-Exchange response head buffer (grows up to the limit).
	headBufInitBytes = 4 << 10
	// earlyResponseWait bounds the wait for a response head after a request write failed.
	earlyResponseWait = time.Second
	// maxInterimResponses bounds the 1xx responses skipped before the final one.
	maxInterimResponses = 16
)

// Options configure one Pool (one upstream backend). Zero fields take the defaults above.
type Options struct {
	// Addr is the upstream "host:port".
	Addr string
	// TLS, when non-nil, makes the upstream https: every conn runs a crypto/tls client handshake
	// (within DialTimeout). Set ServerName for certificate verification; when empty it is taken
	// from Addr's host. ALPN is forced to "http/1.1". The config is cloned by New.
	TLS *tls.Config
	// DialTimeout bounds TCP connect plus TLS handshake. Default 5s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the time from the request being fully written to the
	// response head being complete (1xx heads included). Default 5m (LLM TTFT can be long).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout: an idle pooled conn older than this is closed instead of reused. Default 90s.
	// Keep it below the upstream's own keep-alive timeout to make the keep-alive race rare.
	IdleTimeout time.Duration
	// StreamIdleTimeout is the longest silence allowed between body reads (a read deadline,
	// re-armed at most every 1/16 of it, so it fires within its last 1/16), and the longest a
	// large request write may stall. Default 5m.
	StreamIdleTimeout time.Duration
	// MaxIdleConns caps the idle conns kept for this backend; extra ones are closed. 0 takes the
	// default (1024); a negative value keeps none (a new connection per request).
	MaxIdleConns int
	// LivenessCheckAfter: a conn an event loop keeps idle (AttachLoop) that has been idle at
	// least this long is checked (one MSG_PEEK) for an upstream close before it carries a
	// request that must not be sent twice (a retry could not cover a close). Conns reused
	// sooner, and for any request that may be sent again, skip the system call: the loop's
	// poller sees what arrives on them, an upstream keep-alive timeout is seconds long, and
	// the keep-alive race retry covers the rest. The pool's own idle conns are checked at
	// every reuse, for stray bytes as well. Default 500ms; negative: check every such reuse.
	LivenessCheckAfter time.Duration
	// Limits bound accepted response heads (MaxHeaderBytes, MaxHeaderCount). nil: http1 defaults.
	Limits *http1.Limits
}

func (o *Options) setDefaults() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	switch {
	case o.MaxIdleConns == 0:
		o.MaxIdleConns = DefaultMaxIdleConns
	case o.MaxIdleConns < 0:
		o.MaxIdleConns = 0
	}
	if o.LivenessCheckAfter == 0 {
		o.LivenessCheckAfter = DefaultLivenessCheckAfter
	}
}

// DefaultLivenessCheckAfter is Options.LivenessCheckAfter's default.
const DefaultLivenessCheckAfter = 500 * time.Millisecond

// maxHeadBuf is the largest response head buffer an Exchange grows to.
func (o *Options) maxHeadBuf() int {
	return o.Limits.HeaderBytes() + 4 // a longer head fails ParseResponseHead anyway
}
