package config

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Keys of a rate-limit middleware: what its requests are counted by.
const (
	// RateLimitKeyClientIP counts by the client's address: the peer, or behind a peer in the
	// entrypoint's trusted_ips the address that peer forwarded in X-Forwarded-For, cut to
	// its network (RateLimitOptions.IPv6PrefixLen, IPv4PrefixLen).
	RateLimitKeyClientIP = "client_ip"
	// RateLimitKeyAPIKey counts by the consumer an api-key (or jwt) middleware before it
	// authenticated.
	RateLimitKeyAPIKey = "api_key"
	// RateLimitKeyJWTSubject counts by the subject (sub) of the token a jwt middleware before
	// it verified.
	RateLimitKeyJWTSubject = "jwt_subject"
	// RateLimitKeyHeader prefixes a header field name: "header:X-Tenant" counts by its value.
	RateLimitKeyHeader = "header:"
)

// Defaults and bounds of the rate-limit, circuit-breaker and jwt middlewares' options.
const (
	DefaultRateLimitBurst   = 1
	DefaultRateLimitKey     = RateLimitKeyClientIP
	DefaultRateLimitMaxKeys = 65536
	MinRateLimitRate        = 0.01        // requests per minute: one every 100 minutes
	MaxRateLimitRate        = 100_000_000 // requests per minute: ≈1.7 million a second
	MaxRateLimitBurst       = 1_000_000
	MinRateLimitMaxKeys     = 64
	MaxRateLimitMaxKeys     = 1 << 24
	// DefaultRateLimitIPv6PrefixLen keys an IPv6 client by its /64: the least a home
	// connection, a mobile device or a cloud VM is given (RFC 6177, RFC 7934), from which it
	// may pick a fresh address per request.
	DefaultRateLimitIPv6PrefixLen = 64
	// DefaultRateLimitIPv4PrefixLen keys an IPv4 client by its whole address.
	DefaultRateLimitIPv4PrefixLen = 32

	DefaultFailureThreshold = 5
	DefaultSuccessThreshold = 1
	DefaultCooldown         = 30 * time.Second
	MaxBreakerThreshold     = 1000
	MinCooldown             = 100 * time.Millisecond
	MaxCooldown             = 24 * time.Hour

	DefaultJWTLeeway   = 30 * time.Second
	DefaultJWKSRefresh = 5 * time.Minute
	MinJWKSRefresh     = time.Second
	MaxJWKSRefresh     = 24 * time.Hour
	MaxJWTLeeway       = 10 * time.Minute
	DefaultJWTClaim    = "sub"
	// MinJWTSecretBytes is the shortest HMAC secret accepted: an HS256 key must be at least
	// as long as the hash's output (RFC 7518 §3.2).
	MinJWTSecretBytes = 32
)

// RateLimitOptions are the options of a rate-limit middleware, checked and defaulted by Load:
// a token bucket per key that holds Burst tokens and gains Rate tokens a minute.
type RateLimitOptions struct {
	// Rate is the sustained rate of each key, in requests per minute (rate). Required.
	Rate float64
	// Burst is the bucket's size: the requests a key may make at once after a quiet spell
	// (burst). Default 1.
	Burst int
	// Key is what requests are counted by (key): RateLimitKeyClientIP (the default),
	// RateLimitKeyAPIKey or RateLimitKeyHeader followed by a field name.
	Key string
	// Header is the field name of a "header:<Name>" key, "" for the other keys.
	Header string
	// MaxKeys bounds the keys tracked at once (max_keys). Default 65536.
	MaxKeys int
	// IPv6PrefixLen is the length in bits, 1–128, of the network an IPv6 client is counted
	// by (ipv6_prefix_len): the client address's first IPv6PrefixLen bits are its key.
	// Default 64.
	IPv6PrefixLen int
	// IPv4PrefixLen is the same for an IPv4 client (and an IPv4-mapped IPv6 address),
	// 1–32 (ipv4_prefix_len). Default 32: the address itself.
	IPv4PrefixLen int
}

// CircuitBreakerOptions are the options of a circuit-breaker middleware, checked and
// defaulted by Load.
type CircuitBreakerOptions struct {
	// FailureThreshold consecutive failures of a backend open its breaker
	// (failure_threshold). Default 5.
	FailureThreshold int
	// Cooldown is how long an open breaker keeps its backend out before one probe request
	// may try it (cooldown_secs). Default 30s.
	Cooldown time.Duration
	// SuccessThreshold consecutive successful probes close the breaker again
	// (success_threshold). Default 1.
	SuccessThreshold int
}

// JWTOptions are the options of a jwt middleware, checked and defaulted by Load. Exactly one
// of Secret, PublicKeyFile, JWKSFile and JWKSURL is set.
type JWTOptions struct {
	// Secret is the HMAC key of HS256, HS384 and HS512 tokens (value), at least
	// MinJWTSecretBytes long. Never print it.
	Secret string
	// PublicKeyFile is a PEM file holding the RSA, ECDSA or Ed25519 public key (or a
	// certificate) that verifies RS*, PS*, ES* or EdDSA tokens (public_key_file). The
	// runtime reads it when it compiles the configuration.
	PublicKeyFile string
	// Issuer, when set, must equal the token's iss (issuer).
	Issuer string
	// Audience, when set, lists the accepted audiences: the token's aud must name one
	// (audience).
	Audience []string
	// Leeway is the clock skew allowed on exp, nbf and iat (leeway). Default 30s.
	Leeway time.Duration
	// Claim names the claim that maps a token to a [consumers.<name>] (claim). Default "sub".
	Claim string
	// JWKSFile is a JSON Web Key Set file (jwks_file) whose keys, chosen by a token's kid,
	// verify RS*, PS*, ES* and EdDSA tokens; re-read by the first token verified once the
	// set is JWKSRefresh old.
	JWKSFile string
	// JWKSURL is the URL of an identity provider's JSON Web Key Set (jwks_url), fetched when
	// the configuration is compiled and cached, refreshed in the background by the first token
	// verified once the set is JWKSRefresh old, and when a token names an unknown kid.
	JWKSURL string
	// JWKSRefresh is how long a fetched key set is used before it is fetched again
	// (jwks_refresh). Default 5m.
	JWKSRefresh time.Duration
	// ForwardClaims send claims of a verified token upstream (forward_claims, a table of
	// claim = field name): HeaderPair.Name is the claim, Value the request field. The client's
	// fields of those names are always removed.
	ForwardClaims []HeaderPair
}

// knownOptions are the option keys of each middleware type, sorted.
var knownOptions = map[string][]string{
	MiddlewareAPIKey:         {"header"},
	MiddlewareRateLimit:      {"burst", "ipv4_prefix_len", "ipv6_prefix_len", "key", "max_keys", "rate"},
	MiddlewareCircuitBreaker: {"cooldown_secs", "failure_threshold", "success_threshold"},
	MiddlewareJWT:            {"audience", "claim", "forward_claims", "issuer", "jwks_file", "jwks_refresh", "jwks_url", "leeway", "public_key_file", "value"},
}

// MiddlewareOptionKeys returns the option keys a middleware of type typ takes besides type,
// sorted: those docs/config.md lists in the type's section. It returns nil for a type that is
// not known.
func MiddlewareOptionKeys(typ string) []string {
	return slices.Clone(knownOptions[typ])
}

// optionChecker reads the options of one middleware, reporting each problem at its key or
// value.
type optionChecker struct {
	c    *Config
	e    *errs
	name string
	m    *Middleware
}

func (o *optionChecker) path(k string) []string { return []string{"middlewares", o.name, k} }

// unknownKeys reports every option key the middleware's type does not have, with the known
// ones.
func (o *optionChecker) unknownKeys() {
	known := knownOptions[o.m.Type]
	for _, k := range sortedNames(o.m.Options) {
		if oneOf(k, known) {
			continue
		}
		hint := ""
		if s := nearestName(k, known); s != "" {
			hint = "did you mean " + strconv.Quote(s) + "? "
		}
		o.e.add(o.c.Pos(o.path(k)...), "middlewares.%s: unknown key %q for a %s middleware (%sknown keys: %s)", o.name, k, o.m.Type, hint, strings.Join(known, ", "))
	}
}

// value returns the option k and whether it was given and decoded. A value whose ${VAR} could
// not be expanded was reported already and counts as absent.
func (o *optionChecker) value(k string) (any, bool) {
	v, ok := o.m.Options[k]
	if !ok || o.e.reported(o.c.ValuePos(o.path(k)...)) {
		return nil, false
	}
	return v, true
}

func (o *optionChecker) typeError(k, want string, v any) {
	o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s must be %s, not %s", o.name, k, want, tomlType(v))
}

// integer reads option k as an integer in lo..hi; def when absent.
func (o *optionChecker) integer(k string, def, lo, hi int) int {
	v, ok := o.value(k)
	if !ok {
		return def
	}
	n, isInt := v.(int64)
	if !isInt {
		r := intRange{min: int64(lo), max: int64(hi)}
		// A compress middleware's min_size counts bytes too.
		if ex := r.example(v, isSizeKey(k) || k == "min_size"); ex != "" {
			o.typeError(k, r.want()+" such as "+ex, v)
		} else {
			o.typeError(k, r.want(), v)
		}
		return def
	}
	if n < int64(lo) || n > int64(hi) {
		o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s %d: want %d..%d", o.name, k, n, lo, hi)
		return def
	}
	return int(n)
}

// number reads option k as a number (integer or float) in lo..hi; def when absent.
func (o *optionChecker) number(k string, def, lo, hi float64) float64 {
	v, ok := o.value(k)
	if !ok {
		return def
	}
	var f float64
	switch n := v.(type) {
	case int64:
		f = float64(n)
	case float64:
		f = n
	default:
		o.typeError(k, "a number", v)
		return def
	}
	if math.IsNaN(f) || f < lo || f > hi {
		o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s %v: want %v..%v", o.name, k, f, lo, hi)
		return def
	}
	return f
}

// str reads option k as a non-empty string; def when absent.
func (o *optionChecker) str(k, def string) string {
	v, ok := o.value(k)
	if !ok {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		o.typeError(k, "a string", v)
		return def
	}
	if s == "" {
		instead := "write a value, or remove the key"
		if def != "" {
			instead += " for the default " + strconv.Quote(def)
		}
		o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s is empty: %s", o.name, k, instead)
		return def
	}
	return s
}

// duration reads option k as a Go duration string in lo..hi; def when absent.
func (o *optionChecker) duration(k string, def, lo, hi time.Duration) time.Duration {
	v, ok := o.value(k)
	if !ok {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		o.typeError(k, `a duration string such as "30s"`, v)
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		o.e.add(o.c.ValuePos(o.path(k)...), "middlewares.%s.%s: invalid duration %q (want %v to %v, such as \"30s\")", o.name, k, o.c.shown(s, o.path(k)...), lo, hi)
		return def
	}
	return d
}

// required reports option k missing.
func (o *optionChecker) required(k, hint string) {
	if _, ok := o.m.Options[k]; !ok {
		o.e.add(o.c.Pos("middlewares", o.name), "middlewares.%s.%s is required (%s)", o.name, k, hint)
	}
}

// validateRateLimitOptions checks a rate-limit middleware and fills m.RateLimit.
func (c *Config) validateRateLimitOptions(e *errs, name string, m *Middleware) {
	o := &optionChecker{c: c, e: e, name: name, m: m}
	o.unknownKeys()
	o.required("rate", "requests per minute, e.g. rate = 60")
	rl := &RateLimitOptions{
		Rate:    o.number("rate", 0, MinRateLimitRate, MaxRateLimitRate),
		Burst:   o.integer("burst", DefaultRateLimitBurst, 1, MaxRateLimitBurst),
		Key:     o.str("key", DefaultRateLimitKey),
		MaxKeys: o.integer("max_keys", DefaultRateLimitMaxKeys, MinRateLimitMaxKeys, MaxRateLimitMaxKeys),

		IPv6PrefixLen: o.integer("ipv6_prefix_len", DefaultRateLimitIPv6PrefixLen, 1, 128),
		IPv4PrefixLen: o.integer("ipv4_prefix_len", DefaultRateLimitIPv4PrefixLen, 1, 32),
	}
	switch h, isHeader := strings.CutPrefix(rl.Key, RateLimitKeyHeader); {
	case rl.Key == RateLimitKeyClientIP || rl.Key == RateLimitKeyAPIKey || rl.Key == RateLimitKeyJWTSubject:
	case isHeader && h != "" && len(h) <= maxAPIKeyHeaderNameLen && strings.IndexFunc(h, notTokenChar) < 0:
		rl.Header = h
	default:
		e.add(c.ValuePos(o.path("key")...), "middlewares.%s.key %q: want %q, %q, %q or \"header:<Name>\" (a header field name, e.g. \"header:X-Tenant\")%s", name, c.shown(rl.Key, o.path("key")...), RateLimitKeyClientIP, RateLimitKeyAPIKey, RateLimitKeyJWTSubject, meant(rl.Key, []string{RateLimitKeyClientIP, RateLimitKeyAPIKey, RateLimitKeyJWTSubject}))
		rl.Key = DefaultRateLimitKey
	}
	m.RateLimit = rl
}

// validateCircuitBreakerOptions checks a circuit-breaker middleware and fills
// m.CircuitBreaker.
func (c *Config) validateCircuitBreakerOptions(e *errs, name string, m *Middleware) {
	o := &optionChecker{c: c, e: e, name: name, m: m}
	o.unknownKeys()
	secs := o.number("cooldown_secs", DefaultCooldown.Seconds(), MinCooldown.Seconds(), MaxCooldown.Seconds())
	m.CircuitBreaker = &CircuitBreakerOptions{
		FailureThreshold: o.integer("failure_threshold", DefaultFailureThreshold, 1, MaxBreakerThreshold),
		Cooldown:         time.Duration(secs * float64(time.Second)).Round(time.Millisecond),
		SuccessThreshold: o.integer("success_threshold", DefaultSuccessThreshold, 1, MaxBreakerThreshold),
	}
}

// validateJWTOptions checks a jwt middleware and fills m.JWT. The public key file is read
// when the configuration is compiled, not here.
func (c *Config) validateJWTOptions(e *errs, name string, m *Middleware) {
	o := &optionChecker{c: c, e: e, name: name, m: m}
	o.unknownKeys()
	j := &JWTOptions{
		Secret:        o.str("value", ""),
		PublicKeyFile: o.str("public_key_file", ""),
		Issuer:        o.str("issuer", ""),
		Leeway:        o.duration("leeway", DefaultJWTLeeway, 0, MaxJWTLeeway),
		Claim:         o.str("claim", DefaultJWTClaim),
	}
	j.JWKSFile = o.str("jwks_file", "")
	j.JWKSURL = o.str("jwks_url", "")
	j.JWKSRefresh = o.duration("jwks_refresh", DefaultJWKSRefresh, MinJWKSRefresh, MaxJWKSRefresh)
	// A scheme is case-insensitive (RFC 3986 §3.1); http:// serves an identity provider on a
	// network the gateway trusts (docs/config.md).
	if u := strings.ToLower(j.JWKSURL); u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		e.add(c.ValuePos(o.path("jwks_url")...), "middlewares.%s.jwks_url %q: want an https:// URL (or http:// to a provider on a trusted network)", name, c.shownURL(j.JWKSURL, o.path("jwks_url")...))
	}
	if v, ok := o.value("forward_claims"); ok {
		t, isTable := v.(map[string]any)
		if !isTable {
			o.typeError("forward_claims", `a table of claim = "Field-Name", e.g. { sub = "X-User-Id" }`, v)
		}
		for _, claim := range sortedNames(t) {
			at := []string{"middlewares", name, "forward_claims", claim}
			h, isStr := t[claim].(string)
			switch {
			case !isStr || h == "" || len(h) > maxAPIKeyHeaderNameLen || strings.IndexFunc(h, notTokenChar) >= 0:
				e.add(c.ValuePos(at...), "middlewares.%s.forward_claims.%s: want a header field name such as \"X-User-Id\"", name, claim)
			case oneOf(strings.ToLower(h), framingFields) || strings.EqualFold(h, "Authorization"):
				e.add(c.ValuePos(at...), "middlewares.%s.forward_claims.%s: %q cannot carry a claim", name, claim, h)
			default:
				j.ForwardClaims = append(j.ForwardClaims, HeaderPair{Name: claim, Value: h})
			}
		}
	}
	var keySources []string
	for _, k := range []string{"value", "public_key_file", "jwks_file", "jwks_url"} {
		if _, ok := m.Options[k]; ok {
			keySources = append(keySources, k)
		}
	}
	hasValue := len(keySources) == 1 && keySources[0] == "value"
	switch {
	case len(keySources) > 1:
		e.add(c.Pos(o.path(keySources[1])...), "middlewares.%s: %s are exclusive (an HMAC secret, a public key, or a JWK Set)", name, strings.Join(keySources, ", "))
	case len(keySources) == 0:
		e.add(c.Pos("middlewares", name), "middlewares.%s: a jwt middleware needs value = \"${JWT_SECRET}\" (the HMAC secret of HS256 tokens), public_key_file = \"<PEM file>\" (RS256, ES256), jwks_file or jwks_url (a JWK Set)", name)
	case hasValue && j.Secret != "" && len(j.Secret) < MinJWTSecretBytes:
		// The length only: the value is a secret.
		e.add(c.ValuePos(o.path("value")...), "middlewares.%s.value: the HMAC secret is too short (%d bytes); want at least %d bytes (RFC 7518 §3.2), e.g. from openssl rand -base64 48", name, len(j.Secret), MinJWTSecretBytes)
	}
	if v, ok := o.value("audience"); ok {
		switch a := v.(type) {
		case string:
			j.Audience = []string{a}
		case []any:
			for i, x := range a {
				s, isStr := x.(string)
				if !isStr {
					ip := strconv.Itoa(i)
					e.add(c.ValuePos("middlewares", name, "audience", ip), "middlewares.%s.audience[%s] must be a string, not %s", name, ip, tomlType(x))
					continue
				}
				j.Audience = append(j.Audience, s)
			}
			if len(j.Audience) < len(a) {
				m.JWT = j
				j.Audience = nil
				return
			}
		default:
			o.typeError("audience", "a string or an array of strings", v)
		}
		if len(j.Audience) == 0 || oneOf("", j.Audience) {
			if !c.reportedAt(e, o.path("audience")...) {
				e.add(c.ValuePos(o.path("audience")...), "middlewares.%s.audience: want one or more non-empty audiences", name)
			}
			j.Audience = nil
		}
	}
	m.JWT = j
}

// validateMiddlewareOrder checks what a middleware needs of the ones before it in each router
// that lists it: a rate-limit middleware keyed by api_key counts the consumer an api-key or
// jwt middleware authenticated, so one must come first.
func (c *Config) validateMiddlewareOrder(e *errs) {
	for _, name := range sortedNames(c.Routers) {
		r := c.Routers[name]
		auth, jwtAuth := false, false
		for i, mw := range r.Middlewares {
			m := c.Middlewares[mw]
			if m == nil {
				continue
			}
			if m.Type == MiddlewareAPIKey || m.Type == MiddlewareJWT {
				auth = true
			}
			if m.Type == MiddlewareJWT {
				jwtAuth = true
			}
			if m.RateLimit != nil && m.RateLimit.Key == RateLimitKeyJWTSubject && !jwtAuth {
				e.add(c.ValuePos("routers", name, "middlewares", strconv.Itoa(i)), "routers.%s.middlewares: %q counts requests by token subject (key = %q): list a jwt middleware before it", name, c.shown(mw, "routers", name, "middlewares", strconv.Itoa(i)), RateLimitKeyJWTSubject)
			}
			if m.RateLimit != nil && m.RateLimit.Key == RateLimitKeyAPIKey && !auth {
				e.add(c.ValuePos("routers", name, "middlewares", strconv.Itoa(i)), "routers.%s.middlewares: %q counts requests by consumer (key = %q): list an api-key or jwt middleware before it", name, c.shown(mw, "routers", name, "middlewares", strconv.Itoa(i)), RateLimitKeyAPIKey)
			}
		}
	}
}
