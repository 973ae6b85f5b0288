// Package metrics defines the gateway's Prometheus metrics (DESIGN.md §4) on
// VictoriaMetrics/metrics: prefix sluice_, bounded label sets (entrypoint, router, service,
// backend, code class, reason). Metric handles are created when a config is compiled, so the
// hot path only updates counters and histograms and never formats a metric name.
package metrics

import (
	"fmt"
	"strconv"
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

// Route holds the per-router metrics. Its methods are safe for concurrent use and allocation
// free.
type Route struct {
	responses [6]*vm.Counter // by status class: index 1..5 for 1xx..5xx, 0 for anything else
	duration  *vm.Histogram
	ttft      *vm.Histogram
	itl       *vm.Histogram
	bytesOut  *vm.Counter
	upErr     map[string]*vm.Counter
	canceled  *vm.Counter
}

var classes = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// ForRoute returns the metrics of router (served by service), creating them on first use.
// Metrics survive reloads: the same router name gets the same counters.
func ForRoute(router, service string) *Route {
	l := fmt.Sprintf(`router=%q,service=%q`, router, service)
	r := &Route{
		duration: vm.GetOrCreateHistogram(`sluice_request_duration_seconds{` + l + `}`),
		ttft:     vm.GetOrCreateHistogram(`sluice_ttft_seconds{` + l + `}`),
		itl:      vm.GetOrCreateHistogram(`sluice_inter_token_latency_seconds{` + l + `}`),
		bytesOut: vm.GetOrCreateCounter(`sluice_response_bytes_total{` + l + `}`),
		canceled: vm.GetOrCreateCounter(`sluice_client_canceled_total{` + l + `}`),
		upErr:    map[string]*vm.Counter{},
	}
	for i, c := range classes {
		r.responses[i] = vm.GetOrCreateCounter(`sluice_responses_total{` + l + `,code="` + c + `"}`)
	}
	for _, reason := range []string{ReasonDial, ReasonTimeout, ReasonProtocol, ReasonClosed, ReasonStream} {
		r.upErr[reason] = vm.GetOrCreateCounter(`sluice_upstream_errors_total{` + l + `,reason="` + reason + `"}`)
	}
	return r
}

// Response counts a response with status to the client, the time since start (the request
// was complete) and the response body bytes relayed.
func (r *Route) Response(status int, start time.Time, bytes int64) {
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	r.responses[c].Inc()
	r.duration.UpdateDuration(start)
	if bytes > 0 {
		r.bytesOut.Add(int(bytes))
	}
}

// FirstByte records d, the time to the first body byte of a streamed response (TTFT as the
// client sees it, gateway included).
func (r *Route) FirstByte(d time.Duration) { r.ttft.Update(d.Seconds()) }

// Gap records the time between two body reads of a streamed response (inter-token latency).
func (r *Route) Gap(d time.Duration) { r.itl.Update(d.Seconds()) }

// UpstreamError counts an upstream failure by reason (one of the Reason constants).
func (r *Route) UpstreamError(reason string) {
	if c := r.upErr[reason]; c != nil {
		c.Inc()
	}
}

// Canceled counts a request abandoned by its client before the response was complete.
func (r *Route) Canceled() { r.canceled.Inc() }

// Entrypoint holds the per-entrypoint metrics.
type Entrypoint struct {
	requests *vm.Counter
	rejected map[int]*vm.Counter // framing errors by status
	name     string
}

// ForEntrypoint returns the metrics of entrypoint name.
func ForEntrypoint(name string) *Entrypoint {
	e := &Entrypoint{name: name, requests: vm.GetOrCreateCounter(`sluice_requests_total{entrypoint="` + name + `"}`), rejected: map[int]*vm.Counter{}}
	for _, st := range []int{400, 404, 408, 413, 431, 501, 502, 503, 504, 505} {
		e.rejected[st] = vm.GetOrCreateCounter(`sluice_gateway_errors_total{entrypoint="` + name + `",status="` + strconv.Itoa(st) + `"}`)
	}
	return e
}

// Request counts a complete request head received.
func (e *Entrypoint) Request() { e.requests.Inc() }

// GatewayError counts a response the gateway produced itself (no upstream answer).
func (e *Entrypoint) GatewayError(status int) {
	if c := e.rejected[status]; c != nil {
		c.Inc()
	}
}

// Gauge registers a gauge whose value is read from f at scrape time (connections, active
// requests). Registering the same name again keeps the first function.
func Gauge(name string, f func() float64) { vm.GetOrCreateGauge(name, f) }

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

// Gauge adds a gauge read from f at scrape time.
func (s *Set) Gauge(name string, f func() float64) { s.s.GetOrCreateGauge(name, f) }

// Retire unregisters the set.
func (s *Set) Retire() {
	if s.registered {
		vm.UnregisterSet(s.s, true)
		s.registered = false
	}
}
