package jwtauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/pipeline"
)

const secret = "0123456789abcdef0123456789abcdef" // 32 bytes: HS256 only

// now is the instant the tests' stages believe it is.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func hmacOpts() config.JWTOptions {
	return config.JWTOptions{Secret: secret, Leeway: 30 * time.Second, Claim: "sub"}
}

func newStage(t *testing.T, o config.JWTOptions, reg *consumer.Registry) *Stage {
	t.Helper()
	s, err := New(o, reg)
	require.NoError(t, err)
	s.now = func() time.Time { return now }
	return s
}

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(m, claims).SignedString(key)
	require.NoError(t, err)
	return tok
}

// claims valid at now, expiring in an hour.
func claims(extra ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "team-a", "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
	for i := 0; i+1 < len(extra); i += 2 {
		c[extra[i].(string)] = extra[i+1]
	}
	return c
}

type result struct {
	status      int
	challenge   string
	code        string
	body        string
	reachedWith string // the upstream's Authorization, when the request reached it
}

func do(t *testing.T, h *mwtest.Harness, up *mwtest.Upstream, path, auth string) result {
	t.Helper()
	head := "POST " + path + " HTTP/1.1\r\nHost: gw"
	if auth != "" {
		head += "\r\nAuthorization: " + auth
	}
	before := up.Count()
	r := h.Do(t, "192.0.2.1", head, "{}")
	res := result{status: r.Status, challenge: r.Header.Get("WWW-Authenticate"), body: r.Body}
	var b struct{ Error struct{ Code string } }
	_ = json.Unmarshal([]byte(r.Body), &b)
	res.code = b.Error.Code
	if up.Count() > before {
		heads := up.Heads()
		res.reachedWith = "reached"
		for _, l := range strings.Split(heads[len(heads)-1], "\r\n") {
			if v, ok := strings.CutPrefix(l, "Authorization: "); ok {
				res.reachedWith = v
			}
		}
	}
	return res
}

func TestHMACTokens(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{newStage(t, hmacOpts(), nil)}, up.Addr())
	bearer := func(tok string) string { return "Bearer " + tok }

	r := do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), claims())))
	require.Equal(t, 200, r.status, r.body)

	r = do(t, h, up, "/v1/chat/completions", "bearer  "+sign(t, jwt.SigningMethodHS256, []byte(secret), claims()))
	require.Equal(t, 200, r.status, "the scheme is case-insensitive")

	r = do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), claims("exp", now.Add(-20*time.Second).Unix()))))
	require.Equal(t, 200, r.status, "expired 20 s ago, within the 30 s leeway")

	r = do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), claims("exp", now.Add(-31*time.Second).Unix()))))
	require.Equal(t, 401, r.status, "expired beyond the leeway")
	require.Equal(t, `Bearer realm="sluice", error="invalid_token", error_description="the token has expired"`, r.challenge)
	require.Equal(t, "invalid_token", r.code)
	require.Empty(t, r.reachedWith)

	r = do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-32-bytes-xxxxx"), claims())))
	require.Equal(t, 401, r.status, "signed with another key")
	require.Contains(t, r.challenge, `error="invalid_token"`)
	require.Contains(t, r.challenge, "signature")

	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims())
	r = do(t, h, up, "/v1/chat/completions", bearer(none))
	require.Equal(t, 401, r.status, "alg=none")
	require.Contains(t, r.challenge, `error="invalid_token"`)

	r = do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS512, []byte(secret), claims())))
	require.Equal(t, 401, r.status, "HS512 needs a 64-byte secret (RFC 7518 §3.2)")

	noExp := claims()
	delete(noExp, "exp")
	r = do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), noExp)))
	require.Equal(t, 401, r.status, "a token without exp never expires: refused")

	r = do(t, h, up, "/v1/chat/completions", bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), claims("nbf", now.Add(time.Minute).Unix()))))
	require.Equal(t, 401, r.status, "not valid for another minute")
	require.Contains(t, r.challenge, "not valid yet")

	r = do(t, h, up, "/v1/chat/completions", bearer("not.a.jwt"))
	require.Equal(t, 401, r.status)
	require.Contains(t, r.challenge, "malformed")

	r = do(t, h, up, "/v1/chat/completions", "")
	require.Equal(t, 401, r.status, "no token")
	require.Equal(t, `Bearer realm="sluice"`, r.challenge, "no error code without a token (RFC 6750 §3.1)")
	require.Equal(t, "missing_token", r.code)

	r = do(t, h, up, "/v1/chat/completions", "Basic dXNlcjpwYXNz")
	require.Equal(t, 401, r.status, "another scheme is no token")
	require.Equal(t, "missing_token", r.code)

	r = do(t, h, up, "/v1/messages", "")
	require.Equal(t, 401, r.status)
	require.JSONEq(t, `{"type":"error","error":{"type":"authentication_error","message":"no token: send it as Authorization: Bearer <JWT>"}}`, r.body, "Anthropic's shape")
}

func TestLongerSecretsAcceptStrongerHMACs(t *testing.T) {
	long := strings.Repeat("k", 64)
	o := hmacOpts()
	o.Secret = long
	s := newStage(t, o, nil)
	require.Equal(t, []string{"HS256", "HS384", "HS512"}, s.Methods())
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{s}, up.Addr())
	r := do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodHS512, []byte(long), claims()))
	require.Equal(t, 200, r.status)
}

func TestIssuerAndAudience(t *testing.T) {
	o := hmacOpts()
	o.Issuer = "https://idp.example"
	o.Audience = []string{"sluice", "llm-gw"}
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{newStage(t, o, nil)}, up.Addr())
	tok := func(extra ...any) string {
		return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(secret), claims(extra...))
	}
	require.Equal(t, 200, do(t, h, up, "/x", tok("iss", "https://idp.example", "aud", []string{"other", "llm-gw"})).status)
	require.Equal(t, 200, do(t, h, up, "/x", tok("iss", "https://idp.example", "aud", "sluice")).status)
	r := do(t, h, up, "/x", tok("iss", "https://evil.example", "aud", "sluice"))
	require.Equal(t, 401, r.status)
	require.Contains(t, r.challenge, "issuer")
	r = do(t, h, up, "/x", tok("iss", "https://idp.example", "aud", "other"))
	require.Equal(t, 401, r.status)
	require.Contains(t, r.challenge, "audience")
	require.Equal(t, 401, do(t, h, up, "/x", tok("iss", "https://idp.example")).status, "aud is required when audience is set")
}

// writePEM writes a PEM block to a file of the test's directory.
func writePEM(t *testing.T, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "key.pem")
	require.NoError(t, os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return f
}

func TestPublicKeysAndAlgorithmConfusion(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	require.NoError(t, err)
	file := writePEM(t, "PUBLIC KEY", der)
	pemBytes, err := os.ReadFile(file)
	require.NoError(t, err)

	s := newStage(t, config.JWTOptions{PublicKeyFile: file, Leeway: 30 * time.Second}, nil)
	require.NotContains(t, strings.Join(s.Methods(), ","), "HS")
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{s}, up.Addr())

	r := do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodRS256, rsaKey, claims()))
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, 200, do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodPS256, rsaKey, claims())).status)

	// The public key is public: a token "signed" with it as an HMAC secret must not verify.
	for _, secret := range [][]byte{pemBytes, der} {
		r = do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodHS256, secret, claims()))
		require.Equal(t, 401, r.status, "HS256 signed with the RS256 public key")
		require.Contains(t, r.challenge, `error="invalid_token"`)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	require.Equal(t, 401, do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodRS256, other, claims())).status, "another RSA key")
	require.Equal(t, 401, do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims())).status)

	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err = x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	require.NoError(t, err)
	s = newStage(t, config.JWTOptions{PublicKeyFile: writePEM(t, "PUBLIC KEY", der)}, nil)
	require.Equal(t, []string{"ES256"}, s.Methods())
	h = mwtest.New(t, []any{s}, up.Addr())
	require.Equal(t, 200, do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodES256, ecKey, claims())).status)
	require.Equal(t, 401, do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodRS256, rsaKey, claims())).status, "RS256 against an EC key")
}

func TestPublicKeyFileErrors(t *testing.T) {
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, file, want string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope.pem"), "no such file"},
		{"not PEM", writeFile(t, "hello"), "no PEM block"},
		{"private key", writePEM(t, "PRIVATE KEY", []byte{1}), "holds a private key"},
		{"short RSA key", writePEM(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&small.PublicKey)), "1024 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(config.JWTOptions{PublicKeyFile: tc.file}, nil)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func writeFile(t *testing.T, s string) string {
	f := filepath.Join(t.TempDir(), "f.pem")
	require.NoError(t, os.WriteFile(f, []byte(s), 0o600))
	return f
}

// consumerOf is a stage after the jwt middleware that reports the consumer the request
// carries.
type consumerOf struct{}

func (consumerOf) OnRequest(rc *pipeline.RequestCtx) error {
	name := "-"
	if c := consumer.From(rc); c != nil {
		name = c.Name
	}
	return rc.Reply(200, "text/plain", []byte(name))
}

func TestClaimMapsToConsumer(t *testing.T) {
	reg := consumer.NewRegistry(map[string]*config.Consumer{
		"team-a": {KeyDigests: [][sha256.Size]byte{sha256.Sum256([]byte("k"))}},
	})
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{newStage(t, hmacOpts(), reg), consumerOf{}}, up.Addr())
	tok := func(c jwt.MapClaims) string { return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(secret), c) }

	r := do(t, h, up, "/x", tok(claims()))
	require.Equal(t, 200, r.status)
	require.Equal(t, "team-a", r.body)

	r = do(t, h, up, "/x", tok(claims("sub", "team-z")))
	require.Equal(t, 403, r.status, "a valid token of no consumer")
	require.Equal(t, "unknown_consumer", r.code)

	noSub := claims()
	delete(noSub, "sub")
	r = do(t, h, up, "/x", tok(noSub))
	require.Equal(t, 401, r.status)
	require.Contains(t, r.challenge, "no sub claim")

	o := hmacOpts()
	o.Claim = "client_id"
	h = mwtest.New(t, []any{newStage(t, o, reg), consumerOf{}}, up.Addr())
	r = do(t, h, up, "/x", tok(claims("sub", "someone", "client_id", "team-a")))
	require.Equal(t, "team-a", r.body)

	// Without consumers a valid token is enough.
	h = mwtest.New(t, []any{newStage(t, hmacOpts(), consumer.NewRegistry(nil)), consumerOf{}}, up.Addr())
	r = do(t, h, up, "/x", tok(claims("sub", "anyone")))
	require.Equal(t, 200, r.status)
	require.Equal(t, "-", r.body)
}

// BenchmarkHS256 is one request's verification of an HS256 token.
func BenchmarkHS256(b *testing.B) {
	s, err := New(hmacOpts(), nil)
	require.NoError(b, err)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	require.NoError(b, err)
	var rc pipeline.RequestCtx
	require.NoError(b, rc.Req.ParseRequestHead([]byte("GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+tok+"\r\n\r\n"), nil))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.OnRequest(&rc); err != nil {
			b.Fatal(err)
		}
	}
}

// A refusal says which claim a token lacks, so that whoever mints the tokens can fix them:
// not "exp" for a token that has one and lacks the aud or iss the gateway requires.
func TestRefusalNamesTheMissingClaim(t *testing.T) {
	o := hmacOpts()
	o.Issuer = "https://idp.example"
	o.Audience = []string{"sluice"}
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{newStage(t, o, nil)}, up.Addr())
	without := func(name string) string {
		c := claims("iss", "https://idp.example", "aud", "sluice")
		delete(c, name)
		return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(secret), c)
	}
	for _, name := range []string{"exp", "aud", "iss"} {
		r := do(t, h, up, "/x", without(name))
		require.Equal(t, 401, r.status, name)
		require.Contains(t, r.challenge, "has no "+name+" claim", name)
		require.Contains(t, r.body, "has no "+name+" claim", name)
	}
	r := do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodHS256, []byte(secret), claims("iss", "https://idp.example", "aud", 5)))
	require.Equal(t, 401, r.status)
	require.Contains(t, r.challenge, "wrong type", "an aud that is a number")
}

// A token whose header lists critical extensions (crit) is refused, however well signed: the
// gateway implements none, and a recipient must not accept one it does not understand (RFC
// 7515 §4.1.11).
func TestCriticalHeaderIsRefused(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{newStage(t, hmacOpts(), nil)}, up.Addr())
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims())
	tok.Header["crit"] = []string{"b64"}
	tok.Header["b64"] = false
	signed, err := tok.SignedString([]byte(secret))
	require.NoError(t, err)
	r := do(t, h, up, "/x", "Bearer "+signed)
	require.Equal(t, 401, r.status)
	require.Equal(t, "invalid_token", r.code)
	require.Contains(t, r.challenge, "crit")
	require.Empty(t, r.reachedWith, "the request did not reach the upstream")
}
