package proxy

import (
	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pool"
)

// Route is what the proxy needs of one compiled router: where the request goes and how its
// headers are treated. Routes are immutable parts of a runtime snapshot.
type Route struct {
	Name    string
	Service *Service
	// StripAuthorization removes the client's Authorization header before the request goes
	// upstream: set when the route authenticates callers itself and forward_credentials is false.
	StripAuthorization bool
	// M holds the router's metrics.
	M *metrics.Route
}

// Service is a compiled service: a balancer over its backends.
type Service struct {
	Name     string
	Balancer balancer.Balancer
	Backends []*Backend // indexed by balancer.Backend.ID
	// PassHostHeader sends the client's Host upstream instead of the backend's own host.
	PassHostHeader bool
}

// Backend is one upstream server of a service with its connection pool.
type Backend struct {
	URL  string // as written in the configuration (${NAME} unexpanded), for logs, metrics and the admin API
	Host []byte // host[:port] sent as Host when PassHostHeader is false
	LB   *balancer.Backend
	Pool *pool.Pool
}

// Pick chooses a backend with the service's balancing strategy and counts it as active; the
// caller must call Release on it. It returns nil when every backend is down.
func (s *Service) Pick() *Backend {
	b := s.Balancer.Pick()
	if b == nil {
		return nil
	}
	b.Acquire()
	return s.Backends[b.ID]
}

// Release ends the request's hold on b taken by Pick.
func (b *Backend) Release() { b.LB.Release() }
