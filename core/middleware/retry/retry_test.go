package retry

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/pipeline"
)

func opts(attempts int, budget float64, minRetries int) config.RetryOptions {
	return config.RetryOptions{Attempts: attempts, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		Budget: budget, MinRetries: minRetries, Statuses: config.DefaultRetryStatuses}
}

// failing answers 503 to the first n requests, then 200.
func failing(n int32) (func(string) string, *atomic.Int32) {
	var seen atomic.Int32
	ok, bad := mwtest.Status(200), mwtest.Status(503)
	return func(h string) string {
		if seen.Add(1) <= n {
			return bad(h)
		}
		return ok(h)
	}, &seen
}

func TestRetriesIdempotentRequestsOnly(t *testing.T) {
	for _, c := range []struct {
		name, head, body string
		fails            int32
		want             int
		seen             int32
	}{
		{"GET recovers", "GET /v1/models HTTP/1.1\r\nHost: gw", "", 2, 200, 3},
		{"GET gives up after attempts", "GET /v1/models HTTP/1.1\r\nHost: gw", "", 5, 503, 3},
		{"POST is not sent twice", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw", "{}", 2, 503, 1},
		{"POST with Idempotency-Key is", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: k", "{}", 1, 200, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			answer, seen := failing(c.fails)
			up := mwtest.NewUpstream(t, answer)
			h := mwtest.New(t, []any{New(opts(3, 0.2, 10), nil)}, up.Addr())
			r := h.Do(t, "192.0.2.1", c.head, c.body)
			require.Equal(t, c.want, r.Status)
			require.Equal(t, c.seen, seen.Load())
		})
	}
}

// A connection cut before any response byte is retried like a 503, on a new connection.
func TestRetriesAResetBeforeTheHead(t *testing.T) {
	var seen atomic.Int32
	up := mwtest.NewUpstream(t, func(h string) string {
		if seen.Add(1) == 1 {
			return mwtest.Cut
		}
		return mwtest.Status(200)(h)
	})
	h := mwtest.New(t, []any{New(opts(2, 0.2, 10), nil)}, up.Addr())
	r := h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw", "")
	require.Equal(t, 200, r.Status)
	require.Equal(t, int32(2), seen.Load())
}

// The budget bounds retries when everything fails: with min_retries = 2 and no share from
// requests, two retries are made in all, however many requests fail.
func TestBudgetBoundsRetries(t *testing.T) {
	answer, seen := failing(1 << 30)
	up := mwtest.NewUpstream(t, answer)
	s := New(opts(5, 0, 2), nil)
	h := mwtest.New(t, []any{s}, up.Addr())
	for range 10 {
		require.Equal(t, 503, h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw", "").Status)
	}
	require.Equal(t, int32(12), seen.Load(), "10 requests and 2 retries")
	require.Zero(t, s.Budget())

	// Requests pay in: with budget 0.5 every second request earns a retry.
	s = New(opts(5, 0.5, 2), nil)
	s.bank.Store(0)
	h = mwtest.New(t, []any{s}, up.Addr())
	before := seen.Load()
	for range 10 {
		h.Do(t, "192.0.2.1", "GET / HTTP/1.1\r\nHost: gw", "")
	}
	require.Equal(t, int32(15), seen.Load()-before, "10 requests and 5 retries")
}

func TestBackoffDoublesWithJitterAndCap(t *testing.T) {
	s := New(config.RetryOptions{Attempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MinRetries: 1, Statuses: []int{503}}, nil)
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 20 {
			d := s.backoff(n)
			require.GreaterOrEqual(t, d, want/2, "attempt %d", n)
			require.LessOrEqual(t, d, want, "attempt %d", n)
		}
	}
	_, ok := s.OnRetry(nil, 1, 502, nil)
	require.False(t, ok, "502 is not in statuses")
}

// A zero initial_backoff doubles to zero: every retry goes at once. A large one caps at
// max_backoff however many attempts double it.
func TestBackoffFromZeroWaitsNothing(t *testing.T) {
	s := New(config.RetryOptions{Attempts: 10, InitialBackoff: 0, MaxBackoff: 10 * time.Second, MinRetries: 1, Statuses: []int{503}}, nil)
	for n := 1; n <= 70; n++ {
		require.Zero(t, s.backoff(n), "attempt %d", n)
	}
	s = New(config.RetryOptions{Attempts: 10, InitialBackoff: time.Minute, MaxBackoff: time.Minute, MinRetries: 1, Statuses: []int{503}}, nil)
	for _, n := range []int{1, 2, 21, 40, 64, 1 << 20} {
		d := s.backoff(n)
		require.GreaterOrEqual(t, d, 30*time.Second, "attempt %d", n)
		require.LessOrEqual(t, d, time.Minute, "attempt %d", n)
	}
}

// waits records the backoff of each retry its stage grants.
type waits struct {
	*Stage
	got []time.Duration
}

func (w *waits) OnRetry(rc *pipeline.RequestCtx, n, status int, err error) (time.Duration, bool) {
	d, ok := w.Stage.OnRetry(rc, n, status, err)
	if ok {
		w.got = append(w.got, d)
	}
	return d, ok
}

// With initial_backoff = "0s" a request whose upstream answered 503 goes again at once, not
// after max_backoff.
func TestZeroInitialBackoffRetriesAtOnce(t *testing.T) {
	answer, seen := failing(1)
	up := mwtest.NewUpstream(t, answer)
	o := opts(3, 0.2, 10)
	o.InitialBackoff, o.MaxBackoff = 0, 10*time.Second
	w := &waits{Stage: New(o, nil)}
	h := mwtest.New(t, []any{w}, up.Addr())
	start := time.Now()
	r := h.Do(t, "192.0.2.1", "GET /v1/models HTTP/1.1\r\nHost: gw", "")
	require.Equal(t, 200, r.Status)
	require.Equal(t, int32(2), seen.Load())
	require.Equal(t, []time.Duration{0}, w.got, "one retry, with no wait")
	require.Less(t, time.Since(start), o.MaxBackoff/2, "the pipeline did not wait")
}

type answer200 struct{}

func (answer200) OnRequest(rc *pipeline.RequestCtx) error {
	return rc.Reply(200, "application/json", emptyJSON)
}

var emptyJSON = []byte(`{}`)

// BenchmarkStage measures the retry middleware's cost on a request that needs no retry (its
// share paid into the budget) against the answering stage alone:
//
//	go test -run '^$' -bench Stage -benchmem ./core/middleware/retry/
func BenchmarkStage(b *testing.B) {
	for _, bc := range []struct {
		name   string
		stages []any
	}{
		{"baseline", []any{answer200{}}},
		{"retry", []any{New(opts(3, 0.2, 10), nil), answer200{}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := mwtest.New(b, bc.stages)
			var rc pipeline.RequestCtx
			rc.SetClientAddr(netip.MustParseAddr("192.0.2.33"))
			if err := rc.Req.ParseRequestHead([]byte("GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"), nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				h.EP.Begin(&rc)
				if rc.Status() != 200 {
					b.Fatal(rc.Status())
				}
				rc.Finish()
			}
		})
	}
}
