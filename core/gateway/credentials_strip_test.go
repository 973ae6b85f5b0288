package gateway_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A router that authenticates callers without forward_credentials sends the upstream none of
// the fields a credential comes in, in any spelling with '_' for '-': PHP, WSGI and Rack read
// X_Api_Key as X-Api-Key (HTTP_X_API_KEY), so a client could otherwise hand the upstream a key
// of its choosing beside the one the gateway checked. With forward_credentials the key the
// gateway checked goes upstream, and still none spelt with '_'.
func TestAuthenticatedRouteSendsNoCredentialFieldInAnySpelling(t *testing.T) {
	up, heads := recordHeads(t)
	sum := sha256.Sum256([]byte("sk-team-a"))
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			g := runGateway(t, "creds.toml", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.pair]
rule = "PathPrefix(`+"`/pair`"+`)"
service = "up"
middlewares = ["key"]
[routers.own]
rule = "PathPrefix(`+"`/own`"+`)"
service = "up"
middlewares = ["own-key"]
[routers.pair-fwd]
rule = "PathPrefix(`+"`/fwd/pair`"+`)"
service = "up"
middlewares = ["key"]
forward_credentials = true
[routers.own-fwd]
rule = "PathPrefix(`+"`/fwd/own`"+`)"
service = "up"
middlewares = ["own-key"]
forward_credentials = true
[middlewares.key]
type = "api-key"
[middlewares.own-key]
type = "api-key"
header = "X-My-Key"
[consumers.team-a]
api_key_sha256 = ["%s"]
[admin]
address = ""
`, engineTOML(engine), up.addr(), hex.EncodeToString(sum[:])))
			for _, tc := range []struct {
				path, fields, forwarded string
			}{
				{"/pair", "Authorization: Bearer sk-team-a\r\nX_Api_Key: sk-forged\r\n", ""},
				{"/pair", "X-Api-Key: sk-team-a\r\nX_API_KEY: sk-forged\r\n", ""},
				{"/own", "X-My-Key: sk-team-a\r\nX_My_Key: sk-forged\r\nx-my_key: sk-forged\r\n", ""},
				{"/fwd/pair", "Authorization: Bearer sk-team-a\r\nX_Api_Key: sk-forged\r\n", "Authorization: Bearer sk-team-a\r\n"},
				{"/fwd/pair", "x-api-key: sk-team-a\r\nX_Api_Key: sk-forged\r\n", "x-api-key: sk-team-a\r\n"},
				{"/fwd/own", "X-My-Key: sk-team-a\r\nX_My_Key: sk-forged\r\n", "X-My-Key: sk-team-a\r\n"},
			} {
				c := dial(t, g.Addr("web"))
				send(t, c, "GET "+tc.path+" HTTP/1.1\r\nHost: gw\r\n"+tc.fields+"Connection: close\r\n\r\n")
				require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status, tc.fields)
				c.Close()
				head := <-heads
				require.NotContains(t, head, "sk-forged", "%s: the upstream got\n%s", tc.fields, head)
				if tc.forwarded == "" {
					require.NotContains(t, head, "sk-team-a", tc.fields)
				} else {
					require.Contains(t, head, "\r\n"+tc.forwarded, "forward_credentials")
				}
			}
		})
	}
}

// An api-key middleware whose header is itself spelt with '_' (X_My_Key) reads the key from
// that spelling alone: with forward_credentials the key it checked goes upstream, while the
// field spelt with '-' (X-My-Key), which CGI-style upstreams read as the same variable but
// the gateway did not check, does not.
func TestAuthenticatedRouteForwardsOnlyTheSpellingItChecked(t *testing.T) {
	up, heads := recordHeads(t)
	sum := sha256.Sum256([]byte("sk-team-a"))
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			g := runGateway(t, "creds.toml", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.own]
rule = "PathPrefix(`+"`/own`"+`)"
service = "up"
middlewares = ["own-key"]
[routers.own-fwd]
rule = "PathPrefix(`+"`/fwd/own`"+`)"
service = "up"
middlewares = ["own-key"]
forward_credentials = true
[middlewares.own-key]
type = "api-key"
header = "X_My_Key"
[consumers.team-a]
api_key_sha256 = ["%s"]
[admin]
address = ""
`, engineTOML(engine), up.addr(), hex.EncodeToString(sum[:])))
			for _, tc := range []struct {
				path, fields, forwarded string
			}{
				{"/own", "X_My_Key: sk-team-a\r\nX-My-Key: sk-forged\r\n", ""},
				{"/fwd/own", "X_My_Key: sk-team-a\r\nX-My-Key: sk-forged\r\n", "X_My_Key: sk-team-a\r\n"},
				{"/fwd/own", "x_my_key: sk-team-a\r\nX-MY_KEY: sk-forged\r\n", "x_my_key: sk-team-a\r\n"},
			} {
				c := dial(t, g.Addr("web"))
				send(t, c, "GET "+tc.path+" HTTP/1.1\r\nHost: gw\r\n"+tc.fields+"Connection: close\r\n\r\n")
				require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status, tc.fields)
				c.Close()
				head := <-heads
				require.NotContains(t, head, "sk-forged", "%s: the upstream got\n%s", tc.fields, head)
				if tc.forwarded == "" {
					require.NotContains(t, head, "sk-team-a", tc.fields)
				} else {
					require.Contains(t, head, "\r\n"+tc.forwarded, "forward_credentials: the upstream got\n%s", head)
				}
			}
		})
	}
}
