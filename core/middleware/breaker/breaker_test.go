package breaker

import (
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/pipeline"
)

func opts(failures, successes int, cooldown time.Duration) config.CircuitBreakerOptions {
	return config.CircuitBreakerOptions{FailureThreshold: failures, SuccessThreshold: successes, Cooldown: cooldown}
}

// The state machine on its own, with the clock in the test's hands.
func TestBreakerOpensHalfOpensAndCloses(t *testing.T) {
	o := opts(3, 2, time.Second)
	const cd = 1000
	b := newBreaker(new(atomic.Uint64), "up", "http://127.0.0.1:1")
	t0 := int64(50_000)

	// Consecutive failures: a success in between starts the count over.
	b.record(failed, false, t0, &o)
	b.record(failed, false, t0, &o)
	b.record(succeeded, false, t0, &o)
	b.record(failed, false, t0, &o)
	b.record(failed, false, t0, &o)
	require.Equal(t, closed, b.State())
	require.Equal(t, pass, b.admit(t0, cd))
	require.Equal(t, open, b.record(failed, false, t0, &o), "the third failure in a row opens it")

	require.Equal(t, refuse, b.admit(t0+cd-1, cd), "open during the cooldown")
	require.Equal(t, time.Millisecond, b.retryAfter(t0+cd-1, cd))
	require.Equal(t, -1, b.record(succeeded, false, t0+10, &o), "a request admitted before the opening does not close it")

	// After the cooldown, one probe at a time; the first one turns it half-open (logged).
	require.Equal(t, firstProbe, b.admit(t0+cd, cd))
	require.Equal(t, halfOpen, b.State())
	require.Equal(t, refuse, b.admit(t0+cd, cd), "the probe is in flight")
	require.Equal(t, -1, b.record(failed, false, t0+cd, &o), "only the probe speaks for a half-open backend")
	require.Equal(t, halfOpen, b.State())

	// A failed probe opens it again for a whole cooldown.
	t1 := t0 + 5*cd
	require.Equal(t, open, b.record(failed, true, t1, &o))
	require.Equal(t, refuse, b.admit(t1+cd-1, cd))

	// A probe whose client left is not judged: the next request probes.
	require.Equal(t, firstProbe, b.admit(t1+cd, cd))
	require.Equal(t, -1, b.record(neither, true, t1+cd, &o))
	require.Equal(t, passProbe, b.admit(t1+cd, cd))

	// success_threshold consecutive successful probes close it.
	require.Equal(t, -1, b.record(succeeded, true, t1+cd, &o))
	require.Equal(t, halfOpen, b.State())
	require.Equal(t, passProbe, b.admit(t1+cd, cd), "the next probe")
	require.Equal(t, closed, b.record(succeeded, true, t1+cd, &o))
	require.Equal(t, pass, b.admit(t1+cd, cd))
	require.Equal(t, pass, b.admit(t1+cd, cd))
	require.Zero(t, countOf(b.w.Load()), "closed with a clean count")
}

// Concurrent picks of a half-open backend admit exactly one probe (run with -race).
func TestOneProbeAtATime(t *testing.T) {
	o := opts(1, 1, time.Second)
	b := newBreaker(new(atomic.Uint64), "up", "http://127.0.0.1:1")
	b.record(failed, false, 0, &o)
	var probes atomic.Int32
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				if v := b.admit(1000, 1000); v == passProbe || v == firstProbe {
					probes.Add(1)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	require.Equal(t, int32(1), probes.Load())
}

type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() int64              { return c.ms.Load() }
func (c *fakeClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func newStage(t *testing.T, o config.CircuitBreakerOptions, svc *pipeline.Service) (*Stage, *fakeClock) {
	t.Helper()
	s := New("cb", o, []*pipeline.Service{svc}, nil)
	clk := &fakeClock{}
	clk.ms.Store(1_000_000)
	s.now = clk.now
	return s, clk
}

const get = "GET /v1/models HTTP/1.1\r\nHost: gw"

// An open backend is left out of the choice: requests go to the healthy one and none reach
// the failing one until its cooldown ends; then one probe decides.
func TestStageKeepsOpenBackendsOut(t *testing.T) {
	bad := mwtest.NewUpstream(t, mwtest.Status(500))
	good := mwtest.NewUpstream(t, mwtest.Status(200))
	svc := mwtest.NewService(t, "up", bad.Addr(), good.Addr())
	s, clk := newStage(t, opts(2, 1, 30*time.Second), svc)
	h := mwtest.On(t, svc, s)

	// Round-robin alternates: the bad backend fails twice and opens.
	for range 4 {
		h.Do(t, "192.0.2.1", get, "")
	}
	require.Equal(t, 2, bad.Count())
	require.Equal(t, open, s.breakers[svc.Backends[0]].State())
	for range 10 {
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, 200, r.Status)
		require.Equal(t, "http://"+good.Addr(), r.Backend)
	}
	require.Equal(t, 2, bad.Count(), "no request reached the open backend")

	// The cooldown ends and the backend recovered: the probe closes the breaker.
	bad.SetAnswer(mwtest.Status(200))
	clk.advance(30 * time.Second)
	seen := map[string]int{}
	for range 6 {
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, 200, r.Status)
		seen[r.Backend]++
	}
	require.Equal(t, closed, s.breakers[svc.Backends[0]].State())
	require.Equal(t, 3, seen["http://"+bad.Addr()], "back in rotation")
}

// A request that finds every backend open is answered 503 circuit_open with the time until a
// probe is let through.
func TestStageAnswers503WhenEveryBackendIsOpen(t *testing.T) {
	bad := mwtest.NewUpstream(t, mwtest.Status(502))
	svc := mwtest.NewService(t, "up", bad.Addr())
	s, clk := newStage(t, opts(1, 1, 30*time.Second), svc)
	h := mwtest.On(t, svc, s)

	r := h.Do(t, "192.0.2.1", get, "")
	require.Equal(t, 502, r.Status, "the upstream's own answer")
	r = h.Do(t, "192.0.2.1", get, "")
	require.Equal(t, 503, r.Status)
	require.Equal(t, "30", r.Header.Get("Retry-After"))
	var body struct {
		Error struct{ Type, Code string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.Body), &body))
	require.Equal(t, "circuit_open", body.Error.Code)
	require.Equal(t, "server_error", body.Error.Type)
	require.Equal(t, 1, bad.Count())

	clk.advance(29500 * time.Millisecond)
	r = h.Do(t, "192.0.2.1", "POST /v1/messages HTTP/1.1\r\nHost: gw", "{}")
	require.Equal(t, 503, r.Status)
	require.Equal(t, "1", r.Header.Get("Retry-After"), "half a second left, rounded up")
	require.Contains(t, r.Body, `"type":"overloaded_error"`, "Anthropic's shape on /v1/messages")
}

// Upstream errors and a stream that fails after its 200 count as failures.
func TestStageCountsUpstreamErrorsAndBrokenStreams(t *testing.T) {
	up := mwtest.NewUpstream(t, func(string) string { return mwtest.Cut })
	svc := mwtest.NewService(t, "up", up.Addr())
	s, _ := newStage(t, opts(2, 1, time.Minute), svc)
	h := mwtest.On(t, svc, s)
	br := s.breakers[svc.Backends[0]]

	r := h.Do(t, "192.0.2.1", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw", "{}")
	require.Equal(t, 502, r.Status, "closed before answering")
	require.Equal(t, 1, countOf(br.w.Load()))

	up.SetAnswer(func(string) string {
		return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\ndata: {\"a\":1}\n\n\r\n" + mwtest.Cut
	})
	h.Do(t, "192.0.2.1", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw", "{}")
	require.Equal(t, open, br.State(), "the stream that broke after its 200 was the second failure")
}

// A probe that cannot reach its backend fails at once, and its request is served by another
// backend.
func TestProbeThatCannotConnectReopens(t *testing.T) {
	bad := mwtest.NewUpstream(t, mwtest.Status(500))
	good := mwtest.NewUpstream(t, mwtest.Status(200))
	svc := mwtest.NewService(t, "up", bad.Addr(), good.Addr())
	s, clk := newStage(t, opts(1, 1, 10*time.Second), svc)
	h := mwtest.On(t, svc, s)
	br := s.breakers[svc.Backends[0]]
	for br.State() != open {
		h.Do(t, "192.0.2.1", get, "")
	}

	// The bad backend goes away for good: nothing listens at its address.
	addr := bad.Addr()
	bad.Close()
	_, err := net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err)
	clk.advance(10 * time.Second)
	for i := range 4 {
		r := h.Do(t, "192.0.2.1", get, "")
		require.Equal(t, 200, r.Status, "request %d", i)
		require.Equal(t, "http://"+good.Addr(), r.Backend)
	}
	require.Equal(t, open, br.State(), "the probe failed to connect: open for another cooldown")
}

// How a request's end counts for its backend.
func TestOutcomesCount(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    pipeline.Outcome
		r    result
	}{
		{"200", pipeline.Outcome{Status: 200}, succeeded},
		{"404 is the client's problem", pipeline.Outcome{Status: 404}, succeeded},
		{"503 from the upstream", pipeline.Outcome{Status: 503}, failed},
		{"500 from the upstream", pipeline.Outcome{Status: 500}, failed},
		{"501: a method the client chose", pipeline.Outcome{Status: 501}, succeeded},
		{"505: a version the client chose", pipeline.Outcome{Status: 505}, succeeded},
		{"507 from the upstream", pipeline.Outcome{Status: 507}, failed},
		{"the gateway's own 500", pipeline.Outcome{Status: 500, GatewayReply: true}, neither},
		{"the gateway's 505", pipeline.Outcome{Status: 505, GatewayReply: true}, neither},
		{"timeout", pipeline.Outcome{Status: 504, GatewayReply: true, UpstreamError: metrics.ReasonTimeout}, failed},
		{"stream cut after 200", pipeline.Outcome{Status: 200, UpstreamError: metrics.ReasonStream}, failed},
		{"client left", pipeline.Outcome{Status: 200, Canceled: true}, neither},
		{"a stage answered", pipeline.Outcome{Status: 500, GatewayReply: true}, neither},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := mwtest.NewService(t, "up", "127.0.0.1:1")
			s, _ := newStage(t, opts(5, 1, time.Minute), svc)
			br := s.breakers[svc.Backends[0]]
			br.record(failed, false, 0, &s.opts) // a streak to clear, or to extend
			// A fresh one: its try in flight, the outcome judges it.
			rc := new(pipeline.RequestCtx)
			rc.Set(&s.slot, br)
			*rc.Outcome() = tc.o
			s.OnComplete(rc)
			// The streak of one failure is cleared by a success, extended by a failure, and
			// stands when the request is not judged.
			want := map[result]int{succeeded: 0, failed: 2, neither: 1}[tc.r]
			require.Equal(t, want, countOf(br.w.Load()))
		})
	}
}

// A reload keeps each server's breaker, by the server's key: written as before, the breaker
// itself; written another way, a breaker shown as written now over the same state.
func TestBreakersSurviveAReload(t *testing.T) {
	svc := mwtest.NewService(t, "up", "127.0.0.1:1", "127.0.0.1:2")
	first := New("cb", opts(1, 1, time.Minute), []*pipeline.Service{svc}, nil)
	failing := first.breakers[svc.Backends[1]]
	failing.record(failed, false, 0, &first.opts)
	again := mwtest.NewService(t, "up", "127.0.0.1:2", "127.0.0.1:3") // one kept, one new
	second := New("cb", opts(3, 1, time.Minute), []*pipeline.Service{again}, first)
	require.Same(t, failing, second.breakers[again.Backends[0]])
	require.Equal(t, open, second.breakers[again.Backends[0]].State())
	require.Equal(t, closed, second.breakers[again.Backends[1]].State())
	require.Len(t, second.Breakers(), 2)

	slashed := mwtest.NewService(t, "up", "127.0.0.1:2")
	slashed.Backends[0].URL = "http://127.0.0.1:2/" // the same server (the same Key)
	third := New("cb", opts(3, 1, time.Minute), []*pipeline.Service{slashed}, second)
	br := third.breakers[slashed.Backends[0]]
	require.Equal(t, "http://127.0.0.1:2/", br.Backend(), "shown as written now")
	require.Equal(t, open, br.State())
	require.Equal(t, firstProbe, br.admit(time.Minute.Milliseconds(), third.cooldown), "after the cooldown, one probe")
	require.Equal(t, refuse, failing.admit(time.Minute.Milliseconds(), second.cooldown), "the server's probe is in flight, whichever stage asks")
}

// BenchmarkStage is the breaker's cost for one request to a healthy backend: the pick and the
// completion.
func BenchmarkStage(b *testing.B) {
	svc := mwtest.NewService(b, "up", "127.0.0.1:1")
	s := New("cb", opts(5, 1, time.Minute), []*pipeline.Service{svc}, nil)
	be := svc.Backends[0]
	rc := pipeline.AcquireRequestCtx()
	rc.Outcome().Status = 200
	b.ReportAllocs()
	for b.Loop() {
		if err := s.OnVet(rc, be); err != nil {
			b.Fatal(err)
		}
		s.OnComplete(rc)
		rc.Set(&s.slot, nil)
	}
}
