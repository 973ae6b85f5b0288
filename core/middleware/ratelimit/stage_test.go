package ratelimit

import (
	"crypto/sha256"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/middleware/jwtauth"
	"github.com/sluice-gw/sluice/core/pipeline"
)

func opts(rate float64, burst int, key string) config.RateLimitOptions {
	o := config.RateLimitOptions{Rate: rate, Burst: burst, Key: key, MaxKeys: 1024}
	if h, ok := strings.CutPrefix(key, config.RateLimitKeyHeader); ok {
		o.Header = h
	}
	return o
}

func TestStageAnswers429WithRetryAfterAndRateLimitFields(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	s := New("per-client", opts(60, 2, config.RateLimitKeyClientIP), nil)
	clk := &fakeClock{}
	s.l.now = clk.now
	h := mwtest.New(t, []any{s}, up.Addr())
	const get = "GET /v1/models HTTP/1.1\r\nHost: gw"

	r := h.Do(t, "192.0.2.1", get, "")
	require.Equal(t, 200, r.Status)
	require.Equal(t, "2", r.Header.Get("RateLimit-Limit"))
	require.Equal(t, "1", r.Header.Get("RateLimit-Remaining"))
	require.Equal(t, "1", r.Header.Get("RateLimit-Reset"))
	require.Empty(t, r.Header.Get("Retry-After"))

	r = h.Do(t, "192.0.2.1", get, "")
	require.Equal(t, 200, r.Status)
	require.Equal(t, "0", r.Header.Get("RateLimit-Remaining"))
	require.Equal(t, "2", r.Header.Get("RateLimit-Reset"))

	clk.advance(300 * time.Millisecond)
	r = h.Do(t, "192.0.2.1", get, "")
	require.Equal(t, 429, r.Status)
	require.Equal(t, "1", r.Header.Get("Retry-After"), "0.7 s until a token, rounded up")
	require.Equal(t, "2", r.Header.Get("RateLimit-Limit"))
	require.Equal(t, "0", r.Header.Get("RateLimit-Remaining"))
	require.Equal(t, "2", r.Header.Get("RateLimit-Reset"), "1.7 s until the bucket is full")
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	var body struct {
		Error struct{ Type, Code string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.Body), &body))
	require.Equal(t, "rate_limit_error", body.Error.Type)
	require.Equal(t, "rate_limit_exceeded", body.Error.Code)
	require.Equal(t, 2, up.Count(), "the refused request never reached the upstream")

	r = h.Do(t, "192.0.2.2", get, "")
	require.Equal(t, 200, r.Status, "another client has its own bucket")

	// Anthropic's clients get Anthropic's error shape.
	r = h.Do(t, "192.0.2.1", "POST /v1/messages HTTP/1.1\r\nHost: gw", "{}")
	require.Equal(t, 429, r.Status)
	require.JSONEq(t, `{"type":"error","error":{"type":"rate_limit_error","message":"too many requests: this client's rate limit is used up; retry after the time given in Retry-After"}}`, r.Body)
}

// key = "header:<Name>" counts by the field's value; requests without it by client address.
func TestStageKeysByHeader(t *testing.T) {
	s := New("per-tenant", opts(1, 1, "header:X-Tenant"), nil)
	h := mwtest.New(t, []any{s}) // no upstream: admitted requests get 503 no_backend
	do := func(peer, tenant string) int {
		head := "GET / HTTP/1.1\r\nHost: gw"
		if tenant != "" {
			head += "\r\nX-Tenant: " + tenant
		}
		return h.Do(t, peer, head, "").Status
	}
	require.Equal(t, 503, do("192.0.2.1", "a"))
	require.Equal(t, 429, do("192.0.2.2", "a"), "same tenant from another address")
	require.Equal(t, 503, do("192.0.2.1", "b"))
	require.Equal(t, 503, do("192.0.2.1", ""), "no header: the address's own bucket")
	require.Equal(t, 429, do("192.0.2.1", ""))
	require.Equal(t, 503, do("192.0.2.3", ""))
}

// key = "api_key" counts by the consumer authenticated before the stage, whatever address
// its requests come from.
func TestStageKeysByConsumer(t *testing.T) {
	keyA, keyB := "sk-a-0123456789", "sk-b-0123456789"
	reg := consumer.NewRegistry(map[string]*config.Consumer{
		"team-a": {KeyDigests: [][sha256.Size]byte{sha256.Sum256([]byte(keyA))}},
		"team-b": {KeyDigests: [][sha256.Size]byte{sha256.Sum256([]byte(keyB))}},
	})
	s := New("per-consumer", opts(1, 1, config.RateLimitKeyAPIKey), nil)
	h := mwtest.New(t, []any{consumer.NewAPIKey(reg, ""), s})
	do := func(peer, key string) int {
		return h.Do(t, peer, "GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+key, "").Status
	}
	require.Equal(t, 503, do("192.0.2.1", keyA))
	require.Equal(t, 429, do("192.0.2.2", keyA))
	require.Equal(t, 503, do("192.0.2.1", keyB))
	require.Equal(t, 401, do("192.0.2.1", "nope"), "the api-key middleware refuses first")
}

// A reload that keeps a middleware's options keeps its buckets; one that changes its limits
// over the same keys carries what each key spent into buckets of the new size; one that
// changes what it counts by starts afresh.
func TestStageKeepsBucketsAcrossAnUnchangedReload(t *testing.T) {
	o := opts(1, 1, config.RateLimitKeyClientIP)
	first := New("rl", o, nil)
	clk := &fakeClock{}
	first.l.now = clk.now
	require.Same(t, first.Limiter(), New("rl", o, first).Limiter())
	key := []byte{192, 0, 2, 1}
	require.True(t, first.l.Take(tagIP, key).Allowed)

	o.Burst = 2
	wider := New("rl", o, first)
	require.NotSame(t, first.Limiter(), wider.Limiter())
	d := wider.l.Take(tagIP, key)
	require.True(t, d.Allowed, "the token the wider bucket adds")
	require.False(t, wider.l.Take(tagIP, key).Allowed, "the token spent before the reload stays spent")

	o.Header, o.Key = "X-Tenant", config.RateLimitKeyHeader+"X-Tenant"
	byHeader := New("rl", o, wider)
	require.True(t, byHeader.l.Take(tagIP, key).Allowed, "other keys: every bucket starts full")
}

// Carried over, a key keeps the tokens it spent, not the time they take to come back: under a
// slower rate they come back at that rate. A long key, tracked by its hash, keeps its bucket,
// and a limiter with room for fewer keys keeps as many as it holds.
func TestCarryOverKeepsTheTokensEachKeySpent(t *testing.T) {
	prev, clk := newTestLimiter(60, 4, 1024) // a token a second
	short, long := []byte("10.0.0.1"), []byte(strings.Repeat("t", 3*maxKeyLen))
	for range 3 {
		require.True(t, prev.Take(tagHeader, short).Allowed)
		require.True(t, prev.Take(tagHeader, long).Allowed)
	}
	clk.advance(500 * time.Millisecond) // half a token back: 2.5 spent

	next := NewLimiter(30, 4, 1024) // a token every two seconds
	next.CarryOver(prev)
	d := next.Take(tagHeader, short)
	require.True(t, d.Allowed)
	require.Equal(t, int64(0), d.Remaining, "1.5 of 4 left before this one")
	require.Equal(t, 7*time.Second, d.Reset, "3.5 tokens spent, two seconds each")
	d = next.Take(tagHeader, long)
	require.True(t, d.Allowed, "the long key's bucket, found by its hash")
	require.Equal(t, 7*time.Second, d.Reset)
	require.False(t, next.Take(tagHeader, long).Allowed)

	one := NewLimiter(60, 1, 1024)
	one.CarryOver(prev)
	require.False(t, one.Take(tagHeader, short).Allowed, "2.5 spent of a bucket of one")

	for i := range 200 {
		require.True(t, prev.Take(tagIP, []byte{10, 1, byte(i >> 8), byte(i)}).Allowed)
	}
	small := NewLimiter(30, 1, 64)
	small.CarryOver(prev)
	require.Equal(t, small.MaxKeys(), small.Len(), "as many keys as it holds, no more")
}

// answer200 answers every request that reaches it: the benchmark measures the rate limit
// stage and the pipeline around it, without an upstream.
type answer200 struct{}

func (answer200) OnRequest(rc *pipeline.RequestCtx) error {
	return rc.Reply(200, "text/plain", nil)
}

// BenchmarkStage is one request through the pipeline with the rate-limit stage (key
// client_ip, a tracked key, from an IPv4 and from an IPv6 client) and a stage that answers
// 200: routing, the stage with its three RateLimit-* fields, and Finish. "baseline" is the
// same pipeline without the rate limit.
func BenchmarkStage(b *testing.B) {
	s := New("bench", opts(6e7, 1000, config.RateLimitKeyClientIP), nil)
	clk := &fakeClock{}
	s.l.now = clk.now // a token a microsecond, and a microsecond passes per request
	for _, bc := range []struct {
		name   string
		client string
		stages []any
	}{
		{"baseline", "192.0.2.33", []any{answer200{}}},
		{"rate-limit", "192.0.2.33", []any{s, answer200{}}},
		{"rate-limit-ipv6", "2001:db8:4006:812::200e", []any{s, answer200{}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := mwtest.New(b, bc.stages)
			var rc pipeline.RequestCtx
			rc.SetClientAddr(netip.MustParseAddr(bc.client))
			if err := rc.Req.ParseRequestHead([]byte("GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"), nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				clk.advance(time.Microsecond)
				h.EP.Begin(&rc)
				if rc.Status() != 200 {
					b.Fatal(rc.Status())
				}
				rc.Finish()
			}
		})
	}
}

// Behind a trusted proxy every request arrives from the proxy's address: the bucket is the
// client's that the proxy forwarded, and a client cannot pick its bucket by sending an
// X-Forwarded-For of its own (the proxy appends the address it saw, which is what counts).
func TestStageKeysByForwardedClientBehindATrustedProxy(t *testing.T) {
	s := New("per-client", opts(1, 1, config.RateLimitKeyClientIP), nil)
	h := mwtest.New(t, []any{s})
	h.EP.TrustedIPs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	do := func(peer, xff string) int {
		head := "GET / HTTP/1.1\r\nHost: gw"
		if xff != "" {
			head += "\r\nX-Forwarded-For: " + xff
		}
		return h.Do(t, peer, head, "").Status
	}
	const proxy = "10.0.0.5"
	require.Equal(t, 503, do(proxy, "198.51.100.1"), "first request of client .1")
	require.Equal(t, 429, do(proxy, "198.51.100.1"), "client .1's bucket is empty")
	require.Equal(t, 503, do(proxy, "198.51.100.2"), "client .2 has its own bucket behind the same proxy")
	require.Equal(t, 429, do(proxy, "203.0.113.9, 198.51.100.1"), "a forged left element does not change the bucket")
	require.Equal(t, 429, do(proxy, "198.51.100.2:4711, 10.1.1.1"), "trusted hops are skipped, a port is ignored")
	require.Equal(t, 503, do("192.0.2.77", "198.51.100.3"), "an untrusted peer is counted by its own address")
	require.Equal(t, 429, do("192.0.2.77", "198.51.100.4"), "whatever it claims")
}

// key = "jwt_subject" counts by the verified token's subject: two subjects from one address
// have their own buckets.
func TestStageKeysByJWTSubject(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	jwtStage, err := jwtauth.New(config.JWTOptions{Secret: key, Leeway: time.Minute, Claim: "sub"}, nil)
	require.NoError(t, err)
	s := New("per-subject", opts(1, 1, config.RateLimitKeyJWTSubject), nil)
	h := mwtest.New(t, []any{jwtStage, s})
	do := func(sub string) int {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(key))
		require.NoError(t, err)
		return h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+tok, "").Status
	}
	require.Equal(t, 503, do("alice"))
	require.Equal(t, 429, do("alice"))
	require.Equal(t, 503, do("bob"), "another subject, same address: its own bucket")
}
