package ratelimit

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// keyKind is what a stage counts requests by.
type keyKind uint8

const (
	byClientIP keyKind = iota
	byConsumer
	bySubject
	byHeader
)

// Each key is kept under a byte naming its kind, so that a header's value can never pose as
// a client address or a consumer (and take their tokens).
const (
	tagIP       = 'i'
	tagConsumer = 'c'
	tagHeader   = 'h'
	tagSubject  = 's'
)

// Stage is the rate-limit middleware: a pipeline.RequestStage over a Limiter. One Stage
// serves every router that lists its middleware, so that a key's budget is shared by them.
type Stage struct {
	name   string
	opts   config.RateLimitOptions
	l      *Limiter
	by     keyKind
	header string
	v4, v6 int    // the prefix lengths client addresses are counted by
	limit  []byte // RateLimit-Limit: the burst, formatted once
	m      *metrics.RateLimit
}

// New returns the stage of rate-limit middleware name with options o. When prev (the stage
// of the configuration being replaced, or nil) has the same options, the new stage keeps its
// buckets, so that a reload neither forgets who used their budget nor gives everyone a
// fresh burst; when it counts the same keys under other limits (rate, burst, max_keys), each
// key keeps the tokens it spent (Limiter.CarryOver). Other keys start with full buckets.
func New(name string, o config.RateLimitOptions, prev *Stage) *Stage {
	s := &Stage{name: name, opts: o, header: o.Header, v4: o.IPv4PrefixLen, v6: o.IPv6PrefixLen, m: metrics.ForRateLimit(name)}
	if s.v4 == 0 {
		s.v4 = config.DefaultRateLimitIPv4PrefixLen
	}
	if s.v6 == 0 {
		s.v6 = config.DefaultRateLimitIPv6PrefixLen
	}
	switch o.Key {
	case config.RateLimitKeyAPIKey:
		s.by = byConsumer
	case config.RateLimitKeyJWTSubject:
		s.by = bySubject
	case config.RateLimitKeyClientIP, "":
		s.by = byClientIP
	default:
		s.by = byHeader
	}
	switch {
	case prev != nil && prev.opts == o:
		s.l = prev.l
	case prev != nil && prev.sameKeys(s):
		// Other limits over the same keys: each key keeps what it spent, so that a reload
		// that tightens the limit does not hand every client a fresh burst.
		s.l = NewLimiter(o.Rate, o.Burst, o.MaxKeys)
		s.l.CarryOver(prev.l)
	default:
		s.l = NewLimiter(o.Rate, o.Burst, o.MaxKeys)
	}
	s.limit = strconv.AppendInt(nil, s.l.Burst(), 10)
	return s
}

// sameKeys reports whether s and t count requests by the same keys: the same kind, the same
// field (its name in any case), the same prefix lengths.
func (s *Stage) sameKeys(t *Stage) bool {
	return s.by == t.by && strings.EqualFold(s.header, t.header) && s.v4 == t.v4 && s.v6 == t.v6
}

// Metrics returns the stage's counter, for metrics.InForce.
func (s *Stage) Metrics() *metrics.RateLimit { return s.m }

// Limiter returns the stage's buckets.
func (s *Stage) Limiter() *Limiter { return s.l }

// LoopSafe implements pipeline.LoopSafe: a token taken from a bucket under its shard's lock,
// held for a map lookup; an empty bucket is answered 429 at once, never waited for.
func (s *Stage) LoopSafe() bool { return true }

// Response fields of draft-ietf-httpapi-ratelimit-headers (up to its -06 revision, which
// clients and proxies implement): the bucket's size, its whole tokens left and the seconds
// until it is full again.
var (
	hdrLimit     = []byte("RateLimit-Limit")
	hdrRemaining = []byte("RateLimit-Remaining")
	hdrReset     = []byte("RateLimit-Reset")
)

// errLimited is the 429 of an empty bucket, in the OpenAI SDKs' shape (they retry a 429
// after its Retry-After) or Anthropic's on /v1/messages.
var errLimited = consumer.NewAnswer(429, "rate_limit_error", "rate_limit_error", "rate_limit_exceeded",
	"too many requests: this client's rate limit is used up; retry after the time given in Retry-After")

// OnRequest implements pipeline.RequestStage: the request takes a token of its key's bucket
// or is answered 429 with Retry-After (seconds until a token is back). Both get the
// RateLimit-* fields. It allocates nothing for a key already tracked.
func (s *Stage) OnRequest(rc *pipeline.RequestCtx) error {
	var name [128]byte // consumer names are at most 128 bytes: the key stays on the stack
	d := s.l.Take(s.key(rc, name[:0]))
	var num [20]byte
	rc.AddResponseHeader(hdrLimit, s.limit)
	rc.AddResponseHeader(hdrRemaining, strconv.AppendInt(num[:0], d.Remaining, 10))
	rc.AddResponseHeader(hdrReset, strconv.AppendInt(num[:0], seconds(d.Reset), 10))
	if d.Allowed {
		return nil
	}
	s.m.Limited()
	r := errLimited.Reply(rc)
	r.RetryAfter = int(max(seconds(d.RetryAfter), 1))
	return r
}

// key returns the request's key and its kind's tag: the consumer's name (appended to buf),
// the header's value or the client's network (appended to buf: the address, behind a trusted
// proxy the one it forwarded, RequestCtx.ClientAddr, cut to the configured prefix length). A
// request without a consumer, or without the header or with an empty one, is counted by its
// client's network: an empty value names nobody; counted under it, every client that sends
// one would share a bucket, and left unlimited, anyone could lift the limit by sending one.
func (s *Stage) key(rc *pipeline.RequestCtx, buf []byte) (byte, []byte) {
	switch s.by {
	case byConsumer:
		if c := consumer.From(rc); c != nil {
			return tagConsumer, append(buf, c.Name...)
		}
	case bySubject:
		if sub := consumer.Subject(rc); sub != "" {
			return tagSubject, append(buf, sub...)
		}
	case byHeader:
		if v, _ := rc.Req.HeaderValue(s.header); len(v) > 0 {
			return tagHeader, v
		}
	}
	return tagIP, appendNetworkKey(buf, rc.ClientAddr(), s.v4, s.v6)
}

// seconds rounds d up to whole seconds: a client that waits that long finds what was
// announced.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
