package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMiddlewareOptionsAndDefaults(t *testing.T) {
	t.Setenv("SLUICE_T_JWT", strings.Repeat("j", 40))
	c := mustLoad(t, withMinimal(
		`[middlewares.rl]`,
		`type = "rate-limit"`,
		`rate = 60`,
		`[middlewares.per-key]`,
		`type = "rate-limit"`,
		`rate = 0.5`,
		`burst = 10`,
		`key = "api_key"`,
		`max_keys = 1000`,
		`[middlewares.per-tenant]`,
		`type = "rate-limit"`,
		`rate = 600`,
		`key = "header:X-Tenant"`,
		`[middlewares.per-net]`,
		`type = "rate-limit"`,
		`rate = 60`,
		`ipv6_prefix_len = 48`,
		`ipv4_prefix_len = 24`,
		`[middlewares.cb]`,
		`type = "circuit-breaker"`,
		`[middlewares.cb-fast]`,
		`type = "circuit-breaker"`,
		`failure_threshold = 3`,
		`cooldown_secs = 0.25`,
		`success_threshold = 2`,
		`[middlewares.auth]`,
		`type = "jwt"`,
		`value = "${SLUICE_T_JWT}"`,
		`[middlewares.rs]`,
		`type = "jwt"`,
		`public_key_file = "/etc/sluice/jwt.pem"`,
		`issuer = "https://idp.example"`,
		`audience = "sluice"`,
		`leeway = "0s"`,
		`claim = "client_id"`,
	))
	mw := c.Middlewares
	require.Equal(t, &RateLimitOptions{Rate: 60, Burst: 1, Key: "client_ip", MaxKeys: 65536, IPv6PrefixLen: 64, IPv4PrefixLen: 32}, mw["rl"].RateLimit)
	require.Equal(t, &RateLimitOptions{Rate: 0.5, Burst: 10, Key: "api_key", MaxKeys: 1000, IPv6PrefixLen: 64, IPv4PrefixLen: 32}, mw["per-key"].RateLimit)
	require.Equal(t, &RateLimitOptions{Rate: 600, Burst: 1, Key: "header:X-Tenant", Header: "X-Tenant", MaxKeys: 65536, IPv6PrefixLen: 64, IPv4PrefixLen: 32}, mw["per-tenant"].RateLimit)
	require.Equal(t, &RateLimitOptions{Rate: 60, Burst: 1, Key: "client_ip", MaxKeys: 65536, IPv6PrefixLen: 48, IPv4PrefixLen: 24}, mw["per-net"].RateLimit)
	require.Equal(t, &CircuitBreakerOptions{FailureThreshold: 5, Cooldown: 30 * time.Second, SuccessThreshold: 1}, mw["cb"].CircuitBreaker)
	require.Equal(t, &CircuitBreakerOptions{FailureThreshold: 3, Cooldown: 250 * time.Millisecond, SuccessThreshold: 2}, mw["cb-fast"].CircuitBreaker)
	require.Equal(t, &JWTOptions{Secret: strings.Repeat("j", 40), Leeway: 30 * time.Second, Claim: "sub", JWKSRefresh: DefaultJWKSRefresh}, mw["auth"].JWT)
	require.Equal(t, &JWTOptions{PublicKeyFile: "/etc/sluice/jwt.pem", Issuer: "https://idp.example", Audience: []string{"sluice"}, Claim: "client_id", JWKSRefresh: DefaultJWKSRefresh}, mw["rs"].JWT)
	require.Nil(t, mw["rl"].JWT)
	require.Nil(t, mw["auth"].RateLimit)
}
