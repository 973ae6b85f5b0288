package jwtauth

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The range of a NumericDate (RFC 7519 §2) the gateway accepts, in seconds since
// 1970-01-01T00:00:00Z UTC: the instants of four-digit years, 0001-01-01T00:00:00Z to
// 9999-12-31T23:59:59Z (RFC 3339 §5.6). No issuer means a date outside it, and one far outside
// (1e300, or the largest int64, whose nanoseconds overflow) has no time.Time to compare.
const (
	minNumericDateSeconds = -62135596800
	maxNumericDateSeconds = 253402300799
)

// dateClaim is a registered claim holding a NumericDate (exp, nbf, iat) and the answers to a
// token whose value of it is not one.
type dateClaim struct {
	name       string
	wrongType  *refusal
	outOfRange *refusal
}

func newDateClaim(name string) *dateClaim {
	return &dateClaim{
		name:       name,
		wrongType:  wrongType(name, "a NumericDate: a number of seconds since 1970-01-01T00:00:00Z UTC, RFC 7519 section 2"),
		outOfRange: newRefusal(401, "the token's "+name+" claim is out of range (want a NumericDate of a four-digit year: seconds since 1970-01-01T00:00:00Z UTC from -62135596800 to 253402300799)"),
	}
}

// wrongType is the answer to a token whose claim name is neither absent nor of the type want.
func wrongType(name, want string) *refusal {
	return newRefusal(401, "the token's "+name+" claim has the wrong type (want "+want+")")
}

var (
	expClaim    = newDateClaim("exp")
	nbfClaim    = newDateClaim("nbf")
	iatClaim    = newDateClaim("iat")
	errIssType  = wrongType("iss", "a string")
	errAudType  = wrongType("aud", "a string or an array of strings")
	errNoExp    = newRefusal(401, "the token has no exp claim, which the gateway requires")
	errNoAud    = newRefusal(401, "the token has no aud claim, which the gateway's audience requires")
	errNoIss    = newRefusal(401, "the token has no iss claim, which the gateway's issuer requires")
	errExpired  = newRefusal(401, "the token has expired")
	errNotYet   = newRefusal(401, "the token is not valid yet: its nbf claim is in the future")
	errIssuedIn = newRefusal(401, "the token is not valid yet: its iat claim, when it was issued, is in the future")
	errIssuer   = newRefusal(401, "the token's issuer is not accepted")
	errAudience = newRefusal(401, "the token's audience is not accepted")
)

// checkClaims checks the registered claims of a token whose signature verified, at instant now
// (RFC 7519 §4.1), and returns the answer to the first that fails, in the order exp, nbf, iat,
// aud, iss, or nil when all hold. exp is required and must be after now; nbf and iat, when
// present, must not be after now; each within the stage's leeway. aud must name one of the
// stage's audiences and iss equal its issuer, when those are configured.
//
// A claim that is null, and an iss or aud that names nothing (an empty string, an array of no
// or only empty strings), counts as absent, as it does when golang-jwt decodes
// jwt.RegisteredClaims: a token lacking a required claim is refused as lacking it, naming it.
func (s *Stage) checkClaims(claims jwt.MapClaims, now time.Time) *refusal {
	exp, ok, r := numericDate(claims, expClaim)
	switch {
	case r != nil:
		return r
	case !ok:
		return errNoExp
	case !now.Before(exp.Add(s.leeway)):
		return errExpired
	}
	for _, c := range []*dateClaim{nbfClaim, iatClaim} {
		t, ok, r := numericDate(claims, c)
		if r != nil {
			return r
		}
		if ok && now.Before(t.Add(-s.leeway)) {
			if c == iatClaim {
				return errIssuedIn
			}
			return errNotYet
		}
	}
	if len(s.audience) > 0 {
		if r := s.checkAudience(claims["aud"]); r != nil {
			return r
		}
	}
	if s.issuer != "" {
		switch iss := claims["iss"].(type) {
		case nil:
			return errNoIss
		case string:
			if iss == "" {
				return errNoIss
			}
			if iss != s.issuer {
				return errIssuer
			}
		default:
			return errIssType
		}
	}
	return nil
}

// numericDate returns the instant claim c of claims holds, a NumericDate (RFC 7519 §2: seconds
// since 1970-01-01T00:00:00Z UTC ignoring leap seconds, possibly fractional, kept to the
// nanosecond). ok is false when the claim is absent or null; r is the answer to a value that
// is not a number or out of range.
func numericDate(claims jwt.MapClaims, c *dateClaim) (t time.Time, ok bool, r *refusal) {
	switch v := claims[c.name].(type) {
	case nil:
		return time.Time{}, false, nil
	case json.Number:
		// The parser keeps numbers as written, so that one beyond a float64 (1e309) is judged
		// here, naming its claim, rather than failing the whole token as malformed.
		f, err := v.Float64()
		if err != nil {
			return time.Time{}, false, c.outOfRange
		}
		return dateOf(f, c)
	case float64:
		return dateOf(v, c)
	}
	return time.Time{}, false, c.wrongType
}

// dateOf is the instant of v seconds since the epoch, or c's out-of-range refusal.
func dateOf(v float64, c *dateClaim) (time.Time, bool, *refusal) {
	if !(v >= minNumericDateSeconds && v <= maxNumericDateSeconds) {
		return time.Time{}, false, c.outOfRange
	}
	sec, frac := math.Modf(v)
	return time.Unix(int64(sec), int64(frac*1e9)), true, nil
}

// checkAudience checks a token's aud (RFC 7519 §4.1.3: a string or an array of strings)
// against the stage's audiences. Empty strings name no audience.
func (s *Stage) checkAudience(aud any) *refusal {
	named, match := false, false
	switch a := aud.(type) {
	case nil:
	case string:
		named, match = a != "", a != "" && slices.Contains(s.audience, a)
	case []any:
		for _, e := range a {
			v, ok := e.(string)
			if !ok {
				return errAudType
			}
			if v != "" {
				named = true
				match = match || slices.Contains(s.audience, v)
			}
		}
	default:
		return errAudType
	}
	switch {
	case !named:
		return errNoAud
	case !match:
		return errAudience
	}
	return nil
}
