// Package jwtauth is the jwt middleware ([middlewares.<name>] type = "jwt"): it authenticates a
// request by the JSON Web Token (RFC 7519) in its "Authorization: Bearer" field, verified with
// github.com/golang-jwt/jwt/v5 against an HMAC secret (HS256, HS384, HS512), a public key
// (RS*, PS*, ES*, EdDSA) or the keys of a JSON Web Key Set from a file or URL, chosen by the
// token's kid and cached (jwks.go), and answers 401 with a WWW-Authenticate challenge (RFC 6750 §3) when
// the token is missing or not valid.
//
// The algorithms a token may use are those of the configured key, fixed when the
// configuration is compiled: never "none", and never an HMAC algorithm with a public key, so
// that a token "signed" with the public key as an HMAC secret (algorithm confusion) is
// refused. A token must carry exp; exp, nbf and iat are checked with the configured leeway,
// iss and aud when configured (claims.go). When [consumers] are defined, the claim named by claim (sub by
// default) must name one: the request then carries that consumer, whose grants apply as they
// do after an api-key middleware.
package jwtauth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// minRSABits is the smallest RSA key accepted (RFC 7518 §3.3).
const minRSABits = 2048

// Stage is the jwt middleware, a pipeline.RequestStage. It is immutable once built.
type Stage struct {
	parser    *jwt.Parser
	key       any   // []byte (HMAC) or a crypto.PublicKey
	jwks      *jwks // the keys by kid, when they come from a JWK Set (then key is nil)
	methods   []string
	claim     string
	consumers *consumer.Registry // nil: tokens are not mapped to consumers
	noClaim   *refusal           // the token lacks the claim that names its consumer
	now       func() time.Time   // a field so that tests can set the clock
	forward   []forwardClaim     // claims sent upstream in request fields
	leeway    time.Duration      // clock skew allowed on exp, nbf and iat
	issuer    string             // "": any
	audience  []string           // empty: any
}

// forwardClaim sends a verified token's claim upstream in a request field.
type forwardClaim struct {
	claim  string
	header []byte
}

// forwardClaims adds the configured claims of a verified token to the upstream request: a
// string as is, a number or a boolean in its JSON form. Other claims (objects, arrays), and
// values a field cannot carry exactly (fieldValue), are not sent.
func (s *Stage) forwardClaims(rc *pipeline.RequestCtx, claims jwt.MapClaims) {
	for _, f := range s.forward {
		var v []byte
		switch x := claims[f.claim].(type) {
		case string:
			v = []byte(x)
		case json.Number: // numbers are kept as the token wrote them (the parser's WithJSONNumber)
			v = []byte(x.String())
		case float64:
			v = strconv.AppendFloat(nil, x, 'f', -1, 64)
		case bool:
			v = strconv.AppendBool(nil, x)
		default:
			continue
		}
		if !fieldValue(v) {
			continue
		}
		rc.AddUpstreamHeader(f.header, v)
	}
}

// fieldValue reports whether v travels in a request field exactly as it is (RFC 9110 §5.5):
// it is not empty, holds no control character but HTAB (CR, LF and NUL would split or cut
// the head, the others make servers refuse the request), and neither starts nor ends with SP
// or HTAB, which every recipient strips (a subject " admin" would arrive as "admin").
func fieldValue(v []byte) bool {
	if len(v) == 0 || isOWS(v[0]) || isOWS(v[len(v)-1]) {
		return false
	}
	for _, c := range v {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// New returns the stage of a jwt middleware with options o (checked by config.Load). It reads
// o.PublicKeyFile when set; its error describes what is wrong with that file. When consumers
// holds any, a token's claim o.Claim must name one of them.
func New(o config.JWTOptions, consumers *consumer.Registry) (*Stage, error) {
	s := &Stage{claim: o.Claim, now: time.Now, leeway: o.Leeway, issuer: o.Issuer, audience: o.Audience}
	if s.claim == "" {
		s.claim = config.DefaultJWTClaim
	}
	if consumers != nil && consumers.Len() > 0 {
		s.consumers = consumers
	}
	switch {
	case o.JWKSFile != "" || o.JWKSURL != "":
		src, err := newJWKS(o)
		if err != nil {
			return nil, err
		}
		s.jwks, s.methods = src, asymmetricMethods
	case o.PublicKeyFile != "":
		key, methods, err := readPublicKey(o.PublicKeyFile)
		if err != nil {
			return nil, err
		}
		s.key, s.methods = key, methods
	case o.Secret != "":
		s.key, s.methods = []byte(o.Secret), hmacMethods(len(o.Secret))
	default:
		return nil, errors.New("jwt: neither a secret nor a public key")
	}
	// The parser checks the algorithm and the signature, checkClaims the claims: the parser
	// names a missing claim only in its message, reads a null iss as of the wrong type, and
	// converts a NumericDate beyond int64 seconds into a time long past.
	s.parser = jwt.NewParser(jwt.WithValidMethods(s.methods), jwt.WithoutClaimsValidation(), jwt.WithJSONNumber())
	for _, p := range o.ForwardClaims {
		s.forward = append(s.forward, forwardClaim{claim: p.Name, header: []byte(p.Value)})
	}
	s.noClaim = newRefusal(401, "the token has no "+s.claim+" claim naming its consumer")
	return s, nil
}

// Methods returns the signing algorithms ("alg") the stage accepts.
func (s *Stage) Methods() []string { return append([]string(nil), s.methods...) }

// hmacMethods are the HMAC algorithms a secret of n bytes may verify: each needs a key at
// least as long as its hash (RFC 7518 §3.2).
func hmacMethods(n int) []string {
	m := []string{jwt.SigningMethodHS256.Alg()}
	if n >= 48 {
		m = append(m, jwt.SigningMethodHS384.Alg())
	}
	if n >= 64 {
		m = append(m, jwt.SigningMethodHS512.Alg())
	}
	return m
}

// readPublicKey reads the first PEM block of file: a public key (PKIX "PUBLIC KEY" or PKCS #1
// "RSA PUBLIC KEY") or a certificate, and returns the key and the algorithms it verifies.
func readPublicKey(file string) (crypto.PublicKey, []string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, fmt.Errorf("%s: no PEM block (want a \"PUBLIC KEY\" or a \"CERTIFICATE\")", file)
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
		return nil, nil, fmt.Errorf("%s holds a private key: give the public key only (openssl pkey -in key.pem -pubout)", file)
	default:
		return nil, nil, fmt.Errorf("%s: PEM block %q is not a public key (want \"PUBLIC KEY\" or \"CERTIFICATE\")", file, block.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", file, err)
	}
	methods, err := methodsFor(key)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", file, err)
	}
	return key, methods, nil
}

// rsaMethods, ecMethods and edMethods are the algorithms each kind of public key verifies.
var rsaMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}

// asymmetricMethods are every algorithm a public key may verify: what a key set (which may
// change) is checked against. Never an HMAC algorithm, never "none".
var asymmetricMethods = append(append([]string(nil), rsaMethods...), "ES256", "ES384", "ES512", "EdDSA")

// methodsFor returns the algorithms public key verifies, or why it verifies none.
func methodsFor(key any) ([]string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("the RSA key has %d bits; want at least %d (RFC 7518 §3.3)", k.N.BitLen(), minRSABits)
		}
		return rsaMethods, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return []string{"ES256"}, nil
		case elliptic.P384():
			return []string{"ES384"}, nil
		case elliptic.P521():
			return []string{"ES512"}, nil
		}
		return nil, fmt.Errorf("ECDSA curve %s has no JWT algorithm (want P-256, P-384 or P-521)", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return []string{"EdDSA"}, nil
	}
	return nil, fmt.Errorf("a %T key verifies no JWT algorithm (want RSA, ECDSA or Ed25519)", key)
}

// refusal is one answer of the middleware: its status, body in both error shapes, and the
// WWW-Authenticate challenge of a 401.
type refusal struct {
	answer    *consumer.Answer
	challenge []byte
}

var hdrWWWAuthenticate = []byte("WWW-Authenticate")

// newRefusal builds a 401 for an invalid token whose challenge describes why (RFC 6750 §3:
// error="invalid_token" and error_description), or a 403. desc goes into the body as it is,
// and into the challenge as descriptionText makes it.
func newRefusal(status int, desc string) *refusal {
	if status == 403 {
		return &refusal{answer: consumer.NewAnswer(403, "permission_error", "permission_error", "unknown_consumer", desc)}
	}
	return &refusal{
		answer:    consumer.NewAnswer(401, "invalid_request_error", "authentication_error", "invalid_token", desc),
		challenge: []byte(`Bearer realm="sluice", error="invalid_token", error_description="` + descriptionText(desc) + `"`),
	}
}

// descriptionText returns desc in the characters an error_description may hold (RFC 6750
// §3: %x20-21 / %x23-5B / %x5D-7E, printable ASCII without '"' and '\'), so that the quotes
// around it delimit it whatever a configured name put in desc: a double quote becomes a
// single one, a backslash a slash, and any other character (a control, a non-ASCII letter)
// a '?'.
func descriptionText(desc string) string {
	b := make([]byte, 0, len(desc))
	for _, r := range desc {
		switch {
		case r == '"':
			b = append(b, '\'')
		case r == '\\':
			b = append(b, '/')
		case r >= 0x20 && r <= 0x7e:
			b = append(b, byte(r))
		default:
			b = append(b, '?')
		}
	}
	return string(b)
}

func (r *refusal) reply(rc *pipeline.RequestCtx) error {
	if r.challenge != nil {
		rc.AddResponseHeader(hdrWWWAuthenticate, r.challenge)
	}
	return r.answer.Reply(rc)
}

// The answers, prebuilt. A request without a token gets a challenge without an error code
// (RFC 6750 §3.1).
var (
	errMissing = &refusal{
		answer:    consumer.NewAnswer(401, "invalid_request_error", "authentication_error", "missing_token", "no token: send it as Authorization: Bearer <JWT>"),
		challenge: []byte(`Bearer realm="sluice"`),
	}
	errMalformed       = newRefusal(401, "the token is malformed")
	errSignature       = newRefusal(401, "the token's signature does not verify with the gateway's key and algorithms")
	errCritical        = newRefusal(401, "the token's header lists critical extensions (crit), none of which the gateway implements")
	errUnknownConsumer = newRefusal(403, "the token's subject is not a consumer of this gateway")
)

// refusalFor maps an error of jwt.Parser, which checks no claims, to its answer: the token is
// malformed, or it does not verify (an algorithm not accepted, no key, a wrong signature).
func refusalFor(err error) *refusal {
	if errors.Is(err, jwt.ErrTokenMalformed) {
		return errMalformed
	}
	return errSignature
}

// OnRequest implements pipeline.RequestStage: the request goes on when its bearer token
// verifies, carrying its consumer when consumers are defined.
func (s *Stage) OnRequest(rc *pipeline.RequestCtx) error {
	for _, f := range s.forward {
		// Only the gateway says who the caller is, in any spelling of the field.
		rc.RemoveRequestHeader(f.header)
	}
	tok, ok := bearer(rc)
	if !ok {
		return errMissing.reply(rc)
	}
	claims := jwt.MapClaims{}
	t, err := s.parser.ParseWithClaims(string(tok), claims, s.keyFunc)
	if err != nil {
		return refusalFor(err).reply(rc)
	}
	if r := s.checkClaims(claims, s.now()); r != nil {
		return r.reply(rc)
	}
	if _, ok := t.Header["crit"]; ok {
		// A recipient must refuse a token whose crit lists an extension it does not
		// understand (RFC 7515 §4.1.11), and the gateway understands none.
		return errCritical.reply(rc)
	}
	if sub, ok := claims["sub"].(string); ok && sub != "" {
		consumer.SetSubject(rc, sub)
	}
	s.forwardClaims(rc, claims)
	if s.consumers == nil {
		return nil
	}
	name, _ := claims[s.claim].(string)
	if name == "" {
		return s.noClaim.reply(rc)
	}
	c := s.consumers.ByName(name)
	if c == nil {
		return errUnknownConsumer.reply(rc)
	}
	consumer.Set(rc, c)
	return nil
}

// keyFunc hands the parser the configured key. The parser has already refused an algorithm
// not in s.methods, and each verifier refuses a key of another type.
func (s *Stage) keyFunc(t *jwt.Token) (any, error) {
	if s.jwks != nil {
		return s.jwks.keyFor(t, s.now())
	}
	return s.key, nil
}

// bearer returns the token of "Authorization: Bearer <token>" (the scheme is
// case-insensitive, RFC 9110 §11.1).
func bearer(rc *pipeline.RequestCtx) ([]byte, bool) {
	v, ok := rc.Req.HeaderValue("Authorization")
	if !ok || len(v) <= 7 || !bytes.EqualFold(v[:7], []byte("bearer ")) {
		return nil, false
	}
	tok := bytes.TrimSpace(v[7:])
	return tok, len(tok) > 0
}
