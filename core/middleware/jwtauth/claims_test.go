package jwtauth

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
)

// claimCase is a token whose claims differ from valid ones (issued by the configured issuer
// for the configured audience) by set, and the refusal its challenge must state.
type claimCase struct {
	name string
	set  []any
	want string // in the challenge and the body; "" when the token is accepted
}

// runClaimCases sends each case's token to a stage requiring issuer and audience.
func runClaimCases(t *testing.T, cases []claimCase) {
	t.Helper()
	o := hmacOpts()
	o.Issuer = "https://idp.example"
	o.Audience = []string{"sluice", "llm-gw"}
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{newStage(t, o, nil)}, up.Addr())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := claims(append([]any{"iss", "https://idp.example", "aud", "sluice"}, tc.set...)...)
			r := do(t, h, up, "/x", "Bearer "+sign(t, jwt.SigningMethodHS256, []byte(secret), c))
			if tc.want == "" {
				require.Equal(t, 200, r.status, r.body)
				return
			}
			require.Equal(t, 401, r.status, r.body)
			require.Equal(t, "invalid_token", r.code)
			require.Contains(t, r.challenge, tc.want)
			require.Contains(t, r.body, tc.want)
			require.Empty(t, r.reachedWith, "the request did not reach the upstream")
		})
	}
}

// An iss or aud that is present but empty (an empty string, null, an array of none or only
// empty strings) names no issuer or audience: the token lacks the claim the gateway requires
// and is refused as lacking it, like a token without the key, not as a claim of the wrong type.
// So is an exp that is null.
func TestEmptyClaimIsRefusedAsMissing(t *testing.T) {
	runClaimCases(t, []claimCase{
		{"iss empty", []any{"iss", ""}, "has no iss claim"},
		{"iss null", []any{"iss", nil}, "has no iss claim"},
		{"aud empty", []any{"aud", ""}, "has no aud claim"},
		{"aud null", []any{"aud", nil}, "has no aud claim"},
		{"aud no element", []any{"aud", []string{}}, "has no aud claim"},
		{"aud empty element", []any{"aud", []string{""}}, "has no aud claim"},
		{"exp null", []any{"exp", nil}, "has no exp claim"},
		{"aud empty element and a stranger", []any{"aud", []string{"", "other"}}, "audience is not accepted"},
		{"aud empty element and ours", []any{"aud", []string{"", "llm-gw"}}, ""},
		{"iss a number", []any{"iss", 5}, "iss claim has the wrong type"},
		{"aud a number", []any{"aud", 5}, "aud claim has the wrong type"},
		{"aud an array holding a number", []any{"aud", []any{"sluice", 5}}, "aud claim has the wrong type"},
		{"aud an array holding null", []any{"aud", []any{"sluice", nil}}, "aud claim has the wrong type"},
		{"exp a string", []any{"exp", "tomorrow"}, "exp claim has the wrong type"},
		{"nbf an object", []any{"nbf", map[string]any{}}, "nbf claim has the wrong type"},
	})
}

// A NumericDate (RFC 7519 §2) is seconds since 1970-01-01T00:00:00Z UTC, possibly fractional.
// One far beyond any date (1e300, or the largest int64, whose nanoseconds overflow) is refused
// as out of range, naming the claim: converting it to a time would overflow, and did make an
// exp of 1e300 read as expired and an nbf of 1e300 as long past.
func TestNumericDateOutOfRange(t *testing.T) {
	in := func(d time.Duration) float64 { return float64(now.Add(d).UnixNano()) / 1e9 }
	runClaimCases(t, []claimCase{
		{"exp 1e300", []any{"exp", 1e300}, "exp claim is out of range"},
		{"exp max int64", []any{"exp", int64(9223372036854775807)}, "exp claim is out of range"},
		{"exp -1e300", []any{"exp", -1e300}, "exp claim is out of range"},
		{"exp past year 9999", []any{"exp", 253402300800}, "exp claim is out of range"},
		{"nbf 1e300", []any{"nbf", 1e300}, "nbf claim is out of range"},
		{"nbf max int64", []any{"nbf", int64(9223372036854775807)}, "nbf claim is out of range"},
		{"iat 1e300", []any{"iat", 1e300}, "iat claim is out of range"},
		{"iat min int64", []any{"iat", int64(-9223372036854775808)}, "iat claim is out of range"},

		{"exp at the end of year 9999", []any{"exp", 253402300799}, ""},
		{"exp a common far-future sentinel", []any{"exp", 9999999999}, ""},
		{"exp of 1970 has passed", []any{"exp", 0}, "has expired"},
		{"fractional exp within the leeway", []any{"exp", in(-29*time.Second - 500*time.Millisecond)}, ""},
		{"fractional exp beyond the leeway", []any{"exp", in(-30*time.Second - 500*time.Millisecond)}, "has expired"},
		{"fractional nbf within the leeway", []any{"nbf", in(29*time.Second + 500*time.Millisecond)}, ""},
		{"fractional nbf beyond the leeway", []any{"nbf", in(30*time.Second + 500*time.Millisecond)}, "not valid yet"},
		{"iat in the future beyond the leeway", []any{"iat", in(time.Minute)}, "its iat claim, when it was issued, is in the future"},
		{"nbf in the future names nbf", []any{"nbf", in(time.Minute)}, "its nbf claim is in the future"},
		// Beyond a float64: the claim is named, not the whole token called malformed.
		{"exp 1e309", []any{"exp", json.RawMessage("1e309")}, "exp claim is out of range"},
		{"nbf -1e400", []any{"nbf", json.RawMessage("-1e400")}, "nbf claim is out of range"},
	})
}

// FuzzCheckClaims feeds checkClaims any JSON claims: it must not panic, and a token it accepts
// carries an exp after now (less the leeway) within the NumericDate range, and the configured
// issuer and one of the audiences.
func FuzzCheckClaims(f *testing.F) {
	for _, s := range []string{
		`{"exp":1748782800,"iss":"https://idp.example","aud":"sluice"}`,
		`{"exp":1e300,"nbf":-1e300,"iat":9223372036854775807}`,
		`{"exp":1748782800.5,"iss":null,"aud":[]}`,
		`{"exp":"1748782800","iss":5,"aud":["",null]}`,
	} {
		f.Add([]byte(s))
	}
	s := &Stage{leeway: 30 * time.Second, issuer: "https://idp.example", audience: []string{"sluice"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c jwt.MapClaims
		if json.Unmarshal(data, &c) != nil {
			return
		}
		if s.checkClaims(c, now) != nil {
			return
		}
		exp, ok := c["exp"].(float64)
		if !ok || exp < float64(now.Add(-s.leeway).Unix()) || exp > maxNumericDateSeconds || c["iss"] != s.issuer {
			t.Fatalf("accepted %s", data)
		}
	})
}
