package jwtauth

import (
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
)

// requireChallengeSyntax checks that the WWW-Authenticate challenge of a refusal is one a client
// can parse: its error_description is a quoted string of the characters RFC 6750 §3 allows
// (%x20-21 / %x23-5B / %x5D-7E: printable ASCII without '"' and '\'), so that the quotes
// around it delimit it.
func requireChallengeSyntax(t *testing.T, challenge string) {
	t.Helper()
	const prefix = `Bearer realm="sluice", error="invalid_token", error_description="`
	require.Greater(t, len(challenge), len(prefix)+1, challenge)
	require.Equal(t, prefix, challenge[:len(prefix)], challenge)
	require.Equal(t, byte('"'), challenge[len(challenge)-1], challenge)
	for i, c := range []byte(challenge[len(prefix) : len(challenge)-1]) {
		ok := c == 0x20 || c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e)
		require.True(t, ok, "byte %#x at %d of the error_description is not allowed: %q", c, i, challenge)
	}
}

// Every invalid token is told why in a challenge a client can parse, whatever the reason and
// whatever the configured claim is called.
func TestChallengeDescriptionIsASCIIWithoutQuotes(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	tok := func(c jwt.MapClaims) string { return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(secret), c) }

	h := mwtest.New(t, []any{newStage(t, hmacOpts(), nil)}, up.Addr())
	for _, name := range []string{"exp", "nbf", "iat"} {
		r := do(t, h, up, "/x", tok(claims(name, "tomorrow")))
		require.Equal(t, 401, r.status, name)
		require.Contains(t, r.challenge, "the token's "+name+" claim has the wrong type", name)
		requireChallengeSyntax(t, r.challenge)
	}

	reg := consumer.NewRegistry(map[string]*config.Consumer{
		"team-a": {KeyDigests: [][sha256.Size]byte{sha256.Sum256([]byte("k"))}},
	})
	for _, claim := range []string{`équipe`, `https://example.com/"team"`, `team\name`} {
		o := hmacOpts()
		o.Claim = claim
		h = mwtest.New(t, []any{newStage(t, o, reg)}, up.Addr())
		r := do(t, h, up, "/x", tok(claims()))
		require.Equal(t, 401, r.status, claim)
		var body struct{ Error struct{ Message string } }
		require.NoError(t, json.Unmarshal([]byte(r.body), &body))
		require.Contains(t, body.Error.Message, "has no "+claim+" claim", "the body names the claim as configured")
		requireChallengeSyntax(t, r.challenge)
	}
}
