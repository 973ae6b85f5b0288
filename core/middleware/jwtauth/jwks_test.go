package jwtauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
)

// jwkSet serializes the public halves of keys (by kid) as a JWK Set.
func jwkSet(t *testing.T, keys map[string]any) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for kid, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k, KeyID: kid, Use: "sig"})
	}
	b, err := json.Marshal(set)
	require.NoError(t, err)
	return b
}

func signKID(t *testing.T, m jwt.SigningMethod, key any, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims())
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// Keys from a JWK Set file are chosen by kid, each with its own algorithms: an ES256 token of
// the EC key and an RS256 token of the RSA key pass; a token with an unknown kid, one of the
// EC key's kid but signed RS256, and an HS256 token "signed" with nothing we hold are refused.
func TestJWKSFileChoosesTheKeyByKID(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(file, jwkSet(t, map[string]any{"ec1": &ec.PublicKey, "rs1": &rs.PublicKey}), 0o600))
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	s := newStage(t, config.JWTOptions{JWKSFile: file, JWKSRefresh: time.Hour, Leeway: time.Second, Claim: "sub"}, nil)
	h := mwtest.New(t, []any{s}, up.Addr())

	require.Equal(t, 200, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodES256, ec, "ec1")).status)
	require.Equal(t, 200, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodRS256, rs, "rs1")).status)
	require.Equal(t, 401, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodES256, ec, "nope")).status)
	require.Equal(t, 401, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodRS256, rs, "ec1")).status, "the EC key does not verify RS256")
	require.Equal(t, 401, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodES256, ec, "")).status, "without kid, a set of two keys names none")
	hs := signKID(t, jwt.SigningMethodHS256, []byte("0123456789abcdef0123456789abcdef"), "ec1")
	require.Equal(t, 401, do(t, h, up, "/v1/x", "Bearer "+hs).status, "never an HMAC algorithm from a key set")
}

// A JWK Set URL is fetched once and cached: requests with known keys fetch nothing. When the
// identity provider rotates to a new key, the first token of it triggers a background refresh
// and is refused; once the refresh is in, tokens of the new key pass.
func TestJWKSURLIsCachedAndFollowsRotation(t *testing.T) {
	k1, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	k2, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	var mu sync.Mutex
	published := jwkSet(t, map[string]any{"k1": &k1.PublicKey})
	_, addr := serveJWKS(t, func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return published
	})

	up := mwtest.NewUpstream(t, mwtest.Status(200))
	s := newStage(t, config.JWTOptions{JWKSURL: "http://" + addr + "/jwks", JWKSRefresh: time.Hour, Leeway: time.Second, Claim: "sub"}, nil)
	h := mwtest.New(t, []any{s}, up.Addr())
	for range 5 {
		require.Equal(t, 200, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodES256, k1, "k1")).status)
	}
	require.Equal(t, int64(1), s.jwks.Fetches(), "cached")

	mu.Lock()
	published = jwkSet(t, map[string]any{"k1": &k1.PublicKey, "k2": &k2.PublicKey})
	mu.Unlock()
	tok2 := "Bearer " + signKID(t, jwt.SigningMethodES256, k2, "k2")
	require.Equal(t, 401, do(t, h, up, "/v1/x", tok2).status, "not fetched yet: refused, and a refresh starts")
	waitStatus(t, h, up, tok2, 200)
	require.Equal(t, int64(2), s.jwks.Fetches(), "one refresh, however many tokens asked")
}

// A set without any usable key is refused when the configuration is compiled.
func TestJWKSWithoutUsableKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`), 0o600))
	_, err := New(config.JWTOptions{JWKSFile: file, JWKSRefresh: time.Hour}, nil)
	require.ErrorContains(t, err, "no public signature key")
}

// Chosen claims of a verified token go upstream in request fields; a client's own fields of
// those names never do, with or without a token.
func TestForwardClaims(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	o := hmacOpts()
	o.ForwardClaims = []config.HeaderPair{{Name: "sub", Value: "X-User-Id"}, {Name: "tier", Value: "X-Tier"}, {Name: "groups", Value: "X-Groups"}}
	h := mwtest.New(t, []any{newStage(t, o, nil)}, up.Addr())
	tok := sign(t, jwt.SigningMethodHS256, []byte(secret), claims("tier", 2, "groups", []string{"a"}))
	r := h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw\r\nX-User-Id: forged\r\nAuthorization: Bearer "+tok, "")
	require.Equal(t, 200, r.Status)
	head := up.Heads()[0]
	require.Contains(t, head, "X-User-Id: team-a\r\n")
	require.Contains(t, head, "X-Tier: 2\r\n")
	require.NotContains(t, head, "forged")
	require.NotContains(t, head, "X-Groups", "an array claim is not sent")
}

// logLines is a slog handler that sends each record, as "message k=v ...", to a channel.
type logLines chan string

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logLines) WithGroup(string) slog.Handler            { return l }
func (l logLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	l <- line
	return nil
}

// A refresh of a JWK Set URL that fails keeps the keys in hand and says so in the log, with
// the URL's credentials masked; the first refresh that succeeds after it says so too, so that
// an identity provider out of reach does not go unseen until its next key rotation.
func TestJWKSRefreshFailureIsLogged(t *testing.T) {
	k1, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	k2, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	var mu sync.Mutex
	published := jwkSet(t, map[string]any{"k1": &k1.PublicKey})
	_, addr := serveJWKS(t, func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return published
	})

	up := mwtest.NewUpstream(t, mwtest.Status(200))
	url := "http://idp:LEAKpw@" + addr + "/jwks?api_key=LEAKkey"
	s := newStage(t, config.JWTOptions{JWKSURL: url, JWKSRefresh: time.Hour, Leeway: time.Second, Claim: "sub"}, nil)
	lines := make(logLines, 8)
	s.jwks.log = slog.New(lines)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	s.now = func() time.Time { return time.Unix(0, clock.Load()) }
	h := mwtest.New(t, []any{s}, up.Addr())
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no log line")
			return ""
		}
	}

	mu.Lock()
	published = nil
	mu.Unlock()
	tok2 := "Bearer " + signKID(t, jwt.SigningMethodES256, k2, "k2")
	require.Equal(t, 401, do(t, h, up, "/v1/x", tok2).status, "an unknown kid starts a refresh")
	failed := next()
	require.Contains(t, failed, "WARN jwks refresh failed; the keys in hand stay")
	require.Contains(t, failed, "status 500")
	require.Contains(t, failed, "retry_in=10s")
	require.NotContains(t, failed, "LEAK")
	require.Equal(t, 200, do(t, h, up, "/v1/x", "Bearer "+signKID(t, jwt.SigningMethodES256, k1, "k1")).status, "the keys in hand stay")

	mu.Lock()
	published = jwkSet(t, map[string]any{"k1": &k1.PublicKey, "k2": &k2.PublicKey})
	mu.Unlock()
	clock.Add(int64(jwksMinRefetch + time.Second))
	require.Equal(t, 401, do(t, h, up, "/v1/x", tok2).status, "not fetched yet")
	recovered := next()
	require.Contains(t, recovered, "INFO jwks refreshed again")
	require.Contains(t, recovered, "keys=2")
	require.NotContains(t, recovered, "LEAK")
	waitStatus(t, h, up, tok2, 200)
	select {
	case l := <-lines:
		t.Fatalf("a refresh that followed a success logged %q", l)
	default:
	}
}

// A refresh that cannot reach the JWK Set's server logs the client's error, whose URL the HTTP
// client rewrites (the password as ***): the user information and secret query parameters
// are masked there too.
func TestJWKSRefreshFailureLogMasksTheURLOfAnUnreachableServer(t *testing.T) {
	k1, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	k2, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	published := jwkSet(t, map[string]any{"k1": &k1.PublicKey})
	srv, addr := serveJWKS(t, func() []byte { return published })

	up := mwtest.NewUpstream(t, mwtest.Status(200))
	type set struct {
		url   string
		h     *mwtest.Harness
		lines logLines
	}
	var sets []set
	for _, url := range []string{
		"http://LEAKuser:LEAKpw@" + addr + "/jwks?api_key=LEAKkey",
		"http://LEAKtoken@" + addr + "/jwks?api_key=LEAKkey",
	} {
		s := newStage(t, config.JWTOptions{JWKSURL: url, JWKSRefresh: time.Hour, Leeway: time.Second, Claim: "sub"}, nil)
		lines := make(logLines, 8)
		s.jwks.log = slog.New(lines)
		s.now = func() time.Time { return now }
		sets = append(sets, set{url, mwtest.New(t, []any{s}, up.Addr()), lines})
	}
	require.NoError(t, srv.Close(), "the server goes away: a refresh cannot connect")
	tok2 := "Bearer " + signKID(t, jwt.SigningMethodES256, k2, "k2")
	for _, s := range sets {
		require.Equal(t, 401, do(t, s.h, up, "/v1/x", tok2).status, "an unknown kid starts a refresh")
		select {
		case failed := <-s.lines:
			require.Contains(t, failed, "WARN jwks refresh failed; the keys in hand stay")
			require.Contains(t, failed, "connection refused")
			require.NotContains(t, failed, "LEAK", s.url)
		case <-time.After(10 * time.Second):
			t.Fatal("no log line")
		}
	}
}

// waitStatus sends requests with auth until one gets status want, within 10 s: on the test's
// goroutine, since do fails the test through require.
func waitStatus(t *testing.T, h *mwtest.Harness, up *mwtest.Upstream, auth string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := do(t, h, up, "/v1/x", auth).status
		if got == want {
			return
		}
		require.True(t, time.Now().Before(deadline), "status %d, want %d within 10 s", got, want)
		time.Sleep(time.Millisecond) // pacing the tries, not a wait for a result
	}
}

// serveJWKS serves the JWK Set published returns, or 500 while it returns nil, on a loopback
// port until the test ends, and returns the server and its address.
func serveJWKS(t *testing.T, published func() []byte) (*http.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b := published()
		if b == nil {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(b)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String()
}
