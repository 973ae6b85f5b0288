package pipeline

import (
	"time"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/health"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pool"
)

// Resolver gives the pipeline the routing state in force. It is read once per request; a
// reload swaps what it returns, and a request keeps what it resolved until it completes.
type Resolver interface {
	// Resolve matches req against the routers of entrypoint ep and returns the route (nil when
	// none matches) and the stages every request of this configuration completes with, routed
	// or not (the access log).
	Resolve(ep string, req *http1.Request) (*Route, *Chain)
	// Hooks returns the completion stages of the configuration in force, for requests that
	// are answered before routing (a request the engine could not parse).
	Hooks() *Chain
}

// BodyBoundResolver is a Resolver that answers Entrypoint.BodyBound itself: as Resolve then
// Chain.BodyBound would, but at the cost of a lookup, without matching, where no route's
// bound can apply: for an entrypoint none of whose routes bounds bodies (has no body-limit),
// and for a request whose Content-Length is within every bound of the entrypoint's routes,
// which then reports none (false).
type BodyBoundResolver interface {
	BodyBound(ep string, req *http1.Request) (int64, bool)
}

// Route is what the pipeline needs of one compiled router: its stages, where the request goes
// and how its headers are treated. Routes are immutable parts of a compiled configuration.
type Route struct {
	Name string
	// Service is where the route's requests go; nil for a model router, whose stage names
	// the service of each request (RequestCtx.SetService).
	Service *Service
	// Chain holds the router's stages (middlewares and the model gateway's steps).
	Chain *Chain
	// Authenticates is set when the route authenticates callers itself (an api-key or jwt
	// middleware): the credential fields (Authorization, X-Api-Key, CredentialHeader) spelt
	// other than as the gateway reads them, '_' for '-' or the reverse (X_Api_Key), which
	// CGI-style upstreams read as the field itself but the gateway did not check, are removed
	// before the request goes upstream.
	Authenticates bool
	// StripAuthorization removes the credential fields in every spelling: set when the route
	// authenticates callers and forward_credentials is false.
	StripAuthorization bool
	// CredentialHeader, when set, is another field that carries the caller's credential (an
	// api-key middleware's header).
	CredentialHeader []byte
	// RetryOverload moves a request that an upstream refused with 429 or 503 and a
	// Retry-After to another backend before anything reached the client, keeping the refusing
	// backend out for the time it asked (model routers: an LLM engine's queue is full).
	RetryOverload bool
	// UncodedResponses asks the upstream for a response without a content coding: the
	// client's Accept-Encoding is replaced by "Accept-Encoding: identity" (RFC 9110 §12.5.3).
	// Set on model routers, which read every answer as they relay it (its usage, its SSE
	// events, the error event they may append), and could read none of it gzipped; a compress
	// middleware of the router still codes the answer for the client.
	UncodedResponses bool
	// M holds the router's metrics.
	M *metrics.Route

	loop loopFlag // whether requests may run on an event loop (LoopRoute), worked out once
}

// Service is a compiled service: a balancer over its backends.
type Service struct {
	Name     string
	Balancer balancer.Balancer
	Backends []*Backend // indexed by balancer.Backend.ID
	// PassHostHeader sends the client's Host upstream instead of the backend's own host.
	PassHostHeader bool
	// RetryNonIdempotent sends a non-idempotent request to another backend when its upstream
	// closed or reset the connection before any response byte (load_balancer
	// retry_non_idempotent).
	RetryNonIdempotent bool
	// StreamTimeouts are the deadlines of the service's streamed responses.
	StreamTimeouts StreamTimeouts
	// Mirror, when set, is offered every request of the service once, when its first
	// backend was chosen and before anything is sent (traffic mirroring).
	Mirror Mirror
	// Hooks are the service's own stages (revisions, scaling): each request sent to the
	// service runs them once before its first backend choice there.
	Hooks []ServiceHook
	// WebSocketIdleTimeout ends a WebSocket tunnel to the service that moved no byte either
	// way for this long; 0: DefaultWebSocketIdleTimeout.
	WebSocketIdleTimeout time.Duration
	// Health judges the backends by the outcomes of their requests (passive health); nil
	// judges nothing.
	Health *health.Passive
}

// ServiceHook is a service's own stage, run for every request sent to the service whatever
// its router: a split over revisions, a cold-start wait. OnService runs once per request
// when it reaches the service (from its route or a fallback), before its first backend
// choice there, and may narrow the choice (RequestCtx.Exclude), wait (watching
// RequestCtx.Done) or answer (a *GatewayError). OnServiceDone runs once the request
// completes, for every service whose OnService ran, whatever it returned.
type ServiceHook interface {
	OnService(rc *RequestCtx) error
	OnServiceDone(rc *RequestCtx)
}

// GapWatcher sees the inter-token gaps of one request's stream (RequestCtx.WatchGaps).
type GapWatcher interface {
	OnGap(d time.Duration)
}

// Mirror takes copies of a service's requests for another service (a shadow). Offer is
// called on the request path: it must copy what it keeps (rc is pooled), never block and
// never fail the request.
type Mirror interface {
	Offer(rc *RequestCtx)
}

// Backend is one upstream server of a service (one entry of its servers list) with its
// connection pool. Its URL names it in metrics, logs and the admin API.
type Backend struct {
	URL  string // as configured
	Host []byte // host[:port] sent as Host when PassHostHeader is false
	LB   *balancer.Backend
	Pool *pool.Pool
	// M holds the backend's metrics that outlive a snapshot (nil: none recorded).
	M *metrics.Backend
	// Key identifies the server across configurations: its service, scheme and address
	// (host:port, the default port filled in, the scheme and a host name in lower case, an
	// IP address in one form) whatever its URL's form, and which listing when the service
	// lists it more than once (core/snapshot/servers.go). A stage that keeps state per
	// server across reloads keeps it by Key.
	Key string
}

// Pick chooses a backend with the service's balancing strategy under c (which backends to
// leave out) and counts it as active; the caller must call Release on it. When every backend
// left is ejected by passive health, it picks among those anyway (panic mode, as Envoy does
// below its panic threshold): refusing every request would turn a flapping fleet into an
// outage. It returns nil when no backend is eligible.
func (s *Service) Pick(c *balancer.Choice) *Backend {
	b := s.choose(c)
	if b != nil {
		b.LB.Acquire()
	}
	return b
}

// choose is Pick without counting the backend: its caller counts it.
func (s *Service) choose(c *balancer.Choice) *Backend {
	if c == nil {
		c = new(balancer.Choice)
	}
	b := s.Balancer.Pick(c)
	if b == nil && !c.IgnoreEjection {
		c.IgnoreEjection = true
		b = s.Balancer.Pick(c)
	}
	if b == nil {
		return nil
	}
	return s.Backends[b.ID]
}

// Release ends the request's hold on b taken by Pick.
func (b *Backend) Release() { b.LB.Release() }
