package gateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"math"
	"mime"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/lifecycle/rollout"
	"github.com/sluice-gw/sluice/core/lifecycle/scaling"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/modelroute"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/workers"
	"github.com/sluice-gw/sluice/pd"
)

// adminServer is the admin API (docs/admin-api.md). It is off the data path, so
// it uses net/http.
type adminServer struct {
	addr string
	srv  *http.Server
}

// adminRoute is one endpoint of the admin API: its method and path, as http.ServeMux
// patterns them, and its handler.
type adminRoute struct {
	pattern string
	handler http.HandlerFunc
}

// adminAPI returns every endpoint the admin API serves, each listed in docs/admin-api.md:
// with profiling, Go's pprof handlers too (SLUICE_PPROF=1). startAdmin registers these and
// nothing else.
func (g *Gateway) adminAPI(profiling bool) []adminRoute {
	routes := []adminRoute{
		{"GET /api/gateway/health", g.adminHealth},
		{"GET /api/gateway/routes", g.adminRoutes},
		{"GET /api/gateway/services", g.adminServices},
		{"GET /api/gateway/backends", g.adminBackends},
		{"GET /api/gateway/models", g.adminModels},
		{"GET /api/gateway/workers", g.adminWorkers},
		{"GET /api/gateway/config", g.adminConfig},
		{"GET /api/gateway/metrics", adminMetrics},
		{"GET /metrics", adminMetrics},
		{"POST /api/gateway/reload", g.adminReload},
	}
	if profiling {
		// For performance work; read-only, as every other endpoint but reload: GET (and
		// HEAD) only. /debug/pprof/ serves the named profiles (heap, goroutine, …) by name.
		routes = append(routes,
			adminRoute{"GET /debug/pprof/", pprof.Index},
			adminRoute{"GET /debug/pprof/profile", pprof.Profile},
			adminRoute{"GET /debug/pprof/trace", pprof.Trace},
		)
	}
	return routes
}

func startAdmin(g *Gateway, cfg config.Admin) (*adminServer, error) {
	ln, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("sluice: admin listener: %w", err)
	}
	mux := http.NewServeMux()
	handle := func(pattern string, f http.HandlerFunc) { mux.Handle(pattern, endpoint(f)) }
	// Profiling is off unless asked for (docs/admin-api.md).
	for _, r := range g.adminAPI(os.Getenv("SLUICE_PPROF") == "1") {
		handle(r.pattern, r.handler)
	}
	hosts := newHostPolicy(cfg.Address, ln.Addr(), cfg.AllowedHosts)
	var h http.Handler = adminEndpoints(mux, hosts)
	if cfg.Token != "" {
		h = requireBearer(cfg.Token, h)
	}
	h = requireHost(hosts, h)
	h = markAnswering(refuseAsteriskForm(h))
	a := &adminServer{addr: ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:    newAdminErrorLog(g.Log.With("component", "admin").Handler()),
		ConnContext: adminConnContext, ConnState: adminConnState}}
	go func() { _ = a.srv.Serve(adminListener{ln}) }()
	return a, nil
}

// close stops the admin API: its listener at once, then its connections once their requests
// are answered, for up to adminCloseTimeout; those still open then (a request still running,
// a client that sent half a request) are cut, so that none outlives the gateway.
func (a *adminServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), adminCloseTimeout)
	defer cancel()
	if a.srv.Shutdown(ctx) != nil {
		_ = a.srv.Close()
	}
}

// adminCloseTimeout bounds how long close waits for the admin API's requests in flight.
const adminCloseTimeout = 2 * time.Second

// writeError answers with an OpenAI-style JSON error, like every other admin answer.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// refuseAsteriskForm answers a request whose target is "*" as the gateway's entrypoints do,
// before anything else looks at it. net/http answers OPTIONS * itself, before any handler:
// 200 without content, as the entrypoints do. Any other method gets the entrypoints' 400, since
// asterisk-form is only for OPTIONS (RFC 9112 §3.2.4); net/http would hand it on with the path
// "*", and the endpoints would answer 404 (or 401 for want of a token) as if it named a resource.
func refuseAsteriskForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RequestURI != "*" {
			next.ServeHTTP(w, r)
			return
		}
		e := pipeline.FramingGatewayError(http1.ErrAsteriskForm)
		writeError(w, e.Status, string(e.Type), e.Code, e.Message)
	})
}

// requireHost refuses requests whose Host header does not name the admin API. A web page
// can reach a loopback listener through a DNS name of its own that it points at 127.0.0.1
// (DNS rebinding); the browser then treats the admin API as the page's own origin and lets
// the page read it. Such a request still carries the page's host name in Host.
func requireHost(hosts *hostPolicy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts.allows(r.Host) {
			writeError(w, http.StatusForbidden, "permission_error", "host_not_allowed",
				fmt.Sprintf("the admin API does not answer Host %q: use its own address or a loopback name, or list the host in [admin] allowed_hosts (see docs/admin-api.md)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// endpoint is the type of every handler registered on the admin API's mux, so that a
// handler of the mux's own (its 404, its 405, its redirects) is told from them.
type endpoint http.HandlerFunc

func (e endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) { e(w, r) }

// adminEndpoints answers in JSON what net/http's ServeMux would answer itself: an unknown
// path 404, a wrong method 405 with Allow, and a path not in clean form ("//x", "/a/../x",
// a trailing slash the mux would add or a path it would take one from) 404 too, where the
// mux would redirect to the clean path with an HTML body; a client that sends a token would
// rightly not follow the redirect, and the admin API has one spelling per endpoint. It lets a
// state-changing request through only when a browser cannot have sent it on behalf of
// another site (see stateChangeRefused).
func adminEndpoints(mux *http.ServeMux, hosts *hostPolicy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, _ := mux.Handler(r); !isEndpoint(h) {
			// The mux's own answer says which: 405 with Allow, else 404.
			probe := &headOnly{h: http.Header{}}
			h.ServeHTTP(probe, r)
			if probe.status == http.StatusMethodNotAllowed {
				allow := probe.h.Get("Allow")
				w.Header().Set("Allow", allow)
				writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed",
					"admin endpoint "+r.URL.Path+" does not take "+r.Method+" (allowed: "+allow+")")
				return
			}
			writeError(w, http.StatusNotFound, "not_found_error", "not_found", "no admin endpoint "+r.Method+" "+r.URL.Path+" (see docs/admin-api.md)")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && stateChangeRefused(w, r, hosts) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func isEndpoint(h http.Handler) bool {
	_, ok := h.(endpoint)
	return ok
}

// stateChangeRefused answers and returns true when a request that changes state
// (POST /api/gateway/reload) may come from a page of another site (CSRF). A browser sends
// a cross-origin POST without asking first (no CORS preflight) only with a "simple"
// content type such as text/plain; requiring application/json makes it ask, and the admin
// API grants no cross-origin request. Origin and Sec-Fetch-Site, which browsers set and
// pages cannot, refuse such requests outright.
func stateChangeRefused(w http.ResponseWriter, r *http.Request, hosts *hostPolicy) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		writeError(w, http.StatusForbidden, "permission_error", "cross_site_request",
			r.Method+" "+r.URL.Path+" refused: the browser says it comes from another site (Sec-Fetch-Site: cross-site)")
		return true
	}
	if origin := r.Header.Get("Origin"); origin != "" && !hosts.allowsOrigin(origin) {
		writeError(w, http.StatusForbidden, "permission_error", "origin_not_allowed",
			fmt.Sprintf("%s %s refused: Origin %q is not the admin API's own (see docs/admin-api.md)", r.Method, r.URL.Path, origin))
		return true
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		got := "none"
		if ct != "" {
			got = strconv.Quote(ct)
		}
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type",
			r.Method+" "+r.URL.Path+" needs Content-Type: application/json (got "+got+")")
		return true
	}
	return false
}

// headOnly is a ResponseWriter that keeps the status and header and drops the body.
type headOnly struct {
	h      http.Header
	status int
}

func (p *headOnly) Header() http.Header { return p.h }

func (p *headOnly) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

func (p *headOnly) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// adminRealm is the realm of the admin API's Bearer challenge.
const adminRealm = `Bearer realm="sluice-admin"`

// requireBearer answers 401 to a request without Authorization: Bearer token. The 401
// carries the challenge RFC 9110 §11.6.1 requires, in the form of RFC 6750 §3: the scheme and
// realm, with error="invalid_token" when a token was sent and is wrong (none when no token
// was sent), and the admin API's JSON error as its body.
func requireBearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The auth scheme is case-insensitive (RFC 9110 §11.1).
		auth := r.Header.Get("Authorization")
		var got []byte
		if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			got = []byte(auth[7:])
		}
		if subtle.ConstantTimeCompare(got, want) != 1 {
			challenge := adminRealm
			if len(got) > 0 {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, "authentication_error", "unauthorized", "admin API needs the bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON answers v as indented JSON. Strings are written as they are: rules hold "&&" and
// "<" that JSON's HTML-safe escapes (\u0026, \u003c) would make unreadable, and no admin
// answer is meant for a browser to render.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		// Encoded before the status is sent, so that a value JSON cannot hold is a 500 with a
		// reason, not a 200 with half a body.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "{\"error\":{\"message\":%q,\"type\":\"server_error\",\"param\":null,\"code\":\"encoding_failed\"}}\n", "cannot encode the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func adminMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	metrics.WritePrometheus(w)
}

type entrypointStatus struct {
	Name        string `json:"name"`
	Address     string `json:"address"`
	Engine      string `json:"engine"`
	Connections int64  `json:"connections"`
	Active      int64  `json:"active_requests"`
}

func (g *Gateway) adminHealth(w http.ResponseWriter, _ *http.Request) {
	snap := g.live.Load()
	live, draining := g.entrypointsAndDraining()
	eps := make([]entrypointStatus, 0, len(live))
	at := make(map[string]int, len(live))
	for _, e := range live {
		name, t := e.name, e.t
		st := t.Stats()
		// The bound address (the port chosen for ":0"), unless the configured one was
		// written with ${NAME}: then its host came from the environment.
		addr := asWritten(snap.Config, t.Addr(), "entrypoints", name, "address")
		engine := asWritten(snap.Config, engineName(e.cfg), "entrypoints", name, "engine")
		at[name] = len(eps)
		eps = append(eps, entrypointStatus{Name: name, Address: addr, Engine: engine, Connections: st.Connections, Active: st.Active})
	}
	// A listener that a reload replaced or removed still serves its connections until they
	// finish: they count under the entrypoint's name, as sluice_open_connections counts them,
	// so that a reload does not hide requests in flight. A removed entrypoint stays listed,
	// with its old address and engine, until its drain ends.
	for _, e := range draining {
		st := e.t.Stats()
		i, ok := at[e.name]
		if !ok {
			i = len(eps)
			at[e.name] = i
			addr := asWritten(e.from, e.t.Addr(), "entrypoints", e.name, "address")
			engine := asWritten(e.from, engineName(e.cfg), "entrypoints", e.name, "engine")
			eps = append(eps, entrypointStatus{Name: e.name, Address: addr, Engine: engine})
		}
		eps[i].Connections += st.Connections
		eps[i].Active += st.Active
	}
	// A draining gateway refuses new connections: a load balancer that polls health must take
	// it out of rotation, so the answer is 503, not an "ok" for listeners that are closed.
	status, code := "ok", http.StatusOK
	if g.draining.Load() {
		status, code = "draining", http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"status": status, "generation": snap.Gen, "entrypoints": eps})
}

type routeStatus struct {
	Name        string   `json:"name"`
	Rule        string   `json:"rule"`
	Service     string   `json:"service"`
	Models      bool     `json:"models,omitempty"` // a model router: the body's "model" chooses the service
	Entrypoints []string `json:"entrypoints"`
	Middlewares []string `json:"middlewares"`
	Priority    int      `json:"priority"`
}

func (g *Gateway) adminRoutes(w http.ResponseWriter, _ *http.Request) {
	cfg := g.live.Load().Config
	out := []routeStatus{}
	for _, name := range sortedNames(cfg.Routers) {
		r := cfg.Routers[name]
		eps := r.Entrypoints
		if len(eps) == 0 {
			eps = sortedNames(cfg.Entrypoints)
		}
		out = append(out, routeStatus{
			Name:        name,
			Rule:        config.RedactRule(asWritten(cfg, r.Rule, "routers", name, "rule")),
			Service:     asWritten(cfg, r.Service, "routers", name, "service"),
			Models:      r.Models,
			Entrypoints: listAsWritten(cfg, eps, "routers", name, "entrypoints"),
			Middlewares: listAsWritten(cfg, r.Middlewares, "routers", name, "middlewares"),
			Priority:    r.Priority,
		})
	}
	writeJSON(w, 200, out)
}

// asWritten is v, the string at keyPath of cfg, as the admin API shows it: as written in the
// file, so that a value read from the environment (an API key in a rule, a host in a URL)
// is never shown.
func asWritten(cfg *config.Config, v string, keyPath ...string) string {
	if s, ok := cfg.Written(keyPath...); ok {
		return s
	}
	return v
}

// listAsWritten is asWritten for each element of the array at keyPath; never nil.
func listAsWritten(cfg *config.Config, vs []string, keyPath ...string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = asWritten(cfg, v, append(keyPath, strconv.Itoa(i))...)
	}
	return out
}

type serverStatus struct {
	URL    string `json:"url"`
	Weight int    `json:"weight"`
}

type serviceStatus struct {
	Name     string         `json:"name"`
	Strategy string         `json:"strategy"`
	Servers  []serverStatus `json:"servers"`
	// Revisions and Rollout are shown for a service with revisions (lifecycle.go).
	Revisions []rollout.RevisionStatus `json:"revisions,omitempty"`
	Rollout   *rollout.Status          `json:"rollout,omitempty"`
	// Scaling is shown for a scaled service.
	Scaling *scaling.Status `json:"scaling,omitempty"`
}

func (g *Gateway) adminServices(w http.ResponseWriter, _ *http.Request) {
	snap := g.live.Load()
	cfg := snap.Config
	out := []serviceStatus{}
	for _, name := range sortedNames(cfg.Services) {
		strategy := config.DefaultStrategy
		if lb := cfg.Services[name].LoadBalancer; lb != nil {
			strategy = asWritten(cfg, lb.Strategy, "services", name, "load_balancer", "strategy")
		}
		st := serviceStatus{Name: name, Strategy: strategy, Servers: []serverStatus{}}
		if svc := snap.Services[name]; svc != nil {
			// Backend URLs are as written in the configuration (snapshot.Compile).
			for _, b := range svc.Backends {
				st.Servers = append(st.Servers, serverStatus{URL: b.URL, Weight: b.LB.Weight})
			}
		}
		if sp := snap.Split(name); sp != nil {
			st.Revisions, st.Rollout = sp.Revisions(), sp.Rollout()
		}
		if sc := snap.Scaler(name); sc != nil {
			ss := sc.Status()
			st.Scaling = &ss
		}
		out = append(out, st)
	}
	writeJSON(w, 200, out)
}

type backendStatus struct {
	Service    string `json:"service"`
	URL        string `json:"url"`
	Active     int64  `json:"active_requests"`
	Down       bool   `json:"down"`
	IdleConns  int    `json:"idle_conns"`
	Dials      int    `json:"dials"`
	Reuses     int    `json:"reuses"`
	DialErrors int    `json:"dial_errors"`
}

func (g *Gateway) adminBackends(w http.ResponseWriter, _ *http.Request) {
	snap := g.live.Load()
	out := []backendStatus{}
	for _, name := range snap.ServiceNames {
		for _, b := range snap.Services[name].Backends {
			ps := b.Pool.Stats()
			// b.URL is as written in the configuration (runtime.Compile).
			out = append(out, backendStatus{Service: name, URL: b.URL, Active: b.LB.Active(), Down: b.LB.Down(), IdleConns: ps.Idle, Dials: ps.Dials, Reuses: ps.Reuses, DialErrors: ps.DialErrors})
		}
	}
	writeJSON(w, 200, out)
}

// adminConfig shows the configuration in force as config.RedactedDocument renders it: shaped
// like the TOML file, with strings as written (no value read from the environment) and every
// value that may be a credential "<redacted>", its key kept.
func (g *Gateway) adminConfig(w http.ResponseWriter, _ *http.Request) {
	cfg := g.live.Load().Config
	writeJSON(w, 200, map[string]any{"files": cfg.Files(), "config": keepFloats(cfg.RedactedDocument())})
}

// keepFloats copies v with every float64 made a jsonFloat, at any depth, so that the JSON
// keeps TOML's float and integer apart: 2.0 is shown 2.0, not 2, and the document turned back
// into TOML has a float where the configuration has one.
func keepFloats(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = keepFloats(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = keepFloats(x)
		}
		return out
	case float64:
		return jsonFloat(t)
	default:
		return v
	}
}

// jsonFloat is a float64 that JSON shows with a fraction or an exponent. TOML's nan and inf,
// which JSON has no number for, are shown as the strings "nan", "inf" and "-inf".
type jsonFloat float64

// MarshalJSON implements json.Marshaler.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	switch {
	case math.IsNaN(x):
		return []byte(`"nan"`), nil
	case math.IsInf(x, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(x, -1):
		return []byte(`"-inf"`), nil
	}
	b := strconv.AppendFloat(nil, x, 'g', -1, 64)
	if !bytes.ContainsAny(b, ".e") {
		b = append(b, ".0"...)
	}
	return b, nil
}

func (g *Gateway) adminReload(w http.ResponseWriter, _ *http.Request) {
	if err := g.Reload(); err != nil {
		// Reload has logged the refusal. Config errors quote values as written
		// (config.Config.Written, MaskEnv).
		writeError(w, http.StatusBadRequest, "invalid_request_error", "reload_failed", err.Error())
		return
	}
	writeJSON(w, 200, map[string]any{"status": "reloaded", "generation": g.live.Load().Gen})
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type modelTarget struct {
	ID            string `json:"id"`
	Service       string `json:"service"`
	UpstreamModel string `json:"upstream_model"`
	Priority      int    `json:"priority"`
	Weight        int    `json:"weight"`
}

type modelAdmission struct {
	MaxConcurrent     int    `json:"max_concurrent_requests"`
	MaxQueued         int    `json:"max_queued_requests"`
	QueueTimeoutMs    int    `json:"queue_timeout_ms"`
	Active            int64  `json:"active"`
	Queued            int64  `json:"queued"`
	Admitted          uint64 `json:"admitted"`
	AdmittedAfterWait uint64 `json:"admitted_after_wait"`
	RejectedFull      uint64 `json:"rejected_queue_full"`
	RejectedTimeout   uint64 `json:"rejected_queue_timeout"`
	Canceled          uint64 `json:"canceled"`
}

type modelStatus struct {
	Alias     string          `json:"alias"`
	ModelID   string          `json:"model_id"`
	Targets   []modelTarget   `json:"targets"`
	Admission *modelAdmission `json:"admission"`
}

// adminModels lists the model aliases in force with their targets and live admission state.
func (g *Gateway) adminModels(w http.ResponseWriter, _ *http.Request) {
	out := []modelStatus{}
	if t := g.live.Load().Models; t != nil {
		for _, a := range t.Aliases() {
			ms := modelStatus{Alias: a.Name, ModelID: a.ModelID, Targets: []modelTarget{}}
			for _, tier := range a.Tiers() {
				for _, tg := range tier {
					ms.Targets = append(ms.Targets, modelTarget{ID: tg.Name, Service: tg.Service.Name, UpstreamModel: tg.UpstreamModel, Priority: tg.Priority, Weight: tg.Weight})
				}
			}
			if p := a.Pool(); p != nil {
				st := p.Stats()
				ms.Admission = &modelAdmission{
					MaxConcurrent: a.Limits.MaxConcurrentRequests, MaxQueued: a.Limits.MaxQueuedRequests, QueueTimeoutMs: a.Limits.QueueTimeoutMs,
					Active: int64(st.Active), Queued: int64(st.Queued), Admitted: st.Admitted, AdmittedAfterWait: st.AdmittedAfterWait,
					RejectedFull: st.RejectedFull, RejectedTimeout: st.RejectedTimeout, Canceled: st.Canceled,
				}
			}
			out = append(out, ms)
		}
	}
	writeJSON(w, 200, out)
}

// workerObservation is an observation as the worker protocol shapes it.
type workerObservation struct {
	WorkerID              string     `json:"worker_id"`
	Role                  string     `json:"role"`
	Ready                 bool       `json:"ready"`
	Healthy               bool       `json:"healthy"`
	Active                int64      `json:"active"`
	MaxActive             int64      `json:"max_active"`
	Waiting               int64      `json:"waiting"`
	StateTransfer         bool       `json:"state_transfer"`
	ExecutionConfigDigest *string    `json:"execution_config_digest"`
	DeploymentGeneration  int64      `json:"deployment_generation"`
	Epoch                 int64      `json:"epoch"`
	ObservedAt            *time.Time `json:"observed_at"`
}

// workerVerdict is whether a server may take a target's requests now.
type workerVerdict struct {
	Model    string  `json:"model"`
	Target   string  `json:"target"`
	Eligible bool    `json:"eligible"`
	Reason   *string `json:"reason"`
}

type workerStatus struct {
	Service         string             `json:"service"`
	URL             string             `json:"url"`
	Kind            string             `json:"kind"`
	Observation     *workerObservation `json:"observation"`
	ReceivedAt      *time.Time         `json:"received_at"`
	AgeMs           *int64             `json:"age_ms"`
	IdentityChanged bool               `json:"identity_changed"`
	LastError       *string            `json:"last_error"`
	ActiveRequests  int64              `json:"active_requests"`
	Load            int64              `json:"load"`
	Eligible        bool               `json:"eligible"`
	Reason          *string            `json:"reason"`
	Targets         []workerVerdict    `json:"targets"`
}

// adminWorkers lists the servers of the observed services: each one's latest observation
// and whether it may take requests now, for a target that binds nothing in the role the
// worker reports (eligible, reason) and for each model target of its service (targets).
func (g *Gateway) adminWorkers(w http.ResponseWriter, _ *http.Request) {
	snap := g.live.Load()
	type ref struct {
		model  string
		target *modelroute.Target
	}
	targets := map[*workers.Group][]ref{}
	if snap.Models != nil {
		for _, a := range snap.Models.Aliases() {
			for _, tier := range a.Tiers() {
				for _, t := range tier {
					if t.Workers != nil {
						targets[t.Workers] = append(targets[t.Workers], ref{a.Name, t})
					}
				}
			}
		}
	}
	out := []workerStatus{}
	for _, name := range sortedNames(snap.Workers) {
		grp := snap.Workers[name]
		for i := range grp.Len() {
			m := grp.Member(i)
			v := m.Worker.View()
			// m.Name is the URL as written in the configuration, as /api/gateway/backends shows it.
			st := workerStatus{Service: name, URL: m.Name, Kind: v.Kind.String(), IdentityChanged: v.IdentityChanged,
				ActiveRequests: m.LB.Active(), Targets: []workerVerdict{}}
			if o := v.Observation; o != nil {
				wo := &workerObservation{WorkerID: o.WorkerID, Role: o.Role, Ready: o.Ready, Healthy: o.Healthy,
					Active: o.Active, MaxActive: o.MaxActive, Waiting: o.Waiting, StateTransfer: o.StateTransfer,
					DeploymentGeneration: o.DeploymentGeneration, Epoch: o.Epoch}
				if o.ExecutionConfigDigest != "" {
					wo.ExecutionConfigDigest = &o.ExecutionConfigDigest
				}
				if !o.ObservedAt.IsZero() {
					wo.ObservedAt = &o.ObservedAt
				}
				age := v.Age.Milliseconds()
				st.Observation, st.ReceivedAt, st.AgeMs = wo, &v.ReceivedAt, &age
			}
			if v.Error != "" {
				st.LastError = &v.Error
			}
			var r workers.Reason
			r, st.Load = grp.Judge(i, unboundNeeds(v.Observation))
			st.Eligible, st.Reason = r == workers.Eligible, reasonOrNull(r)
			for _, t := range targets[grp] {
				r := t.target.Judge(i)
				st.Targets = append(st.Targets, workerVerdict{Model: t.model, Target: t.target.Name, Eligible: r == workers.Eligible, Reason: reasonOrNull(r)})
			}
			out = append(out, st)
		}
	}
	writeJSON(w, 200, out)
}

// unboundNeeds returns what a target that binds nothing asks of a server with observation o
// (nil: none) in the role o reports: a prefill or decode worker is judged as that half of a
// prefill/decode pair, any other server as one serving whole requests. Judged as an
// aggregated server, every worker of a prefill/decode fleet would read wrong_role while the
// fleet serves.
func unboundNeeds(o *workers.Observation) *workers.Needs {
	if o != nil && (o.Role == pd.RolePrefill || o.Role == pd.RoleDecode) {
		n := pd.WorkerNeeds(o.Role, 0, "")
		return &n
	}
	return &workers.Needs{Role: workers.RoleAggregated}
}

func reasonOrNull(r workers.Reason) *string {
	if r == workers.Eligible {
		return nil
	}
	s := r.String()
	return &s
}
