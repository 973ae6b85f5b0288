package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// jwksServer serves one ES256 key's JWK Set on loopback and counts its fetches.
type jwksServer struct {
	url     string
	key     *ecdsa.PrivateKey
	fetches atomic.Int64
	srv     *http.Server
}

func startJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &jwksServer{url: "http://" + ln.Addr().String() + "/jwks.json", key: key}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(set)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *jwksServer) token(t *testing.T) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "team-a", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(s.key)
	require.NoError(t, err)
	return signed
}

func jwksConfig(up, jwksURL, extraRouter string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/v1`"+`)"
service = "up"
middlewares = ["auth"]
%s
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.auth]
type = "jwt"
jwks_url = %q
jwks_refresh = "1h"
`, extraRouter, up, jwksURL)
}

// A reload that keeps a jwt middleware's jwks_url keeps the key set in hand: it neither
// fetches it again nor depends on the identity provider being up, so an outage of the
// provider does not refuse a reload that changes something else. A new jwks_url is fetched,
// and refused when it cannot be.
func TestReloadKeepsTheKeySetOfAnUnchangedJWKSURL(t *testing.T) {
	idp := startJWKSServer(t)
	up := serveCounting(t)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, base := startHealthGateway(t, path, jwksConfig(up.addr(), idp.url, ""))
	bearer := []string{"Authorization", "Bearer " + idp.token(t)}
	require.Equal(t, 200, get(t, base+"/v1/models", bearer...).StatusCode)
	require.Equal(t, int64(1), idp.fetches.Load())

	// The identity provider goes away; the operator adds a router.
	require.NoError(t, idp.srv.Close())
	extra := `
[routers.more]
rule = "PathPrefix(` + "`/more`" + `)"
service = "up"
middlewares = ["auth"]
`
	require.NoError(t, os.WriteFile(path, []byte(jwksConfig(up.addr(), idp.url, extra)), 0o644))
	require.NoError(t, g.Reload(), "the key set in hand serves the new configuration")
	require.Equal(t, 200, get(t, base+"/more", bearer...).StatusCode, "the new router verifies with the keys in hand")
	require.Equal(t, 200, get(t, base+"/v1/models", bearer...).StatusCode)
	require.Equal(t, int64(1), idp.fetches.Load(), "nothing fetched again")

	// A jwks_url the gateway has no keys of must be fetched: unreachable, it is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/jwks.json"
	require.NoError(t, ln.Close())
	require.NoError(t, os.WriteFile(path, []byte(jwksConfig(up.addr(), dead, extra)), 0o644))
	err = g.Reload()
	require.Error(t, err)
	require.Contains(t, err.Error(), "jwks_url")
	require.Equal(t, 200, get(t, base+"/more", bearer...).StatusCode, "the running configuration stays in force")
}
