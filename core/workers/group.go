package workers

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pool"
)

// PlainRecheck is how often a server that answered 404 is asked again: seldom, since an
// OpenAI-compatible server logs every request, yet so that one redeployed as a worker is
// noticed.
const PlainRecheck = 30 * time.Second

// Config is how a Group polls, from [services.<name>.workers].
type Config struct {
	// Service names the service (for display).
	Service string
	// Interval is the time between two rounds of polls; it bounds each poll too. Required
	// (> 0).
	Interval time.Duration
	// TTL is how long an observation counts from its receipt. Required (> Interval).
	TTL time.Duration
	// APIKey, when set, is sent as Authorization: Bearer.
	APIKey string
}

// Member is one server of a Group.
type Member struct {
	// URL is the server's URL as configured ("http://10.0.0.5:8000"); the observation is
	// polled at URL + ObservationPath.
	URL string
	// Name is the URL as shown (with ${NAME} references as written).
	Name string
	// LB is the server's balancer entry: its ID is the member's index, its Active count the
	// gateway's requests in flight to it.
	LB *balancer.Backend
	// Worker is the server's state kept from the previous snapshot; nil for a new server.
	Worker *Worker
}

// Group observes the servers of one service for one snapshot. Start begins polling, Stop
// ends it; the request path reads it through Exclude and Judge.
type Group struct {
	cfg     Config
	ttl     int64 // ns
	members []Member
	urls    []string
	client  *http.Client

	// excluded counts the servers left out of a choice, by reason (sluice_worker_exclusions_total).
	excluded   [numReasons]*vm.Counter
	exclusions *metrics.Exclusions // the series of excluded

	// serving, when set, says whether server i has a process that serves (SetServing): the
	// rounds leave the others out.
	serving atomic.Pointer[func(i int) bool]

	startOnce, stopOnce sync.Once
	ctx                 context.Context
	cancel              context.CancelFunc
	done                chan struct{}
}

// Metrics returns the group's exclusion counters, for metrics.InForce.
func (g *Group) Metrics() *metrics.Exclusions { return g.exclusions }

// NewGroup returns the group over members (in balancer ID order), taking over the Workers
// they carry. It does not poll until Start.
func NewGroup(cfg Config, members []Member) *Group {
	g := &Group{cfg: cfg, ttl: int64(cfg.TTL), members: append([]Member(nil), members...), done: make(chan struct{})}
	for i := range g.members {
		m := &g.members[i]
		if m.Worker == nil {
			m.Worker = new(Worker)
		}
		g.urls = append(g.urls, strings.TrimSuffix(m.URL, "/")+ObservationPath)
	}
	g.exclusions = metrics.ForExclusions(cfg.Service, reasonNames[IdentityChanged:]...)
	copy(g.excluded[IdentityChanged:], g.exclusions.Counters)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.client = &http.Client{
		Transport: &http.Transport{
			// No proxy from the environment: the workers are reached as the data path
			// reaches them.
			Proxy:               nil,
			DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     max(2*cfg.Interval, 30*time.Second),
		},
		// A redirect is not an observation.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return g
}

// Service returns the name of the group's service.
func (g *Group) Service() string { return g.cfg.Service }

// Config returns the group's polling configuration.
func (g *Group) Config() Config { return g.cfg }

// Len returns the number of servers.
func (g *Group) Len() int { return len(g.members) }

// Member returns server i (its balancer ID).
func (g *Group) Member(i int) Member { return g.members[i] }

// Start begins polling: a first round at once, then one every Interval. It is idempotent,
// and does nothing after Stop.
func (g *Group) Start() {
	g.startOnce.Do(func() { go g.run() })
}

// Stop ends polling, cancelling polls in flight, and returns once the group's goroutine has
// returned. It is idempotent, and safe on a group never started.
func (g *Group) Stop() {
	g.stopOnce.Do(func() {
		g.cancel()
		started := true
		g.startOnce.Do(func() { started = false })
		if !started {
			close(g.done)
		}
		<-g.done
		g.client.CloseIdleConnections()
	})
}

// Done is closed once the group has stopped polling for good.
func (g *Group) Done() <-chan struct{} { return g.done }

func (g *Group) run() {
	defer close(g.done)
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		g.round()
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SetServing makes the rounds poll only the servers for which f (nil: every server) reports
// true: a scaled service's replica slots have a process only while the load asks for one, and
// a slot without a serving replica would answer every poll with a refused connection, logged
// as the worker's failure. Such a slot gets no request either; its replica is polled when it
// becomes ready (Refresh). f is called from the rounds' goroutine and must not block.
func (g *Group) SetServing(f func(i int) bool) {
	if f == nil {
		g.serving.Store(nil)
		return
	}
	g.serving.Store(&f)
}

// round polls every server once, concurrently, and returns when each poll has answered or
// Interval has passed.
func (g *Group) round() {
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.Interval)
	defer cancel()
	now := monoNow()
	var serving func(int) bool
	if f := g.serving.Load(); f != nil {
		serving = *f
	}
	var wg sync.WaitGroup
	for i := range g.members {
		if serving != nil && !serving(i) {
			continue
		}
		r := g.members[i].Worker.load()
		if r.kind == Plain && r.err == "" && now-r.probed < int64(PlainRecheck) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.poll(ctx, i)
		}()
	}
	wg.Wait()
}

// Refresh polls server i at once, out of the rounds, and returns when its observation is in
// (or the poll failed, or Interval passed). A scaled service calls it when a replica passes
// its readiness probe, before the requests its buffer held go to it: the replica's
// observation is then the one of a ready worker, not the one polled while it started, which
// would leave it out as not ready. A new identity (a replica is a new process) is confirmed
// by a second poll at once, as the next round would confirm it. It does nothing once the
// group has stopped.
func (g *Group) Refresh(i int) {
	if i < 0 || i >= len(g.members) {
		return
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(g.ctx, g.cfg.Interval)
		g.poll(ctx, i)
		cancel()
		if v := g.members[i].Worker.View(); !v.IdentityChanged || g.ctx.Err() != nil {
			return
		}
	}
}

// poll asks server i for its observation and publishes the outcome.
func (g *Group) poll(ctx context.Context, i int) {
	m := &g.members[i]
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.urls[i], nil)
	if err != nil {
		g.failed(m, "bad server URL", time.Now())
		return
	}
	req.Header.Set("Accept", "application/json")
	if g.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+g.cfg.APIKey)
	}
	sent := monoNow()
	resp, err := g.client.Do(req)
	if err != nil {
		switch {
		case g.ctx.Err() != nil: // a poll cut short by Stop
		case pool.LocalResource(err):
			g.short(m, err, time.Now())
		default:
			g.failed(m, describe(err), time.Now())
		}
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxObservationBytes+1))
	now, wall := monoNow(), time.Now()
	switch {
	case g.ctx.Err() != nil:
	case resp.StatusCode == http.StatusNotFound:
		m.Worker.plain(now)
	case resp.StatusCode != http.StatusOK:
		g.failed(m, "status "+strconv.Itoa(resp.StatusCode)+statusHint(resp.StatusCode), wall)
	case err != nil:
		g.failed(m, describe(err), wall)
	case len(body) > maxObservationBytes:
		g.failed(m, "observation over 64 KiB", wall)
	default:
		o, err := ParseObservation(body)
		if err != nil {
			g.failed(m, err.Error(), wall)
			return
		}
		m.Worker.observed(o, m.LB.Active(), sent, now, wall)
	}
}

// failed records a failed poll of m and logs it when its reason is new, so that a worker the
// gateway cannot observe (a wrong key, a crash) is said once, not every interval.
func (g *Group) failed(m *Member, reason string, wall time.Time) {
	if m.Worker.failed(reason, false, wall) {
		slog.Warn("worker observation failed; the worker gets no request that needs one", "service", g.cfg.Service, "server", m.Name, "error", reason)
	}
}

// short records a poll of m the gateway could not make for want of its own descriptors,
// memory or ports (pool.LocalResource), and logs it when new, in words that do not blame the
// worker: its observation ages as it would without a poll.
func (g *Group) short(m *Member, err error, wall time.Time) {
	cause := err.Error()
	var errno syscall.Errno
	if errors.As(err, &errno) {
		cause = errno.Error()
	}
	if m.Worker.failed("the gateway is short of resources: "+cause, true, wall) {
		slog.Warn("cannot observe the worker: the gateway is short of resources", "service", g.cfg.Service, "server", m.Name, "error", cause)
	}
}

func statusHint(status int) string {
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return " (is services.<name>.workers.api_key_env the workers' key?)"
	}
	return ""
}

// describe names why a poll failed without the server's address, which may have come from
// the environment and is shown as written elsewhere.
func describe(err error) string {
	var ne net.Error
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "no answer within observe_interval"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before an answer"
	case errors.As(err, &dns):
		return "host name does not resolve"
	case errors.As(err, &cert):
		return "TLS certificate not trusted"
	}
	return "request failed"
}
