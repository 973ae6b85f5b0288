package balancer

import (
	"fmt"
	"strconv"
	"strings"
)

// Strategy names accepted by New (the `strategy` key of
// [services.<name>.load_balancer]).
const (
	RoundRobin       = "round-robin"
	Weighted         = "weighted"
	LeastConnections = "least-connections"
	Random           = "random"
)

// Strategies lists the strategy names New accepts.
var Strategies = []string{RoundRobin, Weighted, LeastConnections, Random}

// Balancer picks a backend for the next request.
type Balancer interface {
	// Pick returns the backend for the next request, or nil when every
	// backend is down or excluded by c (or there are none). c may be nil.
	// It does not allocate and does not call Acquire: the caller does, once
	// it sends the request.
	Pick(c *Choice) *Backend
}

// New returns a Balancer over backends using the named strategy:
//
//   - "round-robin" and "weighted": smooth weighted round-robin as in nginx
//     (ngx_http_upstream_get_peer): each backend of weight w gets w of every
//     Σw picks, spread evenly; weights 5,1,1 give a a b a c a a.
//   - "least-connections": the up backend with the least Active/Weight;
//     ties rotate between the tied backends.
//   - "random": weighted random, backend i with probability w_i/Σw over the
//     up backends.
//
// Down backends, and those a Choice excludes, are skipped by every strategy. The backends slice is copied;
// the *Backend values are shared with the caller. An empty list is valid
// (Pick returns nil). New returns an error for an unknown strategy (listing
// the valid names), a nil backend, or a weight outside 0..MaxWeight.
func New(strategy string, backends []*Backend) (Balancer, error) {
	bs := append([]*Backend(nil), backends...)
	for i, b := range bs {
		if b == nil {
			return nil, fmt.Errorf("balancer: backend %d is nil", i)
		}
		if b.Weight < 0 || b.Weight > MaxWeight {
			return nil, fmt.Errorf("balancer: backend %d (%s): weight %d outside 0..%d", i, b.Name, b.Weight, MaxWeight)
		}
	}
	switch strategy {
	case RoundRobin, Weighted:
		return newRoundRobin(bs), nil
	case LeastConnections:
		return &leastConn{backends: bs}, nil
	case Random:
		return newWeightedRandom(bs), nil
	}
	return nil, fmt.Errorf("balancer: unknown strategy %s (valid: %s)", strconv.Quote(strategy), strings.Join(Strategies, ", "))
}
