// Package snapshot compiles a validated config into the immutable snapshot the hot path reads
// (swapped atomically on reload, so that every request sees one whole configuration). The data path never
// reads TOML structs; a reload compiles a new Snapshot and swaps it in atomically.
package snapshot

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sluice-gw/sluice/core/accesslog"
	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/health"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/middleware/breaker"
	"github.com/sluice-gw/sluice/core/middleware/compress"
	"github.com/sluice-gw/sluice/core/middleware/policy"
	"github.com/sluice-gw/sluice/core/middleware/ratelimit"
	"github.com/sluice-gw/sluice/core/middleware/retry"
	"github.com/sluice-gw/sluice/core/modelroute"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/router"
	"github.com/sluice-gw/sluice/core/workers"
	"github.com/sluice-gw/sluice/pool"
)

// Snapshot is one compiled configuration: per-entrypoint route tables and the services with
// their backends and connection pools. It is immutable once built.
type Snapshot struct {
	Gen    uint64
	Config *config.Config
	// Services by name, and their names sorted (for the admin API).
	Services     map[string]*pipeline.Service
	ServiceNames []string
	// Routes by router name.
	Routes map[string]*pipeline.Route

	// Models are the model aliases of model routers (nil when the config has none).
	Models *modelroute.Table

	// Workers observe the servers of the services that model targets use, by service name
	// (absent for a service with workers.observe = false). They poll from Live.Activate
	// until Retire.
	Workers map[string]*workers.Group
	// workerStates are the observed states of those servers, by server identity
	// (pipeline.Backend.Key), taken over by the next snapshot so that a reload keeps the last
	// observations.
	workerStates map[string]*workers.Worker
	startWorkers sync.Once

	// checkers probe the servers of services with a health_check, from Live.Activate until
	// Retire; healthTargets are their judged states by service and server, taken over by the
	// next snapshot so that a reload keeps what the probes learnt.
	checkers      []*health.Checker
	healthLBs     []healthLB
	healthTargets map[string]*health.Target
	startHealth   sync.Once
	// healthClients are the checkers' HTTP clients by service and TLS settings, taken over by
	// the next snapshot whose service probes the same way (its checkers go on over the same
	// connections); Retire closes the connections of those it does not take over.
	healthClients map[string]*http.Client

	// hooks are the completion stages every request of this snapshot runs, routed or not.
	hooks *pipeline.Chain

	// Metrics are the gauges over this snapshot's backends, published by Activate.
	Metrics *metrics.Set
	// series are the metrics of its routers and backends that keep their values across
	// reloads, made when the snapshot is compiled and exposed by Activate, so that a
	// configuration that is refused leaves no series behind; held are the groups Activate
	// holds while s is in force (those of its lifecycle runtime too), let go when s is
	// replaced: the series no configuration in force names any more go then.
	series []metrics.Named
	held   metrics.Held

	// middlewares are the compiled stages of the rate-limit, circuit-breaker and jwt
	// middlewares by name, one per middleware whatever the routers that list it; the next
	// snapshot takes over their state (buckets, breakers).
	middlewares map[string]any

	entrypoints map[string]*entrypointRoutes
	pools       map[string]*pool.Pool // by poolKey, shared with the next snapshot when unchanged

	// servers are the live states of the services' servers by identity, shared with the
	// next snapshot for each server it keeps (servers.go).
	servers map[string]*serverState

	life lifecycle // mirrors (lifecycle.go)
}

type entrypointRoutes struct {
	table  *router.Table
	routes []*pipeline.Route // by router.Route.ID
	// bounded: a route bounds request bodies (a body-limit middleware), so BodyBound may
	// match; minBound is the smallest of those bounds, which a body whose Content-Length is
	// not over it reaches on no route.
	bounded  bool
	minBound int64
}

// Resolve implements pipeline.Resolver: it matches req against the routers of entrypoint ep
// and returns the route (nil when none matches) and the snapshot's own completion stages. It
// does not allocate.
func (s *Snapshot) Resolve(ep string, req *http1.Request) (*pipeline.Route, *pipeline.Chain) {
	e := s.entrypoints[ep]
	if e == nil {
		return nil, s.hooks
	}
	id, ok := e.table.Match(req)
	if !ok {
		return nil, s.hooks
	}
	return e.routes[id], s.hooks
}

// BodyBound implements pipeline.BodyBoundResolver: the bound the route req matches on
// entrypoint ep sets on its body. It matches no route when none of ep's bounds the body: no
// route of ep sets a bound, or req declares a Content-Length within the smallest of them (as
// most requests do), whichever route it matches. It does not allocate.
func (s *Snapshot) BodyBound(ep string, req *http1.Request) (int64, bool) {
	e := s.entrypoints[ep]
	if e == nil || !e.bounded || (!req.Chunked && req.ContentLength <= e.minBound) {
		return 0, false
	}
	id, ok := e.table.Match(req)
	if !ok {
		return 0, false
	}
	return e.routes[id].Chain.BodyBound()
}

// Middleware returns the compiled stage of middleware name: a *ratelimit.Stage,
// *breaker.Stage or *jwtauth.Stage (nil for an api-key middleware, compiled per router, or
// for a name not defined).
func (s *Snapshot) Middleware(name string) any { return s.middlewares[name] }

// EntrypointRoutes lists the router names of entrypoint ep in match order.
func (s *Snapshot) EntrypointRoutes(ep string) []string {
	e := s.entrypoints[ep]
	if e == nil {
		return nil
	}
	var names []string
	for _, r := range e.table.Routes() {
		names = append(names, r.Name)
	}
	return names
}

// modelsServiceLabel is the service label of a model router's metrics: its targets name the
// services.
const modelsServiceLabel = "models"

// authMiddlewareTypes authenticate callers: a route using one does not forward the caller's
// credentials upstream unless forward_credentials is set.
var authMiddlewareTypes = map[string]bool{config.MiddlewareJWT: true, config.MiddlewareAPIKey: true}

// Compile builds a snapshot from cfg. Pools of backends whose address and settings are
// unchanged are taken over from prev (nil for the first snapshot), so a reload keeps warm
// upstream connections. Errors are a config.ErrorList with file:line:col positions, sorted
// by position.
func Compile(cfg *config.Config, prev *Snapshot, gen uint64) (*Snapshot, error) {
	s := &Snapshot{
		Gen: gen, Config: cfg,
		Services:    map[string]*pipeline.Service{},
		Routes:      map[string]*pipeline.Route{},
		entrypoints: map[string]*entrypointRoutes{},
		pools:       map[string]*pool.Pool{},
		servers:     map[string]*serverState{},
	}
	errs, noScaler := s.prepareScalers(cfg, prev)
	for _, name := range sortedKeys(cfg.Services) {
		if noScaler[name] {
			continue // refused: its scaler's error says why
		}
		svc, err := s.compileService(cfg, name, cfg.Services[name], prev)
		if err != nil {
			errs = append(errs, err...)
			continue
		}
		s.Services[name] = svc
		s.ServiceNames = append(s.ServiceNames, name)
	}
	for _, name := range sortedKeys(cfg.Entrypoints) {
		if t := cfg.Entrypoints[name].TLS; t != nil {
			// Checked here so that `sluice validate` and a reload catch what a bind would.
			errs = append(errs, tlsErrors(cfg, name, t)...)
		}
	}
	s.compileLifecycle(cfg, prev)
	hooks, err := compileHooks(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	s.hooks = hooks
	consumers := consumer.NewRegistry(cfg.Consumers)
	s.compileWorkers(cfg, prev)
	var prevModels *modelroute.Table
	if prev != nil {
		prevModels = prev.Models
	}
	models, merr := modelroute.NewTable(cfg.Models, s.Services, s.Workers, prevModels)
	if merr != nil {
		errs = append(errs, cfg.Errorf([]string{"models"}, "models: %v", merr))
	}
	s.Models = models
	if models != nil {
		s.series = append(s.series, models.Metrics()...)
	}
	errs = append(errs, s.compileMiddlewares(cfg, consumers, prev)...)
	tables := map[string][]router.Route{}
	for _, name := range sortedKeys(cfg.Routers) {
		r := cfg.Routers[name]
		rule, err := router.Parse(r.Rule)
		if err != nil {
			errs = append(errs, ruleError(cfg, name, err))
			continue
		}
		svc := s.Services[r.Service]
		if svc == nil && !r.Models {
			continue // reported by the service's own errors or by config validation
		}
		serviceLabel := r.Service
		if r.Models {
			serviceLabel = modelsServiceLabel
		}
		rt := &pipeline.Route{Name: name, Service: svc, M: metrics.ForRoute(name, serviceLabel), RetryOverload: r.Models,
			UncodedResponses: r.Models}
		s.series = append(s.series, rt.M)
		var stages []any
		for _, m := range r.Middlewares {
			mw := cfg.Middlewares[m]
			if mw == nil {
				continue
			}
			if authMiddlewareTypes[mw.Type] {
				rt.Authenticates = true
				rt.StripAuthorization = !r.ForwardCredentials
			}
			switch {
			case mw.Type == config.MiddlewareAPIKey:
				st := consumer.NewAPIKey(consumers, mw.APIKeyHeader())
				if h := st.Header(); h != "" {
					rt.CredentialHeader = []byte(h)
				}
				stages = append(stages, st)
			case s.middlewares[m] != nil:
				stages = append(stages, s.middlewares[m])
			}
		}
		if r.Models && models != nil {
			stages = append(stages, modelroute.NewStage(models))
		}
		chain, cerr := pipeline.NewChain(stages...)
		if cerr != nil {
			panic(cerr) // the built-in stages implement a phase
		}
		rt.Chain = chain
		s.Routes[name] = rt
		eps := r.Entrypoints
		if len(eps) == 0 {
			eps = sortedKeys(cfg.Entrypoints)
		}
		for _, ep := range eps {
			er := s.entrypoints[ep]
			if er == nil {
				er = &entrypointRoutes{}
				s.entrypoints[ep] = er
			}
			id := len(er.routes)
			er.routes = append(er.routes, rt)
			if b, ok := chain.BodyBound(); ok && (!er.bounded || b < er.minBound) {
				er.bounded, er.minBound = true, b
			}
			tables[ep] = append(tables[ep], router.Route{Name: name, Rule: rule, RuleText: r.Rule, Priority: r.Priority, ID: id})
		}
	}
	for ep, routes := range tables {
		s.entrypoints[ep].table = router.NewTable(routes)
	}
	if len(errs) > 0 {
		// The parts are compiled kind by kind (services before entrypoints, whichever the file
		// writes first): the problems are reported in the order of their positions, as loading
		// reports its own.
		errs.Sort()
		s.closeNewPools(prev)
		s.retireLifecycle(prev) // stops what this snapshot started and prev does not run
		return nil, errs
	}
	s.Metrics = metrics.NewSet()
	for _, name := range s.ServiceNames {
		for _, b := range s.Services[name].Backends {
			b.M = metrics.ForBackend(name, b.URL)
			s.series = append(s.series, b.M)
			lb, p := b.LB, b.Pool
			s.Metrics.Backend(name, b.URL, lb.Active, func() bool { return !lb.Down() }, func() int { return p.Stats().Idle })
		}
	}
	for _, name := range sortedKeys(s.middlewares) {
		if st, ok := s.middlewares[name].(*breaker.Stage); ok {
			for _, b := range st.Breakers() {
				s.Metrics.Breaker(name, b.Service(), b.Backend(), b.State)
			}
		}
	}
	if s.Models != nil {
		for _, a := range s.Models.Aliases() {
			if p := a.Pool(); p != nil {
				s.Metrics.Model(a.Name, func() int64 { return int64(p.Stats().Active) }, func() int64 { return int64(p.Stats().Queued) })
			}
		}
	}
	return s, nil
}

// compileWorkers makes a group for each service a model target uses whose servers are
// observed, taking over the servers' states from prev.
func (s *Snapshot) compileWorkers(cfg *config.Config, prev *Snapshot) {
	used := map[string]bool{}
	for _, m := range cfg.Models {
		for _, t := range m.Targets {
			used[t.Service] = true
		}
	}
	for _, name := range sortedKeys(used) {
		svc, sc := s.Services[name], cfg.Services[name]
		if svc == nil || sc == nil || !sc.Workers.Observe {
			continue
		}
		if s.Workers == nil {
			s.Workers, s.workerStates = map[string]*workers.Group{}, map[string]*workers.Worker{}
		}
		_, servers := s.serviceServers(name, sc)
		members := make([]workers.Member, len(svc.Backends))
		for i, b := range svc.Backends {
			// Backends are the servers in order (compileService), so i indexes both. A
			// server's observation is the server's, as its balancer state is: kept by its
			// identity (b.Key, a listing of its own when it is listed twice), however its URL
			// is now written.
			var w *workers.Worker
			if prev != nil {
				w = prev.workerStates[b.Key]
			}
			members[i] = workers.Member{URL: servers[i].srv.URL, Name: b.URL, LB: b.LB, Worker: w}
		}
		g := workers.NewGroup(workers.Config{
			Service: name, Interval: sc.Workers.ObserveInterval, TTL: sc.Workers.ObservationTTL, APIKey: sc.Workers.APIKey,
		}, members)
		for i, b := range svc.Backends {
			s.workerStates[b.Key] = g.Member(i).Worker
		}
		s.Workers[name] = g
		s.series = append(s.series, g.Metrics())
	}
}

// StartWorkers begins polling the servers of s's observed services (Live.Activate calls it).
// It is idempotent.
func (s *Snapshot) StartWorkers() {
	s.startWorkers.Do(func() {
		for _, g := range s.Workers {
			g.Start()
		}
	})
}

// compileMiddlewares builds the stages of the rate-limit, circuit-breaker and jwt middlewares
// into s.middlewares, each taking over the state of the one of the same name in prev. A
// circuit breaker watches the backends of the services its routers send requests to.
func (s *Snapshot) compileMiddlewares(cfg *config.Config, consumers *consumer.Registry, prev *Snapshot) config.ErrorList {
	s.middlewares = map[string]any{}
	var errs config.ErrorList
	for _, name := range sortedKeys(cfg.Middlewares) {
		mw := cfg.Middlewares[name]
		var old any
		if prev != nil {
			old = prev.middlewares[name]
		}
		switch {
		case mw.RateLimit != nil:
			prevStage, _ := old.(*ratelimit.Stage)
			st := ratelimit.New(name, *mw.RateLimit, prevStage)
			s.middlewares[name] = st
			s.series = append(s.series, st.Metrics())
		case mw.CircuitBreaker != nil:
			prevStage, _ := old.(*breaker.Stage)
			s.middlewares[name] = breaker.New(name, *mw.CircuitBreaker, s.servicesOf(cfg, name), prevStage)
		case mw.JWT != nil:
			st, err := jwtStage(cfg, name, mw.JWT, consumers)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.middlewares[name] = st
		case mw.Retry != nil:
			s.middlewares[name] = retryStage(mw, old)
		default:
			if st := policyStage(mw); st != nil {
				s.middlewares[name] = st
			}
		}
	}
	return errs
}

// policyStage compiles an HTTP policy middleware (headers, strip-prefix, cors, ip-allow,
// body-limit, compress); nil for another type. They keep no state, so a reload builds them afresh.
func policyStage(mw *config.Middleware) any {
	switch {
	case mw.Headers != nil:
		return policy.NewHeaders(*mw.Headers)
	case mw.StripPrefix != nil:
		return policy.NewStripPrefix(*mw.StripPrefix)
	case mw.CORS != nil:
		return policy.NewCORS(*mw.CORS)
	case mw.IPAllow != nil:
		return policy.NewIPAllow(*mw.IPAllow)
	case mw.BodyLimit != nil:
		return policy.NewBodyLimit(*mw.BodyLimit)
	case mw.Compress != nil:
		return compress.New(*mw.Compress)
	}
	return nil
}

// retryStage compiles a retry middleware, taking over the budget of prev's of the same name.
func retryStage(mw *config.Middleware, old any) any {
	if mw.Retry == nil {
		return nil
	}
	prev, _ := old.(*retry.Stage)
	return retry.New(*mw.Retry, prev)
}

// servicesOf returns the compiled services the routers listing middleware mw send requests
// to: a router's service, or every target's service for a model router.
func (s *Snapshot) servicesOf(cfg *config.Config, mw string) []*pipeline.Service {
	seen := map[string]bool{}
	var out []*pipeline.Service
	add := func(name string) {
		if svc := s.Services[name]; svc != nil && !seen[name] {
			seen[name] = true
			out = append(out, svc)
		}
	}
	for _, rname := range sortedKeys(cfg.Routers) {
		r := cfg.Routers[rname]
		if !slices.Contains(r.Middlewares, mw) {
			continue
		}
		if !r.Models {
			add(r.Service)
			continue
		}
		for _, alias := range sortedKeys(cfg.Models) {
			for _, id := range sortedKeys(cfg.Models[alias].Targets) {
				add(cfg.Models[alias].Targets[id].Service)
			}
		}
	}
	return out
}

// compileHooks builds the completion stages every request runs: the access log when
// [log] access_log names a destination.
func compileHooks(cfg *config.Config) (*pipeline.Chain, *config.Error) {
	var stages []any
	if dest := cfg.Log.AccessLog; dest != "" {
		w, err := accesslog.Open(dest)
		if err != nil {
			// At the value, which is what failed, with a path from the environment shown as written.
			return &pipeline.Chain{}, &config.Error{Pos: cfg.ValuePos("log", "access_log"), Msg: "log.access_log: " + cfg.MaskEnv(err.Error(), "log", "access_log")}
		}
		stages = append(stages, accesslog.New(w, cfg.Log.AccessLogSample))
	}
	c, err := pipeline.NewChain(stages...)
	if err != nil {
		panic(err) // the built-in stages implement a phase
	}
	return c, nil
}

func ruleError(cfg *config.Config, name string, err error) *config.Error {
	if se, ok := err.(*router.SyntaxError); ok {
		return &config.Error{Pos: cfg.OffsetPos(se.Offset, "routers", name, "rule"), Msg: fmt.Sprintf("routers.%s.rule: %s", name, cfg.MaskEnv(se.Msg, "routers", name, "rule"))}
	}
	return &config.Error{Pos: cfg.ValuePos("routers", name, "rule"), Msg: fmt.Sprintf("routers.%s.rule: %s", name, cfg.MaskEnv(err.Error(), "routers", name, "rule"))}
}

func (s *Snapshot) compileService(cfg *config.Config, name string, sc *config.Service, prev *Snapshot) (*pipeline.Service, config.ErrorList) {
	lb, servers := s.serviceServers(name, sc)
	if lb == nil {
		return nil, config.ErrorList{cfg.Errorf([]string{"services", name}, "services.%s: a service needs a load_balancer", name)}
	}
	svc := &pipeline.Service{Name: name, PassHostHeader: lb.PassHostHeader, RetryNonIdempotent: lb.RetryNonIdempotent, WebSocketIdleTimeout: lb.WebSocketIdleTimeout,
		StreamTimeouts: pipeline.StreamTimeouts{FirstToken: lb.FirstTokenTimeout, Total: lb.StreamTimeout}}
	var lbs []*balancer.Backend
	var states []*serverState
	var errs config.ErrorList
	roots, rootsKey, rerr := upstreamRoots(cfg, name, lb.TLS)
	if rerr != nil {
		return nil, config.ErrorList{rerr}
	}
	for _, ref := range servers {
		srv := ref.srv
		// Shown in metric labels, logs and the admin API: as written, so that a host or
		// credential read from the environment is not.
		shown := srv.URL
		if w, ok := cfg.Written(ref.path...); ok {
			shown = w
		}
		u, err := url.Parse(srv.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, cfg.Errorf(ref.path, "%s: want http://host[:port] or https://host[:port], got %q", dottedPath(ref.path), shown))
			continue
		}
		// The server's address in its one form: its identity, and what its connections go to
		// and its certificate is verified for (names compared without regard to case, RFC
		// 6125 §6.4.1), so that a reload that writes it another way keeps its pool.
		scheme, host, port := serverAddr(u)
		addr := net.JoinHostPort(host, port)
		opts := pool.Options{
			Addr:                  addr,
			DialTimeout:           lb.DialTimeout,
			ResponseHeaderTimeout: lb.ResponseHeaderTimeout,
			IdleTimeout:           lb.IdleConnTimeout,
			StreamIdleTimeout:     lb.StreamIdleTimeout,
			MaxIdleConns:          poolIdleConns(lb.MaxIdleConns),
		}
		key := poolKey(scheme, opts)
		if scheme == "https" {
			opts.TLS = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, RootCAs: roots}
			if lb.TLS != nil && lb.TLS.ServerName != "" {
				opts.TLS.ServerName = lb.TLS.ServerName
			}
			key += "|" + opts.TLS.ServerName + "|" + rootsKey
		}
		p := s.pools[key]
		if p == nil && prev != nil {
			p = prev.pools[key]
		}
		if p == nil {
			p = pool.New(opts)
		}
		s.pools[key] = p
		st := s.serverState(name, scheme+"://"+addr, prev)
		states = append(states, st)
		lbb := &balancer.Backend{ID: len(svc.Backends), Name: shown, Weight: srv.Weight, State: st.lb}
		lbs = append(lbs, lbb)
		svc.Backends = append(svc.Backends, &pipeline.Backend{URL: shown, Host: []byte(u.Host), LB: lbb, Pool: p, Key: st.key})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	bal, err := balancer.New(lb.Strategy, lbs)
	if err != nil {
		return nil, config.ErrorList{cfg.Errorf([]string{"services", name, "load_balancer", "strategy"}, "services.%s.load_balancer.strategy: %s", name, cfg.MaskEnv(err.Error(), "services", name, "load_balancer", "strategy"))}
	}
	svc.Balancer = bal
	s.compileHealth(cfg, name, svc, states, prev, roots, rootsKey)
	return svc, nil
}

// upstreamRoots reads the CA file of a service's upstream TLS: the roots its https servers'
// certificates are verified with (nil: the system's), and a key that changes with the file's
// content, so that a reload after the CA file changed opens new connections.
func upstreamRoots(cfg *config.Config, service string, t *config.UpstreamTLS) (*x509.CertPool, string, *config.Error) {
	if t == nil || t.CAFile == "" {
		return nil, "", nil
	}
	at := []string{"services", service, "load_balancer", "tls", "ca_file"}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, "", &config.Error{Pos: cfg.ValuePos(at...), Msg: fmt.Sprintf("services.%s.load_balancer.tls.ca_file: %s", service, cfg.MaskEnv(err.Error(), at...))}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, "", &config.Error{Pos: cfg.ValuePos(at...), Msg: fmt.Sprintf("services.%s.load_balancer.tls.ca_file %q: no PEM certificate in it", service, cfg.MaskEnv(t.CAFile, at...))}
	}
	sum := sha256.Sum256(pem)
	return roots, hex.EncodeToString(sum[:8]), nil
}

// poolIdleConns maps max_idle_conns (0 keeps none) onto pool.Options (0 is the default).
func poolIdleConns(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func poolKey(scheme string, o pool.Options) string {
	return fmt.Sprintf("%s|%s|%d|%d|%d|%d|%d", scheme, o.Addr, o.DialTimeout, o.ResponseHeaderTimeout, o.IdleTimeout, o.StreamIdleTimeout, o.MaxIdleConns)
}

// closeNewPools closes pools created for a snapshot that is being discarded.
func (s *Snapshot) closeNewPools(prev *Snapshot) {
	for k, p := range s.pools {
		if prev == nil || prev.pools[k] != p {
			p.Close()
		}
	}
}

// Retire closes the pools of s that next does not use, once next has replaced s, and stops
// the polling of s's workers. Exchanges in flight on the pools finish; their connections are
// closed instead of pooled. A nil next means the gateway stops: every part of s stops, a
// mirror's copies being sent included.
func (s *Snapshot) Retire(next *Snapshot) {
	if s.Metrics != nil {
		s.Metrics.Retire()
	}
	s.retireLifecycle(next)
	for _, svc := range s.Services {
		svc.Health.Retire() // next judges the servers both have
	}
	// next polls with its own groups (started by Activate); the servers' states carry over.
	for _, g := range s.Workers {
		g.Stop()
	}
	if s.Models != nil {
		s.Models.Close()
	}
	s.stopHealth(next)
	for k, p := range s.pools {
		if next == nil || next.pools[k] != p {
			p.Close()
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Live holds the snapshot in force and implements pipeline.Resolver over it.
type Live struct{ p atomic.Pointer[Snapshot] }

// Load returns the snapshot in force.
func (l *Live) Load() *Snapshot { return l.p.Load() }

// Swap installs s and returns the snapshot it replaced; the caller retires that one.
func (l *Live) Swap(s *Snapshot) *Snapshot { return l.p.Swap(s) }

// Activate installs s, applies the admission limits its model aliases changed, starts
// polling its workers and probing its health checks, retires the snapshot it replaces and
// publishes s's metrics: its gauges, and the series of its routers, backends, health checks,
// mirrors, revisions, rollouts and scalers, which appear now if no configuration in force
// named them before. The series that only the replaced snapshot named go: a configuration
// naming those objects again starts them from zero (metrics.InForce).
func (l *Live) Activate(s *Snapshot) {
	s.Models.Commit()
	s.observeServingReplicas()
	s.StartWorkers()
	s.startLifecycle()
	old := l.p.Swap(s)
	if old != nil {
		old.Retire(s)
	}
	// After the old checkers stopped: a server in both configurations is probed by one
	// checker at a time.
	s.StartHealth()
	if s.Metrics != nil {
		s.Metrics.Register()
	}
	var prev metrics.Held
	if old != nil {
		prev = old.held
	}
	s.held = metrics.InForce(s.namedSeries(), prev)
}

// Release lets go of the series the snapshot in force holds (metrics.InForce), for a gateway
// that stopped: those no other configuration in force names (another gateway's of the
// process) are unexposed and forgotten. Call it once, after the snapshot was retired and no
// request runs on it; nothing may be activated after it.
func (l *Live) Release() {
	if s := l.p.Load(); s != nil {
		metrics.InForce(nil, s.held)
		s.held = nil
	}
}

// Hooks implements pipeline.Resolver: the completion stages of the snapshot in force.
func (l *Live) Hooks() *pipeline.Chain { return l.p.Load().hooks }

// Hooks returns the completion stages every request of s runs (the access log).
func (s *Snapshot) Hooks() *pipeline.Chain { return s.hooks }

// Resolve implements pipeline.Resolver over the snapshot in force.
func (l *Live) Resolve(ep string, req *http1.Request) (*pipeline.Route, *pipeline.Chain) {
	return l.p.Load().Resolve(ep, req)
}

// BodyBound implements pipeline.BodyBoundResolver over the snapshot in force.
func (l *Live) BodyBound(ep string, req *http1.Request) (int64, bool) {
	return l.p.Load().BodyBound(ep, req)
}
