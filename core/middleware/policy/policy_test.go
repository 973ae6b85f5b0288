package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
)

// corsUpstream answers 200 with CORS fields of its own, which the gateway must replace.
func corsUpstream(string) string {
	return "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: https://evil.example\r\nX-Up: 1\r\nContent-Length: 2\r\n\r\n{}"
}

func TestHeadersEditsBothSides(t *testing.T) {
	up := mwtest.NewUpstream(t, func(string) string {
		return "HTTP/1.1 200 OK\r\nServer: secret/1.0\r\nX-Version: old\r\nContent-Length: 2\r\n\r\n{}"
	})
	h := mwtest.New(t, []any{NewHeaders(config.HeadersOptions{
		RequestSet:     []config.HeaderPair{{Name: "X-Env", Value: "prod"}},
		RequestRemove:  []string{"Cookie"},
		ResponseSet:    []config.HeaderPair{{Name: "X-Version", Value: "2"}},
		ResponseRemove: []string{"Server"},
	})}, up.Addr())
	r := h.Do(t, "192.0.2.1", "GET /x HTTP/1.1\r\nHost: gw\r\nCookie: a=b\r\nX-Env: dev", "")
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Header.Values("Server"), "removed from the response")
	require.Equal(t, []string{"2"}, r.Header.Values("X-Version"), "replaced, not added beside the upstream's")
	head := up.Heads()[0]
	require.NotContains(t, head, "Cookie")
	require.Contains(t, head, "X-Env: prod\r\n")
	require.NotContains(t, head, "dev", "the client's X-Env is replaced")
}

func TestStripPrefixAtSegmentBoundaries(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{NewStripPrefix(config.StripPrefixOptions{Prefixes: []string{"/ollama/", "/api"}})}, up.Addr())
	for _, c := range []struct{ in, out, prefix string }{
		{"/api/v1/models?x=1", "/v1/models?x=1", "/api"},
		{"/api", "/", "/api"},
		{"/api?q", "/?q", "/api"},
		{"/apix/v1", "/apix/v1", ""},
		{"/ollama/api/version", "/api/version", "/ollama"},
		{"/other", "/other", ""},
	} {
		n := up.Count()
		r := h.Do(t, "192.0.2.1", "GET "+c.in+" HTTP/1.1\r\nHost: gw\r\nX-Forwarded-Prefix: /forged", "")
		require.Equal(t, 200, r.Status)
		head := up.Heads()[n]
		require.True(t, strings.HasPrefix(head, "GET "+c.out+"\r\n"), "%s: upstream saw %q", c.in, strings.SplitN(head, "\r\n", 2)[0])
		if c.prefix != "" {
			require.Contains(t, head, "X-Forwarded-Prefix: "+c.prefix+"\r\n", c.in)
		}
		require.NotContains(t, head, "/forged", "an untrusted client's X-Forwarded-Prefix never passes")
	}
}

func TestIPAllowByClientAddress(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{NewIPAllow(config.IPAllowOptions{SourceRange: []netip.Prefix{
		netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32"),
	}})}, up.Addr())
	h.EP.TrustedIPs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	const get = "GET / HTTP/1.1\r\nHost: gw"
	require.Equal(t, 200, h.Do(t, "192.0.2.9", get, "").Status)
	require.Equal(t, 200, h.Do(t, "2001:db8::1", get, "").Status)
	r := h.Do(t, "198.51.100.1", get, "")
	require.Equal(t, 403, r.Status)
	require.JSONEq(t, `{"error":{"message":"the client address is not allowed on this route","type":"permission_error","param":null,"code":"ip_not_allowed"}}`, r.Body)
	require.Equal(t, 403, h.Do(t, "198.51.100.1", get+"\r\nX-Forwarded-For: 192.0.2.9", "").Status, "an untrusted peer's claim is not believed")
	require.Equal(t, 200, h.Do(t, "10.0.0.1", get+"\r\nX-Forwarded-For: 192.0.2.9", "").Status, "a trusted proxy's is")
	require.Equal(t, 403, h.Do(t, "10.0.0.1", get+"\r\nX-Forwarded-For: 192.0.2.9, 198.51.100.1", "").Status, "the rightmost untrusted hop counts")
	require.Equal(t, 3, up.Count(), "refused requests never reached the upstream")
}

func TestBodyLimit(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{NewBodyLimit(config.BodyLimitOptions{MaxBytes: 8})}, up.Addr())
	require.Equal(t, 200, h.Do(t, "192.0.2.1", "POST / HTTP/1.1\r\nHost: gw", "12345678").Status)
	r := h.Do(t, "192.0.2.1", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw", "123456789")
	require.Equal(t, 413, r.Status)
	require.JSONEq(t, `{"error":{"message":"the request body is larger than this route accepts (body-limit max_bytes = 8 bytes)","type":"invalid_request_error","param":null,"code":"body_too_large"}}`, r.Body)
	// A body the engine did not read, refused by the length its head declares.
	r = h.Do(t, "192.0.2.1", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 9", "")
	require.Equal(t, 413, r.Status)
	require.Equal(t, 1, up.Count())
	require.Equal(t, int64(8), NewBodyLimit(config.BodyLimitOptions{MaxBytes: 8}).MaxBodyBytes())
}

func TestCORS(t *testing.T) {
	up := mwtest.NewUpstream(t, corsUpstream)
	h := mwtest.New(t, []any{NewCORS(config.CORSOptions{
		AllowOrigins: []string{"https://app.example"}, AllowMethods: []string{"GET", "POST"},
		AllowHeaders: []string{"Authorization", "Content-Type"}, ExposeHeaders: []string{"X-Request-Id"},
		AllowCredentials: true, MaxAge: 10 * time.Minute,
	})}, up.Addr())

	// Preflight from an allowed origin: answered by the gateway.
	r := h.Do(t, "192.0.2.1", "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization", "")
	require.Equal(t, 204, r.Status)
	require.Equal(t, "https://app.example", r.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "true", r.Header.Get("Access-Control-Allow-Credentials"))
	require.Equal(t, "GET, POST", r.Header.Get("Access-Control-Allow-Methods"))
	require.Equal(t, "Authorization, Content-Type", r.Header.Get("Access-Control-Allow-Headers"))
	require.Equal(t, "600", r.Header.Get("Access-Control-Max-Age"))
	require.Equal(t, "Origin", r.Header.Get("Vary"))
	require.Equal(t, 0, up.Count(), "a preflight never reaches the upstream")

	// Preflight from another origin: refused.
	r = h.Do(t, "192.0.2.1", "OPTIONS / HTTP/1.1\r\nHost: gw\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST", "")
	require.Equal(t, 403, r.Status)
	require.Empty(t, r.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, r.Body, `"code":"cors_origin_not_allowed"`)
	// On /v1/messages the refusal is in the Anthropic API's error shape, as every other.
	r = h.Do(t, "192.0.2.1", "OPTIONS /v1/messages HTTP/1.1\r\nHost: gw\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST", "")
	require.Equal(t, 403, r.Status)
	require.Contains(t, r.Body, `"type":"error"`)
	require.Contains(t, r.Body, `"type":"permission_error"`)

	// An actual request: the gateway's fields replace the upstream's.
	r = h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example", "")
	require.Equal(t, 200, r.Status)
	require.Equal(t, []string{"https://app.example"}, r.Header.Values("Access-Control-Allow-Origin"))
	require.Equal(t, "X-Request-Id", r.Header.Get("Access-Control-Expose-Headers"))
	require.Equal(t, "1", r.Header.Get("X-Up"))

	// From another origin: no CORS fields at all (the browser keeps the response from the
	// script), the upstream's removed too.
	r = h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw\r\nOrigin: https://evil.example", "")
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Header.Values("Access-Control-Allow-Origin"))

	// Without Origin it is not a CORS request: no CORS fields, but the answer varies by
	// Origin all the same.
	r = h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw", "")
	require.Equal(t, "Origin", r.Header.Get("Vary"))
	require.Empty(t, r.Header.Values("Access-Control-Allow-Origin"))
}

// A later stage's refusal keeps the CORS fields, so that the browser lets the script read it.
func TestCORSOnGatewayRefusals(t *testing.T) {
	h := mwtest.New(t, []any{
		NewCORS(config.CORSOptions{AllowOrigins: []string{"*"}, MaxAge: time.Minute}),
		NewBodyLimit(config.BodyLimitOptions{MaxBytes: 1}),
	})
	r := h.Do(t, "192.0.2.1", "POST / HTTP/1.1\r\nHost: gw\r\nOrigin: https://any.example", "too long")
	require.Equal(t, 413, r.Status)
	require.Equal(t, "*", r.Header.Get("Access-Control-Allow-Origin"))
}

// Whether an answer carries CORS fields depends on Origin, so every answer of a cors route
// says so, also one to a request without Origin (Fetch standard §3.2.5, "CORS protocol and
// HTTP caches"): a cache that kept such an answer without Vary: Origin would hand it, without
// Access-Control-Allow-Origin, to a script's request for the same URL, which the browser
// then refuses. Answers of the gateway itself (a later stage's 413) vary alike.
func TestCORSAnswersVaryByOriginWithoutOriginToo(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	for _, origins := range [][]string{{"https://app.example"}, {"*"}} {
		h := mwtest.New(t, []any{
			NewCORS(config.CORSOptions{AllowOrigins: origins, MaxAge: time.Minute}),
			NewBodyLimit(config.BodyLimitOptions{MaxBytes: 4}),
		}, up.Addr())
		for _, head := range []string{
			"GET /v1/models HTTP/1.1\r\nHost: gw",
			"GET /v1/models HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example",
			"GET /v1/models HTTP/1.1\r\nHost: gw\r\nOrigin: https://other.example",
		} {
			for _, body := range []string{"", "too long"} {
				r := h.Do(t, "192.0.2.1", head, body)
				require.Equal(t, []string{"Origin"}, r.Header.Values("Vary"), "%v %q body %q", origins, head, body)
			}
		}
	}
}

// A field the headers middleware removes or sets goes in every spelling with '_' for '-' the
// client wrote: CGI-style servers (PHP, WSGI, Rack) read X_Env and X-Env as one variable
// (HTTP_X_ENV), so a client's X_Env would stand beside the value the route sets, or carry a
// field the route removes past it.
func TestHeadersRemoveTheClientsUnderscoreSpellings(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{NewHeaders(config.HeadersOptions{
		RequestSet:    []config.HeaderPair{{Name: "X-Env", Value: "prod"}},
		RequestRemove: []string{"X-Debug-Mode"},
	})}, up.Addr())
	r := h.Do(t, "192.0.2.1", "GET /x HTTP/1.1\r\nHost: gw\r\nX_Env: dev\r\nx-env: dev2\r\nX_Debug_Mode: dbg-1\r\nX-Debug_Mode: dbg-2\r\nX_Other: kept", "")
	require.Equal(t, 200, r.Status)
	head := up.Heads()[0]
	require.Contains(t, head, "X-Env: prod\r\n")
	require.NotContains(t, head, "dev", "no spelling of a field the route sets passes")
	require.NotContains(t, head, "dbg-", "no spelling of a field the route removes passes")
	require.Contains(t, head, "X_other: kept\r\n", "other fields with '_' pass")
}
