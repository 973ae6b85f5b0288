package breaker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/middleware/retry"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// retryAt503 returns a retry middleware that sends a request again after a 503, at once and
// with budget to spare.
func retryAt503() *retry.Stage {
	return retry.New(config.RetryOptions{Attempts: 3, InitialBackoff: time.Microsecond, MaxBackoff: time.Microsecond,
		Budget: 1, MinRetries: 1000, Statuses: []int{503}}, nil)
}

// failingAndHealthy returns a service over two upstreams, the first answering 503, the
// second 200.
func failingAndHealthy(t *testing.T) (svc *pipeline.Service, bad, good *mwtest.Upstream) {
	bad = mwtest.NewUpstream(t, mwtest.Status(503))
	good = mwtest.NewUpstream(t, mwtest.Status(200))
	return mwtest.NewService(t, "up", bad.Addr(), good.Addr()), bad, good
}

// A 503 that the retry middleware sent again counts against the backend that gave it: with
// failure_threshold 1 its breaker opens at once, and the requests after it go to the healthy
// backend alone.
func TestRetriedFailureCountsAgainstItsBackend(t *testing.T) {
	svc, bad, good := failingAndHealthy(t)
	s, _ := newStage(t, opts(1, 1, time.Hour), svc)
	h := mwtest.On(t, svc, s, retryAt503())

	for i := range 6 {
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, 200, r.Status, "request %d", i)
		require.Equal(t, "http://"+good.Addr(), r.Backend, "request %d", i)
	}
	require.Equal(t, 1, bad.Count(), "the retried 503 opened the breaker")
	require.Equal(t, open, s.breakers[svc.Backends[0]].State())
	require.Equal(t, closed, s.breakers[svc.Backends[1]].State())
}

// A probe whose 503 the retry middleware sent again failed: the breaker opens for another
// cooldown, and the request is served by the healthy backend.
func TestRetriedProbeFailureReopens(t *testing.T) {
	svc, bad, good := failingAndHealthy(t)
	s, clk := newStage(t, opts(1, 1, 10*time.Second), svc)
	h := mwtest.On(t, svc, s, retryAt503())
	br := s.breakers[svc.Backends[0]]
	br.record(failed, false, clk.now(), &s.opts)
	require.Equal(t, open, br.State())

	clk.advance(10 * time.Second)
	for i := 0; bad.Count() == 0; i++ {
		require.Less(t, i, 4, "round-robin sends the probe within two requests")
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, 200, r.Status, "request %d", i)
	}
	require.Equal(t, open, br.State(), "the retried probe failed")
	for i := range 4 {
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, "http://"+good.Addr(), r.Backend, "request %d", i)
	}
	require.Equal(t, 1, bad.Count(), "no request reached the backend during its new cooldown")
}

// keepOut is a vet stage that refuses one backend to every request, and counts the refusals
// made after a connect failure of the same request.
type keepOut struct {
	b         *pipeline.Backend
	afterDial int
}

func (k *keepOut) OnVet(rc *pipeline.RequestCtx, b *pipeline.Backend) error {
	if b != k.b {
		return nil
	}
	if rc.Outcome().UpstreamError == metrics.ReasonDial {
		k.afterDial++
	}
	return rc.Reply(503, "text/plain", nil)
}

// A backend that a vet stage after the breaker refused was sent nothing, and is not judged;
// also when the request could not connect to another backend before.
func TestBackendRefusedAfterAConnectFailureIsNotJudged(t *testing.T) {
	kept := mwtest.NewUpstream(t, mwtest.Status(200))
	good := mwtest.NewUpstream(t, mwtest.Status(200))
	dead := mwtest.NewUpstream(t, mwtest.Status(200))
	dead.Close() // nothing listens at its address any more
	svc := mwtest.NewService(t, "up", dead.Addr(), kept.Addr(), good.Addr())
	s, _ := newStage(t, opts(5, 1, time.Hour), svc)
	k := &keepOut{b: svc.Backends[1]}
	h := mwtest.On(t, svc, s, k)

	for i := range 6 {
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, 200, r.Status, "request %d", i)
		require.Equal(t, "http://"+good.Addr(), r.Backend, "request %d", i)
	}
	require.Positive(t, k.afterDial, "round-robin tried the kept-out backend after the dead one")
	require.Zero(t, kept.Count())
	require.Zero(t, countOf(s.breakers[svc.Backends[1]].w.Load()), "no failure counted")
	require.Equal(t, closed, s.breakers[svc.Backends[1]].State())
}
