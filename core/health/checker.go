package health

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/pool"
)

// Target is one server an active Checker probes, and its judged state. Its methods are safe
// for concurrent use.
type Target struct {
	// Name labels the target in logs and callbacks (a server URL as configured).
	Name string
	// URL is the server's base URL, "http://host:port" or "https://host:port".
	URL string

	healthy atomic.Bool
	changed chan struct{} // closed and replaced at each change of healthy
	mu      sync.Mutex

	runMu          sync.Mutex
	okRun, failRun int // consecutive results
}

// NewTarget returns a target in state healthy: a server the gateway already serves from
// starts healthy (true), a replica still starting starts unhealthy (false).
func NewTarget(name, url string, healthy bool) *Target {
	t := &Target{Name: name, URL: url, changed: make(chan struct{})}
	t.healthy.Store(healthy)
	return t
}

// Healthy reports the target's judged state.
func (t *Target) Healthy() bool { return t.healthy.Load() }

// set records state h and reports whether it changed.
func (t *Target) set(h bool) bool {
	if t.healthy.Load() == h {
		return false
	}
	t.mu.Lock()
	t.healthy.Store(h)
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
	return true
}

// WaitHealthy blocks until the target is judged healthy (nil) or ctx ends (its error): what a
// replica lifecycle waits on before it admits a new replica.
func (t *Target) WaitHealthy(ctx context.Context) error {
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		if t.healthy.Load() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Result is one probe's outcome, as a Checker reports it to its observer.
type Result struct {
	Target *Target
	// Err is nil for a passed probe, else why it failed.
	Err error
	// Changed is set when this result flipped the target's state (to Target.Healthy()).
	Changed bool
}

// Checker probes its targets, each in its own goroutine, every Spec.Interval (the first probe
// at once, the next ones spread by a jitter of up to a tenth of the interval so that many
// gateways do not probe in step), until Stop.
type Checker struct {
	spec    Spec
	client  *http.Client
	owned   bool // client was made by New: Stop closes its connections
	targets []*Target
	observe func(Result)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  sync.Once
}

// New returns a checker of targets by spec. observe, when not nil, is called from the probing
// goroutines after each probe; it must not block for long. client nil uses NewClient(), whose
// connections Stop closes; a client passed in is the caller's, who closes its idle
// connections (CloseIdleConnections) once no checker uses it, so that checkers one after the
// other (a reload) can probe over the same connections.
func New(spec Spec, client *http.Client, targets []*Target, observe func(Result)) *Checker {
	owned := client == nil
	if owned {
		client = NewClient(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Checker{spec: spec, client: client, owned: owned, targets: targets, observe: observe, ctx: ctx, cancel: cancel}
}

// Targets returns the checker's targets.
func (c *Checker) Targets() []*Target { return c.targets }

// Start begins probing. It is idempotent.
func (c *Checker) Start() {
	c.start.Do(func() {
		for _, t := range c.targets {
			c.wg.Add(1)
			go c.run(t)
		}
	})
}

// Stop ends probing: a probe in flight is cancelled, and Stop returns when every goroutine of
// the checker has ended, so that no probe reaches a server after it (a removed backend gets
// none), and with the connections of a client New made closed: an idle keep-alive
// connection would otherwise hold a descriptor and two goroutines until the transport's idle
// timeout. It is idempotent; Start after Stop does nothing.
func (c *Checker) Stop() {
	c.start.Do(func() {}) // a checker stopped before it started never starts
	c.cancel()
	c.wg.Wait()
	if c.owned {
		c.client.CloseIdleConnections()
	}
}

func (c *Checker) run(t *Target) {
	defer c.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-timer.C:
		}
		err := c.spec.Probe(c.ctx, c.client, t.URL)
		if c.ctx.Err() != nil {
			return // stopped during the probe: its result judges nothing
		}
		if !pool.LocalResource(err) {
			// A probe that found the gateway's own host short of descriptors, memory or
			// ports says nothing of the target.
			c.judge(t, err)
		}
		d := c.spec.Interval
		if j := int64(d / 10); j > 0 {
			d += time.Duration(rand.Int64N(j))
		}
		timer.Reset(d)
	}
}

// judge counts a probe's result and flips t after the configured run.
func (c *Checker) judge(t *Target, err error) {
	changed := false
	t.runMu.Lock()
	if err == nil {
		t.okRun, t.failRun = t.okRun+1, 0
		if t.okRun >= c.spec.HealthyThreshold {
			changed = t.set(true)
		}
	} else {
		t.okRun, t.failRun = 0, t.failRun+1
		if t.failRun >= c.spec.UnhealthyThreshold {
			changed = t.set(false)
		}
	}
	t.runMu.Unlock()
	if c.observe != nil {
		c.observe(Result{Target: t, Err: err, Changed: changed})
	}
}
