package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPolicyMiddlewaresLoad(t *testing.T) {
	c, err := LoadBytes("t.toml", withMinimal(
		`[middlewares.h]`, `type = "headers"`, `request_set = { "X-Env" = "prod" }`, `response_remove = ["Server"]`,
		`[middlewares.s]`, `type = "strip-prefix"`, `prefixes = ["/api"]`,
		`[middlewares.c]`, `type = "cors"`, `allow_origins = ["https://app.example"]`,
		`[middlewares.i]`, `type = "ip-allow"`, `source_range = ["10.0.0.0/8", "192.0.2.7"]`,
		`[middlewares.b]`, `type = "body-limit"`, `max_bytes = 1024`,
	))
	require.NoError(t, err)
	require.Equal(t, []HeaderPair{{"X-Env", "prod"}}, c.Middlewares["h"].Headers.RequestSet)
	require.Equal(t, []string{"Server"}, c.Middlewares["h"].Headers.ResponseRemove)
	require.Equal(t, []string{"/api"}, c.Middlewares["s"].StripPrefix.Prefixes)
	co := c.Middlewares["c"].CORS
	require.Equal(t, DefaultCORSMethods, co.AllowMethods)
	require.Equal(t, DefaultCORSHeaders, co.AllowHeaders)
	require.Equal(t, DefaultCORSMaxAge, co.MaxAge)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}, c.Middlewares["i"].IPAllow.SourceRange)
	require.Equal(t, int64(1024), c.Middlewares["b"].BodyLimit.MaxBytes)
}

func TestPolicyMiddlewareErrors(t *testing.T) {
	_, err := LoadBytes("t.toml", withMinimal(
		`[middlewares.h]`, `type = "headers"`, `request_set = { "Host" = "x", "X-A" = "a\nb" }`,
		`[middlewares.s]`, `type = "strip-prefix"`, `prefixes = ["api"]`,
		`[middlewares.c]`, `type = "cors"`, `allow_origins = ["*", "https://app.example/path"]`, `allow_credentials = true`,
		`[middlewares.i]`, `type = "ip-allow"`, `source_range = ["10.0.0.0/33"]`,
		`[middlewares.b]`, `type = "body-limit"`, `max_byte = 1`,
		`[middlewares.e]`, `type = "headers"`,
	))
	require.Error(t, err)
	got := err.Error()
	for _, want := range []string{
		`middlewares.b: unknown key "max_byte" for a body-limit middleware (did you mean "max_bytes"? known keys: max_bytes)`,
		`middlewares.b.max_bytes is required`,
		`"*" cannot be combined with allow_credentials = true`,
		`allow_origins[1] "https://app.example/path": want an origin`,
		`middlewares.e: a headers middleware needs request_set`,
		`middlewares.h: "Host" frames or routes the message`,
		`middlewares.h.request_set.X-A: a field value has no CR, LF or NUL`,
		`middlewares.i.source_range[0] "10.0.0.0/33": prefix length "33"`,
		`middlewares.s.prefixes[0] "api": want a path prefix`,
	} {
		require.Contains(t, got, want)
	}
	for _, line := range strings.Split(got, "\n") {
		require.True(t, strings.HasPrefix(line, "t.toml:"), "every error has a position: %s", line)
	}
}
