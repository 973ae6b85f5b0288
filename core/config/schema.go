package config

import (
	"net/netip"
	"time"

	"github.com/sluice-gw/sluice/pool"
)

// Engine names an ingress engine: gnet for plaintext, fasthttp.Server for TLS.
type Engine = string

// Ingress engines accepted by [entrypoints.<name>] engine.
const (
	// EngineGnet is the event-loop engine (panjf2000/gnet/v2). Plaintext only.
	EngineGnet Engine = "gnet"
	// EngineFasthttp is valyala/fasthttp's Server; required for TLS.
	EngineFasthttp Engine = "fasthttp"
	// UpstreamIOWorker and UpstreamIOLoop are the values of entrypoints.<name>.upstream_io.
	UpstreamIOWorker = "worker"
	UpstreamIOLoop   = "loop"
	// UpstreamConnectWorker and UpstreamConnectLoop are the values of
	// entrypoints.<name>.upstream_connect.
	UpstreamConnectWorker = "worker"
	UpstreamConnectLoop   = "loop"
)

// Load-balancing strategies accepted by [services.<name>.load_balancer] strategy.
const (
	// StrategyRoundRobin is smooth weighted round-robin as in nginx: a server
	// of weight w gets w of every Σw picks, spread evenly (the default).
	StrategyRoundRobin = "round-robin"
	// StrategyWeighted is another name for StrategyRoundRobin.
	StrategyWeighted = "weighted"
	// StrategyLeastConnections picks the server with the fewest in-flight
	// requests per unit of weight.
	StrategyLeastConnections = "least-connections"
	// StrategyRandom picks a server at random with probability weight/Σweight.
	StrategyRandom = "random"
)

// Middleware types. A router that references a middleware of a type this version does not
// implement is refused by Load, so that a missing check is never silently skipped.
const (
	MiddlewareJWT            = "jwt"
	MiddlewareRateLimit      = "rate-limit"
	MiddlewareCircuitBreaker = "circuit-breaker"
	MiddlewareAPIKey         = "api-key"
)

// Defaults applied by Load to keys that are absent.
const (
	DefaultEngine                = EngineGnet
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultIdleTimeout           = 60 * time.Second
	DefaultClientStallTimeout    = 60 * time.Second
	DefaultMaxHeaderBytes        = 16 << 10 // 16 KiB
	DefaultMaxBodyBytes          = 16 << 20 // 16 MiB
	DefaultDrainTimeout          = 30 * time.Second
	DefaultStrategy              = StrategyRoundRobin
	DefaultWeight                = 1
	DefaultDialTimeout           = pool.DefaultDialTimeout
	DefaultResponseHeaderTimeout = pool.DefaultResponseHeaderTimeout
	DefaultStreamIdleTimeout     = pool.DefaultStreamIdleTimeout
	DefaultIdleConnTimeout       = pool.DefaultIdleTimeout
	DefaultMaxIdleConns          = pool.DefaultMaxIdleConns
	DefaultWebSocketIdleTimeout  = 5 * time.Minute
	DefaultTLSMinVersion         = TLSVersion12
	DefaultAdminAddress          = "127.0.0.1:9090"
	DefaultLogLevel              = "info"
	DefaultLogFormat             = "text"
	DefaultAccessLogSample       = 1.0
	DefaultObserveInterval       = time.Second
	DefaultObservationTTL        = 5 * time.Second
)

// Bounds checked by Load.
const (
	MinMaxHeaderBytes = 1 << 10 // 1 KiB: smaller cannot hold an ordinary request head
	MaxMaxHeaderBytes = 1 << 20 // 1 MiB
	MaxWeight         = 1_000_000
	// MaxSendBufferBytes bounds entrypoints.<name>.send_buffer_bytes: setsockopt takes a
	// 32-bit int, and a larger value would wrap.
	MaxSendBufferBytes = 1<<31 - 1
	// MinObserveInterval and MaxObserveInterval bound services.<name>.workers.observe_interval.
	MinObserveInterval = 10 * time.Millisecond
	MaxObserveInterval = time.Hour
)

// Config is a loaded, defaulted and validated configuration (docs/config.md). It is
// plain data: the runtime compiles it into its own snapshot and never reads
// the TOML again. Map keys are the names given in the TOML tables.
type Config struct {
	// Entrypoints are the listeners, [entrypoints.<name>]. At least one is required.
	Entrypoints map[string]*Entrypoint `toml:"entrypoints"`
	// Routers match requests to services, [routers.<name>].
	Routers map[string]*Router `toml:"routers"`
	// Services are groups of upstream servers, [services.<name>].
	Services map[string]*Service `toml:"services"`
	// Middlewares are named request filters, [middlewares.<name>].
	Middlewares map[string]*Middleware `toml:"middlewares"`
	// Admin is the admin API listener, [admin].
	Admin Admin `toml:"admin"`
	// Log sets logging, [log].
	Log Log `toml:"log"`
	// Models are the model aliases of model routers, [models.<alias>].
	Models map[string]*Model `toml:"models"`
	// Consumers are the callers of model routers and their grants, [consumers.<name>].
	Consumers map[string]*Consumer `toml:"consumers"`
	// Providers are configuration sources and file watching, [providers] (providers.go).
	Providers Providers `toml:"providers"`

	files       []string             // the files loaded, in merge order
	providerDir string               // providers.file.directory as loaded (absolute), "" when none
	index       map[string]keyPlace  // key path (joined with pathSep) -> where it was defined
	expanded    map[string]expansion // key path -> a string value that had "${" as written
	errorAt     map[Position]bool    // where loading found problems (LoadPartial); nil when none
}

// Entrypoint is one listener, [entrypoints.<name>].
type Entrypoint struct {
	// Name is the table name (not a TOML key).
	Name string `toml:"-"`
	// Address is host:port to listen on; required. An empty host listens on
	// every interface; port 0 picks a free port.
	Address string `toml:"address"`
	// Engine is "gnet" (event loops, plaintext) or "fasthttp" (needed for TLS).
	// Default: "fasthttp" when TLS is set, else "gnet".
	Engine Engine `toml:"engine"`
	// TLS, when set, terminates TLS on this entrypoint (engine "fasthttp" only).
	TLS *TLS `toml:"tls"`
	// ReadHeaderTimeout is the time a client has to send a complete request
	// head, counted from the first byte of the request. Default 10s.
	ReadHeaderTimeout time.Duration `toml:"read_header_timeout"`
	// IdleTimeout closes a keep-alive connection that has no request for this
	// long. Default 60s.
	IdleTimeout time.Duration `toml:"idle_timeout"`
	// ClientStallTimeout closes a connection whose client reads nothing of a
	// pending response for this long (a stalled reader). Default 60s.
	ClientStallTimeout time.Duration `toml:"client_stall_timeout"`
	// MaxHeaderBytes bounds a request head (request line + header fields), in
	// bytes; larger gets 414 when the request line alone does not fit (RFC 9112
	// §3), else 431. Default 16384, range 1024..1048576.
	MaxHeaderBytes int `toml:"max_header_bytes"`
	// MaxBodyBytes bounds a request body, in bytes; larger gets 413.
	// Default 16777216 (16 MiB); must be >= 1.
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	// MaxConnections bounds open client connections; 0 (the default) is unlimited.
	MaxConnections int `toml:"max_connections"`
	// SendBufferBytes caps the kernel send buffer (SO_SNDBUF) of every client connection
	// accepted, in bytes; 0 (the default) leaves the kernel's default and its autotuning
	// (up to the third value of net.ipv4.tcp_wmem on Linux). Linux doubles the value for its
	// bookkeeping, raises it to its minimum (4608 bytes of buffer) and caps it at
	// net.core.wmem_max. Range 0..2147483647.
	SendBufferBytes int `toml:"send_buffer_bytes"`
	// AllowEncodedSlash accepts %2F, %5C and a raw '\' in request paths (kept as sent, so
	// rules match them so). Default false: such requests get 400, because an upstream that decodes
	// them would route /v1%2Fadmin as /v1/admin past a rule that excludes /v1/admin.
	AllowEncodedSlash bool `toml:"allow_encoded_slash"`
	// Multicore runs several gnet event loops instead of one: one per CPU with UpstreamIO
	// "loop" (the loops do the upstream I/O), half the CPUs (at least one) with "worker" (the
	// other half runs the proxy workers that do it). Default true.
	Multicore bool `toml:"multicore"`
	// EventLoops sets the number of gnet event loops explicitly; 0 (the default) follows
	// Multicore. Range 0..1024.
	EventLoops int `toml:"event_loops"`
	// UpstreamIO is where the gnet engine does a request's upstream I/O: "loop" (the event
	// loop that owns the client connection exchanges with plain-HTTP upstreams itself; requests
	// it cannot serve there fall back to a worker) or "worker" (a worker goroutine per
	// request). Default "loop" on engine "gnet", "worker" on "fasthttp" (its only value there).
	UpstreamIO string `toml:"upstream_io"`
	// UpstreamConnect is who connects to an upstream named by IP address for the loop path
	// (UpstreamIO "loop"): "worker" (a worker goroutine dials and the loop enrolls the
	// connected socket; the default) or "loop" (the event loop makes a non-blocking
	// connect(2) and watches it with its own poller, as nginx does). Names are always
	// resolved and dialled by a worker, TLS upstreams never use the loop path.
	UpstreamConnect string `toml:"upstream_connect"`
	// DrainTimeout is how long in-flight requests may finish after SIGTERM
	// before connections are closed. Default 30s.
	DrainTimeout time.Duration `toml:"drain_timeout"`
	// TrustedIPs are the peers whose forwarding headers are believed (load balancers or
	// CDNs in front of sluice): IP addresses or CIDR networks, IPv4 or IPv6, e.g.
	// ["10.0.0.0/8", "192.0.2.7", "fd00::/8"]. From any other peer every forwarding header
	// (Forwarded, X-Forwarded-*, X-Real-IP and the like) is removed and set from what
	// sluice saw; from a trusted peer X-Forwarded-For (and Forwarded, when sent) gets the
	// peer appended and the others are kept. Default: none (trust no peer).
	TrustedIPs []string `toml:"trusted_ips"`
	// TrustedNets is TrustedIPs as parsed by Load (not a TOML key): an address is a network
	// of one (/32, /128), an IPv4-mapped IPv6 network is the IPv4 network it maps (peers are
	// matched in their IPv4 form), and host bits are cleared ("10.1.2.3/8" is 10.0.0.0/8).
	TrustedNets []netip.Prefix `toml:"-"`
}

// TLS is the TLS of an entrypoint: its certificates (PEM files), chosen per connection by the
// server name the client asks for (SNI), and the lowest protocol version it accepts. Load
// does not open the files; compiling the configuration does, and the running entrypoint
// reloads them when they change on disk.
type TLS struct {
	// CertFile is the PEM certificate chain (leaf first) of the default certificate: the one
	// served to a client that sends no server name, or one no certificate is for. Required
	// unless Certificates lists at least one (the first is then the default).
	CertFile string `toml:"cert_file"`
	// KeyFile is the PEM private key of CertFile; required with it.
	KeyFile string `toml:"key_file"`
	// Certificates are more certificates, each served to clients that ask for a name it is
	// for (its DNS names, wildcards included, and IP addresses). Default: none.
	Certificates []CertFiles `toml:"certificates"`
	// MinVersion is the lowest TLS version accepted: "1.2" (the default) or "1.3".
	MinVersion string `toml:"min_version"`
	// Watch reloads the certificates when their files change (renewals), without a restart
	// and without touching open connections; a file that does not load keeps the
	// certificates in use. Default true.
	Watch bool `toml:"watch"`
}

// CertFiles names one certificate's PEM files, an element of tls.certificates.
type CertFiles struct {
	// CertFile is the PEM certificate chain, leaf first; required.
	CertFile string `toml:"cert_file"`
	// KeyFile is the PEM private key; required.
	KeyFile string `toml:"key_file"`
}

// TLS versions accepted by [entrypoints.<name>.tls] min_version.
const (
	TLSVersion12 = "1.2"
	TLSVersion13 = "1.3"
)

// UpstreamTLS is how the gateway verifies its https:// servers,
// [services.<name>.load_balancer.tls].
type UpstreamTLS struct {
	// CAFile is a PEM bundle of the certificate authorities that signed the servers'
	// certificates (a private CA). Default "": the system's roots.
	CAFile string `toml:"ca_file"`
	// ServerName is the name sent as SNI and that the servers' certificates must be for.
	// Default "": each server's host from its URL.
	ServerName string `toml:"server_name"`
}

// Router sends the requests that match Rule on its entrypoints to Service,
// [routers.<name>].
type Router struct {
	// Name is the table name (not a TOML key).
	Name string `toml:"-"`
	// Rule is the match expression, e.g. "PathPrefix(`/v1`) && Method(`POST`)";
	// required. Its syntax is checked by the rule compiler, not by Load; use
	// Config.ValuePos("routers", name, "rule") to report at the right place.
	Rule string `toml:"rule" secrets:"rule"`
	// Service is the name of a [services.<name>] table; required unless Models is set.
	Service string `toml:"service"`
	// Models makes the router a model router: the request body's "model" picks a
	// [models.<alias>], whose targets name the services. Exclusive with Service.
	Models bool `toml:"models"`
	// Entrypoints lists the entrypoints this router serves. Default (key
	// absent): every entrypoint, sorted by name. An explicit empty list is an error.
	Entrypoints []string `toml:"entrypoints"`
	// Middlewares lists [middlewares.<name>] tables applied in order.
	Middlewares []string `toml:"middlewares"`
	// Priority orders routers whose rules both match: higher first. 0 (the
	// default) means the length of Rule, so longer rules win. Must be >= 0.
	Priority int `toml:"priority"`
	// ForwardCredentials, when true, forwards the client's Authorization and
	// Proxy-Authorization headers upstream even when a gateway auth middleware
	// consumed them. Default false: they are removed.
	ForwardCredentials bool `toml:"forward_credentials"`
}

// Service is a named group of upstream servers, [services.<name>].
type Service struct {
	// Name is the table name (not a TOML key).
	Name string `toml:"-"`
	// LoadBalancer lists the servers and how to pick one; required in this version.
	LoadBalancer *LoadBalancer `toml:"load_balancer"`
	// Workers says how the gateway observes the servers when a model target uses the
	// service, [services.<name>.workers].
	Workers Workers `toml:"workers"`
	// Mirror copies a share of the service's requests to a shadow service,
	// [services.<name>.mirror] (lifecycle.go).
	Mirror *Mirror `toml:"mirror"`
	// Revisions split the service's requests over versions with their own servers,
	// services.<name>.revisions (lifecycle.go).
	Revisions []Revision `toml:"revisions"`
	// Rollout moves the traffic from one revision to another step by step,
	// [services.<name>.rollout] (lifecycle.go).
	Rollout *Rollout `toml:"rollout"`
	// Scaling starts and stops the service's replicas to follow its load and buffers
	// requests during a cold start, [services.<name>.scaling] (lifecycle.go).
	Scaling *Scaling `toml:"scaling"`
}

// Workers is [services.<name>.workers]: the polling of GET /power/v1/observation on each
// server of a service that a model target uses (docs/config.md). A server that answers 404
// does not speak the worker protocol and is served as a plain OpenAI-compatible server.
type Workers struct {
	// Observe polls each server's observation. Default true; false serves every server as a
	// plain one (then no target of the service may bind a deployment generation or an
	// execution config digest).
	Observe bool `toml:"observe"`
	// ObserveInterval is the time between two polls of a server, and bounds each poll.
	// Default 1s, range 10ms..1h.
	ObserveInterval time.Duration `toml:"observe_interval"`
	// ObservationTTL is how long an observation counts, from when the gateway received it:
	// a worker whose last observation is older is not sent requests. Default 5s; more than
	// ObserveInterval.
	ObservationTTL time.Duration `toml:"observation_ttl"`
	// APIKeyEnv names an environment variable holding the bearer key the workers' /power/v1
	// endpoints require. Default "": no key.
	APIKeyEnv string `toml:"api_key_env"`
	// APIKey is the value read from APIKeyEnv at load (not a TOML key; never print it).
	APIKey string `toml:"-"`
}

// LoadBalancer is [services.<name>.load_balancer].
type LoadBalancer struct {
	// Strategy is "round-robin" (smooth weighted, the default), "weighted",
	// "least-connections" or "random".
	Strategy string `toml:"strategy"`
	// Servers are the upstreams; at least one.
	Servers []Server `toml:"servers"`
	// PassHostHeader sends the client's Host header upstream. Default false:
	// the upstream gets its own host:port from the server URL.
	PassHostHeader bool `toml:"pass_host_header"`
	// DialTimeout bounds a TCP (and TLS) connect to a server. Default 5s.
	DialTimeout time.Duration `toml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the time from the request being sent to the
	// response head arriving (time to first byte; covers a model's prefill).
	// Default 5m.
	ResponseHeaderTimeout time.Duration `toml:"response_header_timeout"`
	// StreamIdleTimeout closes a response body (e.g. an SSE stream) that
	// delivers no byte for this long. Default 5m.
	StreamIdleTimeout time.Duration `toml:"stream_idle_timeout"`
	// FirstTokenTimeout bounds the time from the request being sent to the first body byte
	// of a streamed (text/event-stream) response: a generation stuck before its first token
	// is cut with an SSE error event. Checked once the head says the body is a stream.
	// Default: none.
	FirstTokenTimeout time.Duration `toml:"first_token_timeout"`
	// StreamTimeout bounds the time from the request being sent to the end of a streamed
	// (text/event-stream) response, however alive it is. Default: none.
	StreamTimeout time.Duration `toml:"stream_timeout"`
	// IdleConnTimeout closes a pooled keep-alive upstream connection unused for
	// this long. Default 90s.
	IdleConnTimeout time.Duration `toml:"idle_conn_timeout"`
	// MaxIdleConns bounds idle keep-alive connections kept per server; 0 keeps
	// none (a new connection per request). Default 1024.
	MaxIdleConns int `toml:"max_idle_conns"`
	// RetryNonIdempotent sends a non-idempotent request (POST) to another server when its
	// upstream closed or reset the connection before any response byte. Default false: an
	// upstream that received the request may have acted on it (RFC 9112 §9.3.1).
	RetryNonIdempotent bool `toml:"retry_non_idempotent"`
	// WebSocketIdleTimeout closes a WebSocket tunnel to a server (both sides) when no byte
	// moved either way for this long. Default 5m.
	WebSocketIdleTimeout time.Duration `toml:"websocket_idle_timeout"`
	// TLS says how https:// servers are verified: a CA file and the server name. Default:
	// the system's roots and each server's host.
	TLS *UpstreamTLS `toml:"tls"`

	// HealthCheck, when set, probes each server actively (edge_health.go).
	HealthCheck *HealthCheck `toml:"health_check"`
	// PassiveHealth tunes how request outcomes eject servers; always on (edge_health.go).
	PassiveHealth PassiveHealth `toml:"passive_health"`
}

// Server is one upstream, an element of load_balancer.servers.
type Server struct {
	// URL is "http://host[:port]" or "https://host[:port]" with no path,
	// query, fragment or user info; required.
	URL string `toml:"url"`
	// Weight is the server's share of requests under every strategy
	// (least-connections divides in-flight requests by it), 1..1000000.
	// Default 1.
	Weight int `toml:"weight"`
}

// Middleware is [middlewares.<name>]: a Type and its type-specific keys, kept
// raw in Options (strings already env-interpolated; Config.Written has them as
// written) and, checked and defaulted, in the field of its type. Load refuses
// a router that references a middleware of a type this version does not
// implement.
type Middleware struct {
	// Name is the table name (not a TOML key).
	Name string `toml:"-"`
	// Type is one of "jwt", "rate-limit", "circuit-breaker", "api-key", "headers",
	// "strip-prefix", "cors", "ip-allow", "body-limit", "compress", "retry"; required.
	Type string `toml:"type"`
	// Options holds every other key as decoded TOML: string, int64, float64,
	// bool, []any, map[string]any or a go-toml date/time value.
	Options map[string]any `toml:",remain"`
	// RateLimit, CircuitBreaker and JWT are the options of a middleware of that
	// type as Load checked and defaulted them (not TOML keys; nil for the other
	// types).
	RateLimit      *RateLimitOptions      `toml:"-"`
	CircuitBreaker *CircuitBreakerOptions `toml:"-"`
	JWT            *JWTOptions            `toml:"-"`

	// The options of the HTTP policy middlewares (edge_middlewares.go), as Load checked and
	// defaulted them; nil for the other types.
	Headers     *HeadersOptions     `toml:"-"`
	StripPrefix *StripPrefixOptions `toml:"-"`
	CORS        *CORSOptions        `toml:"-"`
	IPAllow     *IPAllowOptions     `toml:"-"`
	BodyLimit   *BodyLimitOptions   `toml:"-"`
	Compress    *CompressOptions    `toml:"-"`
	Retry       *RetryOptions       `toml:"-"`
}

// Admin is the admin API listener, [admin] (docs/admin-api.md).
type Admin struct {
	// Address is host:port of the admin listener. Default "127.0.0.1:9090";
	// "" disables the admin API.
	Address string `toml:"address"`
	// TokenEnv names an environment variable holding the bearer token the
	// admin API requires. Default "": no token. The variable must be set and
	// non-empty when named.
	TokenEnv string `toml:"token_env"`
	// Token is the value read from TokenEnv at load (not a TOML key; never
	// print it).
	Token string `toml:"-"`
	// AllowedHosts are host names or IP addresses, without a port, that a
	// request's Host header may name besides the admin listener's own address
	// and the loopback names (localhost, 127.0.0.0/8, [::1]); for reaching the
	// admin API through a DNS name or a reverse proxy. Any other Host is
	// refused, so that a web page cannot read the admin API by DNS rebinding.
	// Default: none.
	AllowedHosts []string `toml:"allowed_hosts"`
}

// Log is [log].
type Log struct {
	// Level is "debug", "info" (the default), "warn" or "error".
	Level string `toml:"level"`
	// Format is "text" (the default) or "json".
	Format string `toml:"format"`
	// AccessLog is where one JSON line per request goes: "" (the default: no access log),
	// "stdout", "stderr" or a file path (appended to).
	AccessLog string `toml:"access_log"`
	// AccessLogSample is the fraction of successful requests logged, 0..1 (default 1);
	// failed, cancelled and gateway-answered requests are always logged.
	AccessLogSample float64 `toml:"access_log_sample"`
}

// defaults are set on a struct before its keys are decoded, so that an
// absent key keeps its default and an explicit zero (false, 0) is kept.

func (c *Config) setDefaults() {
	c.Providers.File.setDefaults()
	c.Admin.setDefaults()
	c.Log.setDefaults()
}

func (e *Entrypoint) setDefaults() {
	e.ReadHeaderTimeout = DefaultReadHeaderTimeout
	e.IdleTimeout = DefaultIdleTimeout
	e.ClientStallTimeout = DefaultClientStallTimeout
	e.MaxHeaderBytes = DefaultMaxHeaderBytes
	e.MaxBodyBytes = DefaultMaxBodyBytes
	e.Multicore = true
	e.DrainTimeout = DefaultDrainTimeout
}

func (lb *LoadBalancer) setDefaults() {
	lb.Strategy = DefaultStrategy
	lb.DialTimeout = DefaultDialTimeout
	lb.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	lb.StreamIdleTimeout = DefaultStreamIdleTimeout
	lb.IdleConnTimeout = DefaultIdleConnTimeout
	lb.MaxIdleConns = DefaultMaxIdleConns
	lb.WebSocketIdleTimeout = DefaultWebSocketIdleTimeout
	lb.PassiveHealth.setDefaults()
}

func (s *Server) setDefaults() { s.Weight = DefaultWeight }

func (t *TLS) setDefaults() {
	t.MinVersion = DefaultTLSMinVersion
	t.Watch = true
}

func (s *Service) setDefaults() { s.Workers.setDefaults() }

func (w *Workers) setDefaults() {
	w.Observe = true
	w.ObserveInterval = DefaultObserveInterval
	w.ObservationTTL = DefaultObservationTTL
}

func (a *Admin) setDefaults() { a.Address = DefaultAdminAddress }

func (l *Log) setDefaults() {
	l.Level = DefaultLogLevel
	l.Format = DefaultLogFormat
	l.AccessLogSample = DefaultAccessLogSample
}

// plannedKeys are keys of the configuration format that later versions add. They are
// refused like unknown keys, with a message saying what they are. The key is
// the schema path: table names and array indexes replaced by "*".
var plannedKeys = map[string]string{}
