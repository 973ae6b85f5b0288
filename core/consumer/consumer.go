// Package consumer authenticates the callers of model routers: the api-key middleware checks a
// request's API key against the configured consumers ([consumers.<name>], keys stored as
// SHA-256 digests, never as the keys) and keeps the caller in the request for the stages
// after it (grants, admission, accounting).
package consumer

import (
	"bytes"
	"crypto/sha256"
	"strings"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Consumer is one authenticated caller, compiled from [consumers.<name>].
type Consumer struct {
	// Name labels the caller in logs and metrics.
	Name string
	// Environment and Generation scope the caller (cache-affinity hints, accounting).
	Environment string
	Generation  int
	models      map[string]bool // granted aliases; nil: every alias
	endpoints   map[string]bool // granted endpoints; nil: every endpoint
}

// MayUseModel reports whether c is granted the model alias.
func (c *Consumer) MayUseModel(alias string) bool { return c.models == nil || c.models[alias] }

// MayCall reports whether c is granted the endpoint path (config.Endpoints).
func (c *Consumer) MayCall(endpoint string) bool { return c.endpoints == nil || c.endpoints[endpoint] }

// Registry finds consumers by the SHA-256 of their API key, or by name (the jwt middleware
// maps a token's claim to one). It is immutable once built.
type Registry struct {
	byDigest map[[sha256.Size]byte]*Consumer
	byName   map[string]*Consumer
}

// NewRegistry compiles the consumers of a loaded configuration.
func NewRegistry(cs map[string]*config.Consumer) *Registry {
	r := &Registry{byDigest: map[[sha256.Size]byte]*Consumer{}, byName: make(map[string]*Consumer, len(cs))}
	for name, cc := range cs {
		c := &Consumer{Name: name, Environment: cc.Environment, Generation: cc.Generation,
			models: grantSet(cc.Grants.Models), endpoints: grantSet(cc.Grants.Endpoints)}
		for _, d := range cc.KeyDigests {
			r.byDigest[d] = c
		}
		r.byName[name] = c
	}
	return r
}

// Len returns the number of consumers.
func (r *Registry) Len() int { return len(r.byName) }

// ByName returns the consumer named name ([consumers.<name>]), or nil.
func (r *Registry) ByName(name string) *Consumer { return r.byName[name] }

// grantSet is the set of names, or nil (everything) when the list holds "*".
func grantSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if n == "*" {
			return nil
		}
		set[n] = true
	}
	return set
}

// Lookup returns the consumer whose key is key, or nil. It hashes key on the stack.
func (r *Registry) Lookup(key []byte) *Consumer {
	if len(key) == 0 {
		return nil
	}
	return r.byDigest[sha256.Sum256(key)]
}

// caller is the request slot holding the authenticated *Consumer.
var caller pipeline.Slot

// From returns the consumer an authentication middleware (api-key, or jwt mapping its claim)
// authenticated for rc, or nil.
func From(rc *pipeline.RequestCtx) *Consumer {
	c, _ := rc.Get(&caller).(*Consumer)
	return c
}

// Set records c as the authenticated caller of rc, for the stages after the one that
// authenticated it (grants, rate limits by consumer, accounting).
func Set(rc *pipeline.RequestCtx, c *Consumer) { rc.Set(&caller, c) }

// APIKey is the api-key middleware: a request stage that authenticates the caller by API key
// and answers 401 when there is none or it is unknown.
type APIKey struct {
	reg    *Registry
	header string // "" : Authorization: Bearer <key>, or X-Api-Key (Anthropic clients)
}

// NewAPIKey returns the middleware over reg. header names the field that carries the key
// as is; "" takes the key from "Authorization: Bearer <key>" (OpenAI clients) or, when
// absent, from "X-Api-Key" (Anthropic clients).
func NewAPIKey(reg *Registry, header string) *APIKey {
	if strings.EqualFold(header, config.DefaultAPIKeyHeader) {
		header = ""
	}
	return &APIKey{reg: reg, header: header}
}

// Header returns the field the key is read from, "" for the default pair.
func (a *APIKey) Header() string { return a.header }

// LoopSafe implements pipeline.LoopSafe: a SHA-256 of a key no longer than the request
// head and a map lookup, no signature.
func (a *APIKey) LoopSafe() bool { return true }

// OnRequest implements pipeline.RequestStage.
func (a *APIKey) OnRequest(rc *pipeline.RequestCtx) error {
	key, ok, only := a.key(rc)
	if !only {
		return refuseKey(rc, errTwoKeys)
	}
	if !ok {
		return unauthorized(rc, false)
	}
	c := a.reg.Lookup(key)
	if c == nil {
		return unauthorized(rc, true)
	}
	Set(rc, c)
	return nil
}

// key returns the request's API key and whether it sent one; only is false when the field
// that carries it came more than once, which leaves which key counts to whoever reads it (the
// request parser already refuses a second Authorization field).
func (a *APIKey) key(rc *pipeline.RequestCtx) (k []byte, ok, only bool) {
	if a.header != "" {
		v, ok, only := rc.Req.HeaderValueOnly(a.header)
		return v, ok && len(v) > 0, only || !ok
	}
	if v, ok := rc.Req.HeaderValue("Authorization"); ok {
		// The scheme is case-insensitive (RFC 9110 §11.1).
		if len(v) > 7 && bytes.EqualFold(v[:7], []byte("bearer ")) {
			k := bytes.TrimSpace(v[7:])
			return k, len(k) > 0, true
		}
		return nil, false, true
	}
	v, ok, only := rc.Req.HeaderValueOnly("X-Api-Key")
	return v, ok && len(v) > 0, only || !ok
}

// subject is the request slot holding the authenticated token subject (a string).
var subject pipeline.Slot

// SetSubject records sub, the subject (sub claim) of the token a jwt middleware verified, for
// the stages after it (rate limits by subject).
func SetSubject(rc *pipeline.RequestCtx, sub string) { rc.Set(&subject, sub) }

// Subject returns the subject SetSubject recorded for rc, or "".
func Subject(rc *pipeline.RequestCtx) string {
	s, _ := rc.Get(&subject).(string)
	return s
}
