// Package metrics defines the gateway's Prometheus metrics on VictoriaMetrics/metrics: prefix
// sluice_, bounded label sets (entrypoint, router, service, backend, code class, status,
// reason). Every metric name is written here. Metric handles are created when a config is
// compiled or an entrypoint's transport is made, so the hot path only updates counters,
// gauges and histograms and never formats a name; their series are exposed once the
// configuration is in force or the entrypoint serves (Publish), so that a refused reload
// leaves none, and those of routers, backends and the like go once no configuration in force
// names them (InForce). WritePrometheus (expose.go) writes them for a scrape.
package metrics

import (
	"strconv"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// Upstream failure reasons, the values of the reason label.
const (
	ReasonDial     = "dial"
	ReasonTimeout  = "timeout"
	ReasonProtocol = "protocol"
	ReasonClosed   = "closed"
	ReasonStream   = "stream" // failed after the response started
)

// Histogram bucket upper bounds, in seconds, chosen for what each histogram measures. Each
// upper bound adds a series per label set, so they are dense only where values cluster.
var (
	// TTFTBuckets span 5 ms to 60 s: a cached prompt answers in milliseconds, a long prompt
	// on a loaded server in tens of seconds.
	TTFTBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60}
	// ITLBuckets span 1 ms to 5 s, densest between 10 and 100 ms where decoding speeds lie.
	ITLBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5}
	// DurationBuckets span 5 ms to 10 min: a streamed completion can last minutes.
	DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}
	// ConnectBuckets span 1 ms to 5 s: loopback and LAN connects take well under a
	// millisecond to a few, a TLS handshake across regions hundreds.
	ConnectBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
)

// Route holds the per-router metrics. Its methods are safe for concurrent use and allocation
// free.
type Route struct {
	series    *series
	responses [6]*vm.Counter // by status class: index 1..5 for 1xx..5xx, 0 for anything else
	duration  *vm.PrometheusHistogram
	ttft      *vm.PrometheusHistogram
	itl       *vm.PrometheusHistogram
	streams   *vm.Gauge
	sockets   *vm.Gauge
	tunnelIn  *vm.Counter
	bytesOut  *vm.Counter
	upErr     map[string]*vm.Counter
	canceled  *vm.Counter
}

var classes = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// ForRoute returns the metrics of router (served by service), creating them on first use.
// Metrics survive reloads that keep the router: the same router name gets the same series, and
// a request in flight across a reload counts into them. They are exposed from Publish or
// InForce on, until no configuration in force names the router (InForce).
func ForRoute(router, service string) *Route {
	l := labels("router", router, "service", service)
	x := seriesOf("route{" + l + "}")
	r := &Route{
		series:   x,
		duration: x.s.GetOrCreatePrometheusHistogramExt(`sluice_request_duration_seconds{`+l+`}`, DurationBuckets),
		ttft:     x.s.GetOrCreatePrometheusHistogramExt(`sluice_ttft_seconds{`+l+`}`, TTFTBuckets),
		itl:      x.s.GetOrCreatePrometheusHistogramExt(`sluice_inter_token_latency_seconds{`+l+`}`, ITLBuckets),
		streams:  x.s.GetOrCreateGauge(`sluice_active_streams{`+l+`}`, nil),
		sockets:  x.s.GetOrCreateGauge(`sluice_active_websockets{`+l+`}`, nil),
		tunnelIn: x.s.GetOrCreateCounter(`sluice_websocket_client_bytes_total{` + l + `}`),
		bytesOut: x.s.GetOrCreateCounter(`sluice_response_bytes_total{` + l + `}`),
		canceled: x.s.GetOrCreateCounter(`sluice_client_canceled_total{` + l + `}`),
		upErr:    map[string]*vm.Counter{},
	}
	for i, c := range classes {
		r.responses[i] = x.s.GetOrCreateCounter(`sluice_responses_total{` + l + `,code="` + c + `"}`)
	}
	for _, reason := range []string{ReasonDial, ReasonTimeout, ReasonProtocol, ReasonClosed, ReasonStream} {
		r.upErr[reason] = x.s.GetOrCreateCounter(`sluice_upstream_errors_total{` + l + `,reason="` + reason + `"}`)
	}
	return r
}

// Publish exposes the router's series: once a configuration naming it is in force, so that a
// configuration compiled and refused leaves none. Idempotent.
func (r *Route) Publish() { r.series.publish() }

func (r *Route) groups() []*series { return []*series{r.series} }

// Response counts a response with status to the client, d the time it took (from the
// request's start to the response's end) and the response body bytes relayed.
func (r *Route) Response(status int, d time.Duration, bytes int64) {
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	r.responses[c].Inc()
	r.duration.Update(d.Seconds())
	if bytes > 0 {
		r.bytesOut.Add(int(bytes))
	}
}

// FirstByte records d, the time to the first body byte of a streamed response (TTFT as the
// client sees it, gateway included).
func (r *Route) FirstByte(d time.Duration) { r.ttft.Update(d.Seconds()) }

// Gap records d, the time between two body reads of a streamed response (inter-token
// latency).
func (r *Route) Gap(d time.Duration) { r.itl.Update(d.Seconds()) }

// StreamStarted counts an SSE response whose body is about to be relayed as active; every
// call is matched by one StreamEnded.
func (r *Route) StreamStarted() { r.streams.Inc() }

// StreamEnded ends what StreamStarted counted: the stream completed, failed or lost its client.
func (r *Route) StreamEnded() { r.streams.Dec() }

// WebSocketStarted counts a WebSocket tunnel as active; every call is matched by one
// WebSocketEnded.
func (r *Route) WebSocketStarted() { r.sockets.Inc() }

// WebSocketEnded ends what WebSocketStarted counted and adds the bytes the client sent
// through the tunnel (the bytes the upstream sent count as response bytes).
func (r *Route) WebSocketEnded(clientBytes int64) {
	r.sockets.Dec()
	r.tunnelIn.Add(int(clientBytes))
}

// UpstreamError counts an upstream failure by reason (one of the Reason constants).
func (r *Route) UpstreamError(reason string) {
	if c := r.upErr[reason]; c != nil {
		c.Inc()
	}
}

// Canceled counts a request abandoned by its client before the response was complete.
func (r *Route) Canceled() { r.canceled.Inc() }

// Backend holds the metrics of one server of a service that outlive a config snapshot. A nil
// *Backend records nothing.
type Backend struct {
	series  *series
	connect *vm.PrometheusHistogram
}

// ForBackend returns the metrics of backend (a server URL as configured) of service, exposed
// from Publish on.
func ForBackend(service, backend string) *Backend {
	l := labels("service", service, "backend", backend)
	x := seriesOf("backend{" + l + "}")
	return &Backend{series: x, connect: x.s.GetOrCreatePrometheusHistogramExt(`sluice_upstream_connect_seconds{`+l+`}`, ConnectBuckets)}
}

// Publish exposes the backend's series once a configuration naming it is in force.
// Idempotent.
func (b *Backend) Publish() { b.series.publish() }

func (b *Backend) groups() []*series {
	if b == nil {
		return nil
	}
	return []*series{b.series}
}

// Connected records d, the time a new upstream connection took to open (TCP connect, plus
// the TLS handshake for https).
func (b *Backend) Connected(d time.Duration) {
	if b != nil {
		b.connect.Update(d.Seconds())
	}
}

// Entrypoint holds the per-entrypoint counters.
type Entrypoint struct {
	series   *series
	requests *vm.Counter
	loop     *vm.Counter         // requests run on an event loop
	rejected map[int]*vm.Counter // gateway errors by status
	other    *vm.Counter         // gateway errors with a status not in rejected
	shed     [shedReasons]*vm.Counter
}

// Shed is why the gateway closed a client connection to protect itself: the values of
// sluice_connections_shed_total's reason label.
type Shed uint8

const (
	// ShedHeaderTimeout: a request head (or its body) did not complete within the
	// entrypoint's read_header_timeout (slowloris, trickled bodies); answered 408.
	ShedHeaderTimeout Shed = iota
	// ShedClientStall: the client read nothing of a pending response for client_stall_timeout.
	ShedClientStall
	// ShedPipelineOverflow: the client pipelined more than one request's limits of input
	// behind a response in flight; the connection takes no further request.
	ShedPipelineOverflow
	// ShedMaxConnections: accepted over max_connections and closed at once.
	ShedMaxConnections
	shedReasons
)

var shedNames = [shedReasons]string{"header_timeout", "client_stall", "pipeline_overflow", "max_connections"}

// String returns the reason label value ("header_timeout").
func (s Shed) String() string { return shedNames[s] }

// gatewayErrorStatuses are the statuses the gateway answers with itself: framing errors and
// limits (400, 408, 413, 414, 431, 501, 505), no route (404), a failed stage (500) and upstream
// failures (502, 503, 504). A stage may answer with others; they count as status="other".
var gatewayErrorStatuses = []int{400, 404, 408, 413, 414, 431, 500, 501, 502, 503, 504, 505}

// ForEntrypoint returns the counters of entrypoint name, the same series for every transport
// of the name; they are exposed from Publish on.
func ForEntrypoint(name string) *Entrypoint {
	l := labels("entrypoint", name)
	x := seriesOf("entrypoint{" + l + "}")
	e := &Entrypoint{
		series:   x,
		requests: x.s.GetOrCreateCounter(`sluice_requests_total{` + l + `}`),
		loop:     x.s.GetOrCreateCounter(`sluice_loop_requests_total{` + l + `}`),
		rejected: map[int]*vm.Counter{},
		other:    x.s.GetOrCreateCounter(`sluice_gateway_errors_total{` + l + `,status="other"}`),
	}
	for _, st := range gatewayErrorStatuses {
		e.rejected[st] = x.s.GetOrCreateCounter(`sluice_gateway_errors_total{` + l + `,status="` + strconv.Itoa(st) + `"}`)
	}
	for i, r := range shedNames {
		e.shed[i] = x.s.GetOrCreateCounter(`sluice_connections_shed_total{` + l + `,reason="` + r + `"}`)
	}
	return e
}

// Publish exposes the entrypoint's counters while a transport of it serves, and returns the
// release that transport calls once it has drained (later calls do nothing). From when the
// transport starts listening, so that an entrypoint of a refused configuration, bound and
// dropped, leaves none; until no transport of the name serves any more (each Publish
// released), when the counters are unexposed and forgotten, so that a reload that removes an
// entrypoint, or a gateway that drained, leaves none either: an entrypoint of the name
// published later counts from zero. The transports of one name share the counters: one that
// replaces another (a reload changed its address) publishes before the other is released,
// and the counts go on.
func (e *Entrypoint) Publish() (release func()) {
	if !e.series.hold() {
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(e.series.release) }
}

// Shed counts a client connection closed for reason r. Allocation free.
func (e *Entrypoint) Shed(r Shed) { e.shed[r].Inc() }

// Request counts a request received: a complete request head, or one refused before routing.
func (e *Entrypoint) Request() { e.requests.Inc() }

// LoopRequest counts a request run on the event loop that owns its client connection
// (upstream_io = "loop"): routed, sent upstream and answered there with no worker goroutine.
func (e *Entrypoint) LoopRequest() { e.loop.Inc() }

// GatewayError counts a response the gateway produced itself (no upstream answer).
func (e *Entrypoint) GatewayError(status int) {
	if c := e.rejected[status]; c != nil {
		c.Inc()
		return
	}
	e.other.Inc()
}

// EntrypointGauges publishes the live counts of entrypoint name, read at scrape time: open
// client connections and requests in progress. Several sources may count under one name at
// once (a reload replaced the entrypoint's listener and the old one drains): the gauges show
// their sum. The returned release removes this source; when the last source of a name is
// released, its series are removed too (the entrypoint is gone).
func EntrypointGauges(name string, conns, active func() int64) (release func()) {
	epGauges.mu.Lock()
	defer epGauges.mu.Unlock()
	if epGauges.m == nil {
		epGauges.m = map[string][]*epSource{}
	}
	src := &epSource{conns: conns, active: active}
	l := labels("entrypoint", name)
	connsName, activeName := `sluice_open_connections{`+l+`}`, `sluice_active_requests{`+l+`}`
	if len(epGauges.m[name]) == 0 {
		vm.GetOrCreateGauge(connsName, func() float64 { return epGauges.sum(name, false) })
		vm.GetOrCreateGauge(activeName, func() float64 { return epGauges.sum(name, true) })
	}
	epGauges.m[name] = append(epGauges.m[name], src)
	var once sync.Once
	return func() {
		once.Do(func() {
			epGauges.mu.Lock()
			defer epGauges.mu.Unlock()
			list := epGauges.m[name]
			for i, s := range list {
				if s == src {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) > 0 {
				epGauges.m[name] = list
				return
			}
			delete(epGauges.m, name)
			vm.UnregisterMetric(connsName)
			vm.UnregisterMetric(activeName)
		})
	}
}

// epSource is one transport's counts of an entrypoint.
type epSource struct{ conns, active func() int64 }

// epGaugeSources holds the sources of each entrypoint's gauges.
type epGaugeSources struct {
	mu sync.Mutex
	m  map[string][]*epSource
}

var epGauges epGaugeSources

// sum adds the counts of every source of entrypoint name, at scrape time.
func (g *epGaugeSources) sum(name string, active bool) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, s := range g.m[name] {
		if active {
			n += s.active()
		} else {
			n += s.conns()
		}
	}
	return float64(n)
}

// series is a group of series that keep their values across reloads (a router's, a
// backend's, an entrypoint's): created, unexposed, when a configuration naming them is
// compiled (or an entrypoint's transport is made), and exposed from the first publish on,
// once such a configuration is in force (or the transport serves). The same key gives the
// same group as long as the group is kept: while a configuration in force names it
// (InForce), or a transport of its entrypoint serves (hold), or for ever once published
// outside both. A group nothing holds any more is unexposed and forgotten, and the key then
// gives a new group, counting from zero. Its fields are guarded by allSeries.mu.
type series struct {
	key       string
	s         *vm.Set
	published bool
	held      int  // configurations in force that name the group
	forgotten bool // out of allSeries: publish does nothing
}

// allSeries holds every group kept by key: the family's kind and its labels.
var allSeries struct {
	mu sync.Mutex
	m  map[string]*series
}

// seriesOf returns the group of key, creating it unexposed.
func seriesOf(key string) *series {
	allSeries.mu.Lock()
	defer allSeries.mu.Unlock()
	x := allSeries.m[key]
	if x == nil {
		if allSeries.m == nil {
			allSeries.m = map[string]*series{}
		}
		x = &series{key: key, s: vm.NewSet()}
		allSeries.m[key] = x
	}
	return x
}

// hold exposes the group and holds it until release, for a holder other than a configuration
// in force (an entrypoint's serving transport); false, and nothing exposed or held, when
// another group of its key is kept (keptLocked).
func (x *series) hold() bool {
	allSeries.mu.Lock()
	defer allSeries.mu.Unlock()
	if !x.keptLocked() {
		return false
	}
	x.held++
	x.publishLocked()
	return true
}

// release lets go of a hold: the group goes when nothing holds it any more.
func (x *series) release() {
	allSeries.mu.Lock()
	defer allSeries.mu.Unlock()
	if x.held--; x.held == 0 {
		x.forgetLocked()
	}
}

// publish exposes the group; later calls do nothing.
func (x *series) publish() {
	allSeries.mu.Lock()
	defer allSeries.mu.Unlock()
	x.publishLocked()
}

func (x *series) publishLocked() {
	if !x.published && x.keptLocked() {
		vm.RegisterSet(x.s)
		x.published = true
	}
}

// keptLocked reports whether x is in allSeries, putting it back when it was forgotten, as
// made for a refused configuration, while it was made for one going in force or for an
// entrypoint about to serve (an activation forgets every group not yet published); false
// when another group of its key is kept, which x must not be exposed beside.
func (x *series) keptLocked() bool {
	if !x.forgotten {
		return true
	}
	if allSeries.m[x.key] != nil {
		return false
	}
	x.forgotten = false
	allSeries.m[x.key] = x
	return true
}

// forgetLocked unexposes x and takes it out of allSeries.
func (x *series) forgetLocked() {
	if x.published {
		vm.UnregisterSet(x.s, false)
		x.published = false
	}
	if allSeries.m[x.key] == x {
		delete(allSeries.m, x.key)
	}
	x.forgotten = true
}

// Named is a metrics handle whose series a configuration names: a *Route, *Backend, *Health,
// *Mirror, *Split or *Scaling. A nil handle names none.
type Named interface{ groups() []*series }

// Held is what InForce holds for one configuration in force, to be passed back when that
// configuration is replaced.
type Held []*series

// InForce exposes the series of next (the handles a configuration going in force was compiled
// with) and holds them while it is in force; it then lets go of prev (what InForce returned
// for the configuration it replaces, nil for none). A group that no configuration in force
// holds any more is unexposed and forgotten: a configuration naming its router, backend,
// mirror... again later starts it from zero, and a request of the replaced configuration still
// in flight counts into series no one scrapes. Groups made for configurations compiled and
// refused (never published) are forgotten too. Several configurations may be in force at once
// (one per gateway of a process); a group goes when none holds it. Runs at activation only:
// it walks every group.
func InForce(next []Named, prev Held) Held {
	allSeries.mu.Lock()
	defer allSeries.mu.Unlock()
	var held Held
	for _, n := range next {
		for _, x := range n.groups() {
			if !x.keptLocked() {
				continue // x stays unexposed
			}
			x.held++
			x.publishLocked()
			held = append(held, x)
		}
	}
	for _, x := range prev {
		if x.held--; x.held == 0 {
			x.forgetLocked()
		}
	}
	for _, x := range allSeries.m {
		if x.held == 0 && !x.published {
			x.forgetLocked()
		}
	}
	return held
}

// The configuration's load and reload metrics.
var (
	reloadsOK      = vm.NewCounter(`sluice_config_reloads_total{result="success"}`)
	reloadsFailed  = vm.NewCounter(`sluice_config_reloads_total{result="failure"}`)
	lastGoodReload = vm.NewGauge(`sluice_config_last_reload_success_timestamp_seconds`, nil)
)

// ConfigLoaded records that a configuration was put in force at t, at start or by a reload.
func ConfigLoaded(t time.Time) { lastGoodReload.Set(float64(t.UnixMilli()) / 1e3) }

// ConfigReloaded counts a reload: ok when its configuration was put in force at t, else a
// failure that left the running configuration in force.
func ConfigReloaded(ok bool, t time.Time) {
	if !ok {
		reloadsFailed.Inc()
		return
	}
	reloadsOK.Inc()
	ConfigLoaded(t)
}

// Set is a group of metrics that lives as long as one config snapshot (gauges over its
// backends); Retire removes them when the snapshot is replaced.
type Set struct {
	s          *vm.Set
	registered bool
}

// NewSet returns an empty set; Register publishes it.
func NewSet() *Set { return &Set{s: vm.NewSet()} }

// Register publishes the set's metrics (after the set it replaces was retired, so that no
// series is exposed twice).
func (s *Set) Register() {
	vm.RegisterSet(s.s)
	s.registered = true
}

// Backend adds the live gauges of backend (a server URL as configured) of service, read at
// scrape time: requests in flight, whether it is eligible for balancing, and idle pooled
// connections.
func (s *Set) Backend(service, backend string, active func() int64, up func() bool, idle func() int) {
	l := labels("service", service, "backend", backend)
	s.s.GetOrCreateGauge(`sluice_upstream_active{`+l+`}`, func() float64 { return float64(active()) })
	s.s.GetOrCreateGauge(`sluice_backend_up{`+l+`}`, func() float64 {
		if up() {
			return 1
		}
		return 0
	})
	s.s.GetOrCreateGauge(`sluice_upstream_idle_connections{`+l+`}`, func() float64 { return float64(idle()) })
}

// Model adds the gauges of a model alias's admission pool, read at scrape time: requests
// holding a slot and requests queued.
func (s *Set) Model(alias string, active, queued func() int64) {
	l := labels("model", alias)
	s.s.GetOrCreateGauge(`sluice_model_active_requests{`+l+`}`, func() float64 { return float64(active()) })
	s.s.GetOrCreateGauge(`sluice_model_queued_requests{`+l+`}`, func() float64 { return float64(queued()) })
}

// Breaker states, the values of sluice_circuit_breaker_state.
const (
	BreakerClosed   = 0
	BreakerOpen     = 1
	BreakerHalfOpen = 2
)

// Breaker adds the gauge of the circuit breaker of middleware over backend (a server URL as
// configured) of service, read at scrape time: BreakerClosed, BreakerOpen or
// BreakerHalfOpen.
func (s *Set) Breaker(middleware, service, backend string, state func() int) {
	l := labels("middleware", middleware, "service", service, "backend", backend)
	s.s.GetOrCreateGauge(`sluice_circuit_breaker_state{`+l+`}`, func() float64 { return float64(state()) })
}

// Retire unregisters the set.
func (s *Set) Retire() {
	if s.registered {
		vm.UnregisterSet(s.s, true)
		s.registered = false
	}
}

// labels formats name="value" pairs for a metric name, with values escaped as the Prometheus
// text format wants (backslash, double quote and newline); names come from this package.
func labels(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// QueueWaitBuckets are the bucket bounds of admission queue waits, in seconds: 1 ms to 60 s.
var QueueWaitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Model holds the metrics of one model alias: its admission's refusals and queue waits, its
// targets' tokens by consumer and the answers that did not report their usage. They survive
// reloads that keep the alias and go once no configuration in force names it (InForce). Its
// methods are safe for concurrent use; all but Tokens and UsageMissing are allocation free.
type Model struct {
	series   *series
	alias    string
	rejected map[string]*vm.Counter // by reason
	wait     *vm.PrometheusHistogram
}

// ForModel returns the metrics of model alias, creating them on first use. reasons are the
// rejection reasons the alias can count.
func ForModel(alias string, reasons ...string) *Model {
	l := labels("model", alias)
	x := seriesOf("model{" + l + "}")
	m := &Model{series: x, alias: alias, rejected: map[string]*vm.Counter{},
		wait: x.s.GetOrCreatePrometheusHistogramExt(`sluice_model_queue_wait_seconds{`+l+`}`, QueueWaitBuckets)}
	for _, r := range reasons {
		m.rejected[r] = x.s.GetOrCreateCounter(`sluice_model_rejected_total{` + labels("model", alias, "reason", r) + `}`)
	}
	return m
}

func (m *Model) groups() []*series {
	if m == nil {
		return nil
	}
	return []*series{m.series}
}

// Rejected counts a request the alias's admission refused, by reason.
func (m *Model) Rejected(reason string) {
	if c := m.rejected[reason]; c != nil {
		c.Inc()
	}
}

// Waited records how long an admitted request waited in the alias's queue.
func (m *Model) Waited(d time.Duration) { m.wait.Update(d.Seconds()) }

// Tokens counts the tokens of one model alias's target for one consumer.
type Tokens struct {
	prompt, completion, cached *vm.Counter
}

// Tokens returns the token counters of the alias's target for consumer, creating them on
// first use (it formats their names: callers keep what it returns).
func (m *Model) Tokens(target, consumer string) *Tokens {
	series := func(kind string) *vm.Counter {
		return m.series.s.GetOrCreateCounter(`sluice_model_tokens_total{` + labels("model", m.alias, "target", target, "consumer", consumer, "kind", kind) + `}`)
	}
	return &Tokens{prompt: series("prompt"), completion: series("completion"), cached: series("cached")}
}

// Add counts one response's usage, in tokens.
func (t *Tokens) Add(prompt, completion, cached int64) {
	if prompt > 0 {
		t.prompt.Add(int(prompt))
	}
	if completion > 0 {
		t.completion.Add(int(completion))
	}
	if cached > 0 {
		t.cached.Add(int(cached))
	}
}

// UsageMissing counts a response of the alias that should have reported its usage and did
// not: a stream cut before its usage chunk, or an answer cut short or without a usage object
// it could read (one over sse.MaxUsageObjectBytes included).
func (m *Model) UsageMissing() {
	m.series.s.GetOrCreateCounter(`sluice_model_usage_missing_total{` + labels("model", m.alias) + `}`).Inc()
}

// Exclusions counts the servers of one observed service left out of a choice, by reason
// (sluice_worker_exclusions_total). The counters survive reloads that keep the service and go
// once no configuration in force observes it (InForce).
type Exclusions struct {
	series *series
	// Counters are the reasons' counters, in the order given to ForExclusions.
	Counters []*vm.Counter
}

// ForExclusions returns the exclusion counters of service, one per reason name.
func ForExclusions(service string, reasons ...string) *Exclusions {
	x := seriesOf("exclusions{" + labels("service", service) + "}")
	e := &Exclusions{series: x, Counters: make([]*vm.Counter, len(reasons))}
	for i, r := range reasons {
		e.Counters[i] = x.s.GetOrCreateCounter(`sluice_worker_exclusions_total{` + labels("service", service, "reason", r) + `}`)
	}
	return e
}

func (e *Exclusions) groups() []*series {
	if e == nil {
		return nil
	}
	return []*series{e.series}
}

// RateLimit counts the requests a rate-limit middleware refused. Its methods are safe for
// concurrent use and allocation free.
type RateLimit struct {
	series  *series
	limited *vm.Counter
}

// ForRateLimit returns the counter of rate-limit middleware name, creating it on first use;
// it survives reloads that keep the middleware and goes once no configuration in force names
// it (InForce).
func ForRateLimit(name string) *RateLimit {
	l := labels("middleware", name)
	x := seriesOf("ratelimit{" + l + "}")
	return &RateLimit{series: x, limited: x.s.GetOrCreateCounter(`sluice_rate_limited_total{` + l + `}`)}
}

func (r *RateLimit) groups() []*series {
	if r == nil {
		return nil
	}
	return []*series{r.series}
}

// Limited counts one request refused with 429.
func (r *RateLimit) Limited() { r.limited.Inc() }

// Prefix holds the prefix-affinity metrics of one model alias. Its methods are safe for
// concurrent use and allocation free.
type Prefix struct {
	series      *series
	outcomes    [7]*vm.Counter // by affinity.Outcome: none, hit, miss, short, busy, shared, behind
	invalidated *vm.Counter
	matched     *vm.Counter // canonical bytes of the requests' prefixes a hint routed to their holder
	scanned     *vm.Counter // canonical bytes of the requests' fingerprints
}

// PrefixOutcomes are the outcome labels of sluice_prefix_affinity_selections_total, by the
// affinity package's Outcome value ("" for none, which is not counted).
var PrefixOutcomes = [7]string{"", "hit", "miss", "short", "busy", "shared", "behind"}

// ForPrefix returns the prefix-affinity metrics of model alias, creating them on first use;
// the series survive reloads that keep the alias and go with its other series (InForce).
func ForPrefix(alias string) *Prefix {
	x := seriesOf("prefix{" + labels("model", alias) + "}")
	p := &Prefix{
		series:      x,
		invalidated: x.s.GetOrCreateCounter(`sluice_prefix_affinity_invalidations_total{` + labels("model", alias) + `}`),
		matched:     x.s.GetOrCreateCounter(`sluice_prefix_affinity_matched_bytes_total{` + labels("model", alias) + `}`),
		scanned:     x.s.GetOrCreateCounter(`sluice_prefix_affinity_scanned_bytes_total{` + labels("model", alias) + `}`),
	}
	for i, o := range PrefixOutcomes {
		if o != "" {
			p.outcomes[i] = x.s.GetOrCreateCounter(`sluice_prefix_affinity_selections_total{` + labels("model", alias, "outcome", o) + `}`)
		}
	}
	return p
}

func (p *Prefix) groups() []*series {
	if p == nil {
		return nil
	}
	return []*series{p.series}
}

// Selected counts a request routed with outcome (an affinity.Outcome value), whose
// fingerprint scanned scanned canonical bytes (affinity.Print.Scanned) of which the hint that
// chose its backend covered matched (affinity.Choice.Prefix: 0 unless a hint chose).
// matched over scanned, summed, is the share of prompt bytes sent where they were cached.
func (p *Prefix) Selected(outcome uint8, matched, scanned int) {
	if int(outcome) < len(p.outcomes) && p.outcomes[outcome] != nil {
		p.outcomes[outcome].Inc()
	}
	if matched > 0 {
		p.matched.Add(matched)
	}
	if scanned > 0 {
		p.scanned.Add(scanned)
	}
}

// Invalidated counts a hint dropped after a full cache miss.
func (p *Prefix) Invalidated() { p.invalidated.Inc() }

var (
	prefixEvictions  = vm.NewCounter(`sluice_prefix_affinity_evictions_total`)
	accessLogDropped = vm.NewCounter(`sluice_access_log_dropped_total`)
)

// AccessLogDropped counts an access log line lost because its destination fell behind.
func AccessLogDropped() { accessLogDropped.Inc() }

var logDropped = vm.NewCounter(`sluice_log_dropped_total`)

// LogDropped counts a line of the gateway's own log lost because standard error fell behind.
func LogDropped() { logDropped.Inc() }

// PrefixEvicted counts a live prefix-index entry displaced by a new one.
func PrefixEvicted() { prefixEvictions.Inc() }

// PrefixIndex exposes the size of the process's prefix index: entries() is called at each
// scrape. The first call's entries is the one kept.
func PrefixIndex(entries func() int) {
	vm.GetOrCreateGauge(`sluice_prefix_affinity_index_entries`, func() float64 { return float64(entries()) })
}

// TLSCertificateReload counts a reload of entrypoint's certificates after their files changed:
// ok false when a new file could not be loaded (the certificates in use stay). The counter is
// one of the entrypoint's series (ForEntrypoint), so it is exposed while a transport of the
// entrypoint serves and goes with the entrypoint's other counters when a reload removes it.
// Rare (a file event), so the counter is looked up on each call.
func TLSCertificateReload(entrypoint string, ok bool) {
	result := "success"
	if !ok {
		result = "failure"
	}
	l := labels("entrypoint", entrypoint)
	seriesOf("entrypoint{" + l + "}").s.GetOrCreateCounter(`sluice_tls_certificate_reloads_total{` + l + `,result="` + result + `"}`).Inc()
}
