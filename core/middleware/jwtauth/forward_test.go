package jwtauth

import (
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
)

// A claim goes upstream only when a field can carry it exactly (RFC 9110 §5.5): a recipient
// strips the whitespace around a field value, so a subject " admin" would reach the upstream
// as the user "admin", and a control character makes servers refuse the whole request. Such
// a claim is not sent, and the request goes on without the field, as it does for a claim the
// token lacks.
func TestForwardClaimsOnlyWhatAFieldCarriesExactly(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	o := hmacOpts()
	o.ForwardClaims = []config.HeaderPair{{Name: "sub", Value: "X-User-Id"}}
	h := mwtest.New(t, []any{newStage(t, o, nil)}, up.Addr())
	for _, c := range []struct {
		sub  string
		sent bool
	}{
		{"admin", true},
		{"ada lovelace", true}, // whitespace inside a value is kept
		{"José Ünal", true},    // obs-text: bytes above 0x7f travel as they are
		{"a\tb", true},         // HTAB inside a value is allowed
		{" admin", false},      // a leading SP would be stripped: another user
		{"admin ", false},      // likewise a trailing one
		{"\tadmin", false},     // and HTAB
		{"admin\t", false},
		{"ad\x01min", false}, // a control character
		{"ad\x0bmin", false},
		{"ad\x7fmin", false}, // DEL
		{"admin\r\nX-Role: root", false},
	} {
		n := up.Count()
		tok := sign(t, jwt.SigningMethodHS256, []byte(secret), claims("sub", c.sub))
		r := h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+tok, "")
		require.Equal(t, 200, r.Status, "%q: the request goes on", c.sub)
		require.Equal(t, n+1, up.Count(), "%q", c.sub)
		head := up.Heads()[n]
		if c.sent {
			require.Contains(t, head, "X-User-Id: "+c.sub+"\r\n", "%q", c.sub)
		} else {
			require.NotContains(t, head, "X-User-Id", "%q is not sent", c.sub)
			require.False(t, strings.Contains(head, "X-Role"), "%q", c.sub)
		}
	}
}

// The client's own fields of a forwarded claim's name never reach the upstream, in any
// spelling that names the same variable for CGI-style servers (PHP, WSGI, Rack map
// X-User-Id, X_User_Id and X-User_Id all to HTTP_X_USER_ID): a client that wrote one of them
// would otherwise pose as another user, beside or instead of the gateway's field.
func TestForwardClaimsRemoveTheClientsUnderscoreSpellings(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	o := hmacOpts()
	o.ForwardClaims = []config.HeaderPair{{Name: "sub", Value: "X-User-Id"}}
	h := mwtest.New(t, []any{newStage(t, o, nil)}, up.Addr())
	tok := sign(t, jwt.SigningMethodHS256, []byte(secret), claims())
	r := h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw\r\nX_User_Id: forged-1\r\nx-user_id: forged-2\r\nX_USER_ID: forged-3\r\nAuthorization: Bearer "+tok, "")
	require.Equal(t, 200, r.Status)
	head := up.Heads()[0]
	require.NotContains(t, head, "forged", "the client's spellings of the field are removed")
	require.Contains(t, head, "X-User-Id: team-a\r\n")
}
