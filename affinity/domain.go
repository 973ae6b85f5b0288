package affinity

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-gw/sluice/core/openai"
)

// Domain is what scopes a prefix hint: a hint learned in one domain is never seen from
// another, so that callers of different routes, environments or credential generations
// cannot tell from routing (and hence from latency) which prompts others sent, and so that
// hints of one model or endpoint never steer another's requests.
type Domain struct {
	Route       string          // the router's name
	Environment string          // the caller's environment ("prod")
	Generation  uint64          // the caller's credential issuance generation
	Model       string          // the model alias the request named
	Endpoint    openai.Endpoint // the inference endpoint
}

// Scope is a Domain reduced to the 64-bit value the index mixes into every key it stores.
type Scope uint64

// Scope returns the scope of d: the XXH64 of its fields, each string length-prefixed so that
// no two domains write the same bytes. Compute it once per request.
func (d Domain) Scope() Scope {
	var h xxhash.Digest
	h.Reset()
	var n [8]byte
	for _, s := range [...]string{d.Route, d.Environment, d.Model} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.WriteString(s)
	}
	binary.LittleEndian.PutUint64(n[:], d.Generation)
	h.Write(n[:])
	h.Write([]byte{byte(d.Endpoint)})
	return Scope(h.Sum64())
}
