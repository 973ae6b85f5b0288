package workers

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/balancer"
)

// observation is a healthy, ready aggregated worker of generation 2 and digest "d2".
func observation(id string) Observation {
	return Observation{WorkerID: id, Role: "aggregated", Ready: true, Healthy: true, MaxActive: 4, DeploymentGeneration: 2, ExecutionConfigDigest: "d2"}
}

// testGroup is a group of n servers that nothing polls; tests publish their states.
func testGroup(t testing.TB, n int) *Group {
	t.Helper()
	members := make([]Member, n)
	for i := range members {
		members[i] = Member{URL: "http://127.0.0.1:1", Name: "s" + strconv.Itoa(i), LB: &balancer.Backend{ID: i}}
	}
	g := NewGroup(Config{Service: "svc", Interval: time.Second, TTL: 5 * time.Second}, members)
	t.Cleanup(g.Stop)
	return g
}

func (g *Group) observe(i int, o Observation) {
	now := monoNow()
	g.members[i].Worker.observed(o, g.members[i].LB.Active(), now, now, time.Now())
}

var bound = Needs{Role: "aggregated", Generation: 2, Digest: "d2"}

func TestParseObservation(t *testing.T) {
	o, err := ParseObservation([]byte(`{"worker_id":"w1","role":"decode","ready":true,"healthy":true,"active":3,"max_active":8,"waiting":1,"state_transfer":true,"execution_config_digest":null,"deployment_generation":7,"epoch":2,"observed_at":"2025-01-02T03:04:05.5Z"}`))
	require.NoError(t, err)
	require.Equal(t, Observation{WorkerID: "w1", Role: "decode", Ready: true, Healthy: true, Active: 3, MaxActive: 8, Waiting: 1, StateTransfer: true,
		DeploymentGeneration: 7, Epoch: 2, ObservedAt: time.Date(2025, 1, 2, 3, 4, 5, 5e8, time.UTC)}, o)
	o, err = ParseObservation([]byte(`{"worker_id":"w1","role":"aggregated","ready":false,"healthy":false,"active":0,"execution_config_digest":"sha256:x"}`))
	require.NoError(t, err)
	require.Equal(t, "sha256:x", o.ExecutionConfigDigest)
	require.True(t, o.ObservedAt.IsZero())
	for _, body := range []string{``, `[]`, `{}`, `{"worker_id":"","role":"aggregated","ready":true,"healthy":true,"active":0}`,
		`{"worker_id":"w","role":"aggregated","ready":true,"active":0}`, `{"worker_id":"w","role":"aggregated","ready":true,"healthy":true,"active":"1"}`} {
		_, err := ParseObservation([]byte(body))
		require.Error(t, err, body)
	}
}

// Each rule leaves out the server it is about, in the documented order, and a server
// without an observation is left out only by a target that binds a generation or digest.
func TestJudgeReasonsInOrder(t *testing.T) {
	g := testGroup(t, 2)
	j := func(n Needs) Reason { r, _ := g.Judge(0, &n); return r }

	require.Equal(t, Eligible, j(Needs{Role: "aggregated"}), "no observation yet: judged by health alone")
	require.Equal(t, NoObservation, j(Needs{Role: "aggregated", Generation: 2}))
	require.Equal(t, NoObservation, j(Needs{Role: "aggregated", Digest: "d2"}))
	g.members[0].Worker.plain(monoNow())
	require.Equal(t, Eligible, j(Needs{Role: "aggregated"}))
	require.Equal(t, NoObservation, j(bound))

	for _, tc := range []struct {
		mod  func(*Observation)
		want Reason
	}{
		{func(*Observation) {}, Eligible},
		{func(o *Observation) { o.DeploymentGeneration = 1 }, GenerationMismatch},
		{func(o *Observation) { o.ExecutionConfigDigest = "" }, DigestMismatch},
		{func(o *Observation) { o.Active = 4; o.DeploymentGeneration = 1 }, AtCapacity},
		{func(o *Observation) { o.Active = 9; o.MaxActive = 0 }, Eligible},
		{func(o *Observation) { o.Ready = false; o.Active = 4 }, NotReady},
		{func(o *Observation) { o.Role = "prefill"; o.Ready = false }, WrongRole},
		{func(o *Observation) { o.Healthy = false; o.Role = "prefill" }, Unhealthy},
	} {
		o := observation("w0")
		tc.mod(&o)
		g.observe(0, o)
		require.Equal(t, tc.want, j(bound), "%+v", o)
	}
	require.Equal(t, Unhealthy, j(Needs{}), "whatever the target needs")

	// Staleness by the gateway's clock: an observation received TTL ago no longer counts.
	o := observation("w0")
	o.Healthy = false
	// Asked for after the observations before (it replaces them), received 6 s ago.
	g.members[0].Worker.observed(o, 0, monoNow(), monoNow()-int64(6*time.Second), time.Now())
	require.Equal(t, Stale, j(bound), "stale before unhealthy")
	g.members[0].Worker.failed("connection refused", false, time.Now())
	require.Equal(t, Stale, j(bound), "a failed poll keeps the stale observation")

	// A new epoch (a restart) or another worker_id is left out until confirmed.
	g.observe(0, observation("w0"))
	require.Equal(t, Eligible, j(bound))
	o = observation("w0")
	o.Epoch = 1
	g.observe(0, o)
	require.Equal(t, IdentityChanged, j(bound))
	g.observe(0, o)
	require.Equal(t, Eligible, j(bound), "the next observation confirms the new identity")
	g.observe(0, observation("someone-else"))
	require.Equal(t, IdentityChanged, j(bound))
	v := g.members[0].Worker.View()
	require.True(t, v.IdentityChanged)
	require.Equal(t, "someone-else", v.Observation.WorkerID)
}

// A target that hands prefill state over takes only workers that report state_transfer,
// judged after the generation and digest; an unobserved server cannot show it.
func TestJudgeStateTransfer(t *testing.T) {
	g := testGroup(t, 1)
	pd := Needs{Role: "decode", Generation: 2, Digest: "d2", StateTransfer: true}
	j := func() Reason { r, _ := g.Judge(0, &pd); return r }
	require.Equal(t, NoObservation, j())
	o := observation("w0")
	o.Role = "decode"
	g.observe(0, o)
	require.Equal(t, NoStateTransfer, j())
	require.Equal(t, "state_transfer", NoStateTransfer.String())
	o.DeploymentGeneration = 1
	g.observe(0, o)
	require.Equal(t, GenerationMismatch, j())
	o.DeploymentGeneration, o.StateTransfer = 2, true
	g.observe(0, o)
	require.Equal(t, Eligible, j())
	require.Equal(t, "w0", g.members[0].Worker.ID())
}

func TestJudgeAtCapacityCountsGatewayRequestsSinceObservation(t *testing.T) {
	g := testGroup(t, 1)
	lb := g.members[0].LB
	lb.Acquire()
	lb.Acquire()
	o := observation("w0")
	o.Active, o.MaxActive = 3, 4 // the gateway's 2 among them
	g.observe(0, o)
	r, load := g.Judge(0, &bound)
	require.Equal(t, Eligible, r)
	require.EqualValues(t, 3, load)
	lb.Acquire() // one more sent since: 4 of 4
	r, _ = g.Judge(0, &bound)
	require.Equal(t, AtCapacity, r)
	lb.Release()
	lb.Release()
	lb.Release() // two of the gateway's finished: 1 of 4
	r, load = g.Judge(0, &bound)
	require.Equal(t, Eligible, r)
	require.EqualValues(t, 1, load)
}

// An observation the server answered before the gateway's request reached it (received with
// that request already counted in flight) does not make the server look free: the gateway's
// own requests in flight are a floor under what it runs.
func TestJudgeCountsRequestsTheObservationMissed(t *testing.T) {
	g := testGroup(t, 1)
	lb := g.members[0].LB
	lb.Acquire() // sent; the server's answer below was made before it arrived
	o := observation("w0")
	o.Active, o.MaxActive = 0, 1
	g.observe(0, o)
	r, load := g.Judge(0, &bound)
	require.Equal(t, AtCapacity, r)
	require.EqualValues(t, 1, load)
	lb.Release()
	r, load = g.Judge(0, &bound)
	require.Equal(t, Eligible, r)
	require.EqualValues(t, 0, load)

	// Requests the server holds in its queue are not running: the floor leaves them out, and
	// the load counts them once.
	for range 8 {
		lb.Acquire()
	}
	o.Active, o.Waiting, o.MaxActive = 3, 5, 8 // all eight are the gateway's
	g.observe(0, o)
	r, load = g.Judge(0, &bound)
	require.Equal(t, Eligible, r)
	require.EqualValues(t, 8, load)
}

func TestExcludeKeepsTheLeastLoaded(t *testing.T) {
	g := testGroup(t, 5)
	loads := []int64{3, 1, 1, 0, 0}
	for i, a := range loads[:3] {
		o := observation("w" + strconv.Itoa(i))
		o.Active, o.MaxActive = a, 0
		g.observe(i, o)
	}
	g.members[3].Worker.plain(monoNow())
	g.members[3].LB.Acquire() // a plain server: the gateway's own count
	g.members[3].LB.Acquire()
	o := observation("w4")
	o.DeploymentGeneration = 9
	g.observe(4, o)

	var c balancer.Choice
	g.Exclude(&c, &bound)
	require.Equal(t, []int{0, 3, 4}, members(&c, 5), "0 is more loaded than 1 and 2, 3 is plain and the target binds, 4 is of another generation")

	c.Reset()
	g.Exclude(&c, &Needs{Role: "aggregated"})
	require.Equal(t, []int{0, 1, 2, 3}, members(&c, 5), "unbound, 4 is the least loaded and the plain 3 counts the gateway's 2 requests")

	// Backends the request already tried are not judged and stay out.
	c.Reset()
	c.Exclude.Add(1)
	c.Exclude.Add(2)
	g.Exclude(&c, &bound)
	require.Equal(t, []int{1, 2, 3, 4}, members(&c, 5), "after 1 and 2 failed, 0 is the least loaded left")

	// An ejected server is passed over for an up one, even a more loaded one.
	o = observation("w1")
	o.MaxActive = 0
	g.observe(1, o) // load 0
	g.members[1].LB.ConnectFailed()
	c.Reset()
	g.Exclude(&c, &bound)
	require.Equal(t, []int{0, 3, 4}, members(&c, 5), "2 (load 1) is kept over the ejected 1 (load 0), which the balancer skips")
	g.members[2].LB.ConnectFailed()
	c.Reset()
	g.Exclude(&c, &bound)
	require.Equal(t, []int{3, 4}, members(&c, 5), "0, the only one up, whatever its load")
	g.members[0].LB.ConnectFailed()
	c.Reset()
	g.Exclude(&c, &bound)
	require.Equal(t, []int{0, 2, 3, 4}, members(&c, 5), "every eligible one ejected: the least loaded of them")
}

func members(c *balancer.Choice, n int) []int {
	out := []int{}
	for i := range n {
		if c.Exclude.Has(i) {
			out = append(out, i)
		}
	}
	return out
}

func TestExcludeDoesNotAllocate(t *testing.T) {
	g := benchGroup(t, 64)
	var c balancer.Choice
	n := testing.AllocsPerRun(1000, func() {
		c.Reset()
		g.Exclude(&c, &bound)
	})
	require.Zero(t, n)
}

// benchGroup is n observed workers, a quarter of them ineligible for bound, with varied
// loads.
func benchGroup(t testing.TB, n int) *Group {
	g := testGroup(t, n)
	for i := range n {
		o := observation("w" + strconv.Itoa(i))
		o.MaxActive, o.Active = 64, int64(i%7)
		if i%4 == 3 {
			o.DeploymentGeneration = 1
		}
		g.observe(i, o)
	}
	return g
}

// BenchmarkSelect64 is one backend choice of a target binding a generation and a digest
// over 64 workers: judging every worker, keeping the least loaded, and the round-robin pick
// among them.
func BenchmarkSelect64(b *testing.B) {
	g := benchGroup(b, 64)
	lbs := make([]*balancer.Backend, g.Len())
	for i := range lbs {
		lbs[i] = g.members[i].LB
	}
	bal, err := balancer.New(balancer.RoundRobin, lbs)
	require.NoError(b, err)
	var c balancer.Choice
	b.ReportAllocs()
	for b.Loop() {
		c.Reset()
		g.Exclude(&c, &bound)
		if bal.Pick(&c) == nil {
			b.Fatal("no worker picked")
		}
	}
}

// BenchmarkSelectTake64 is BenchmarkSelect64 with the request counted as a model router
// counts it: the worker picked is judged again on the count the request joins (Take), and
// released.
func BenchmarkSelectTake64(b *testing.B) {
	g := benchGroup(b, 64)
	lbs := make([]*balancer.Backend, g.Len())
	for i := range lbs {
		lbs[i] = g.members[i].LB
	}
	bal, err := balancer.New(balancer.RoundRobin, lbs)
	require.NoError(b, err)
	var c balancer.Choice
	b.ReportAllocs()
	for b.Loop() {
		c.Reset()
		g.Exclude(&c, &bound)
		lb := bal.Pick(&c)
		if lb == nil {
			b.Fatal("no worker picked")
		}
		if r, _ := g.Take(lb.ID, &bound); r != Eligible {
			b.Fatal("the worker picked was not taken")
		}
		lb.Release()
	}
}

// A group polls its servers: a worker's observation (with the bearer key), a plain
// server's 404, and failures; Stop ends the polling for good.
func TestGroupPolls(t *testing.T) {
	var auth atomic.Value
	var polls atomic.Int64
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != ObservationPath {
			http.NotFound(w, r)
			return
		}
		polls.Add(1)
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"worker_id":"w1","role":"aggregated","ready":true,"healthy":true,"active":1,"max_active":8,"waiting":0,"state_transfer":false,"execution_config_digest":"d2","deployment_generation":2,"epoch":0,"observed_at":"2025-01-02T03:04:05Z"}`))
	}))
	defer worker.Close()
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(401) }))
	defer denied.Close()
	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }))
	defer garbled.Close()

	refusing := "http://" + testenv.RefusingAddr(t)
	urls := []string{worker.URL, plain.URL, denied.URL, garbled.URL, refusing}
	members := make([]Member, len(urls))
	for i, u := range urls {
		members[i] = Member{URL: u, Name: u, LB: &balancer.Backend{ID: i}}
	}
	var logBuf syncBuffer
	prevLog := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logBuf, nil)))
	defer slog.SetDefault(prevLog)
	// The interval bounds each poll too: it must outlast a loaded machine's slowest answer,
	// or a timed-out poll replaces the reason each server is expected to fail for.
	g := NewGroup(Config{Service: "svc", Interval: 200 * time.Millisecond, TTL: 10 * time.Second, APIKey: "pk-1"}, members)
	g.Start()
	g.Start()
	waitFor(t, func() bool {
		return g.members[0].Worker.View().Kind == Observed && g.members[1].Worker.View().Kind == Plain &&
			g.members[2].Worker.View().Error != "" && g.members[3].Worker.View().Error != "" && g.members[4].Worker.View().Error != ""
	})
	require.Equal(t, "Bearer pk-1", auth.Load())
	v := g.members[0].Worker.View()
	require.Equal(t, "w1", v.Observation.WorkerID)
	require.EqualValues(t, 8, v.Observation.MaxActive)
	require.False(t, v.ReceivedAt.IsZero())
	require.Contains(t, g.members[2].Worker.View().Error, "status 401")
	require.Contains(t, g.members[3].Worker.View().Error, "malformed observation")
	require.Equal(t, "connection refused", g.members[4].Worker.View().Error)
	require.Equal(t, Unknown, g.members[4].Worker.View().Kind)
	// Each failing server is logged once for its reason, however often it is polled.
	seen := polls.Load()
	waitFor(t, func() bool { return polls.Load() >= seen+3 })
	log := logBuf.String()
	require.Equal(t, 1, strings.Count(log, "server="+denied.URL+" error=\"status 401"), log)
	require.Equal(t, 1, strings.Count(log, "server="+refusing+" error=\"connection refused\""), log)
	require.NotContains(t, log, "server="+worker.URL)

	g.Stop()
	g.Stop()
	select {
	case <-g.Done():
	default:
		t.Fatal("Stop returned with the group still polling")
	}
	n := polls.Load()
	g.round() // what a leftover loop would do: a stopped group's polls are cut short
	require.Equal(t, n, polls.Load())
	require.Equal(t, "w1", g.members[0].Worker.View().Observation.WorkerID, "stopping leaves the last observation")

	never := NewGroup(Config{Interval: time.Second, TTL: 2 * time.Second}, nil)
	never.Stop()
	<-never.Done()
	never.Start() // after Stop: nothing
}

// A server that stops answering goes stale once its last observation is older than the TTL;
// a reload that keeps it keeps its Worker and so its observation.
func TestGroupObservationGoesStaleAndSurvivesReload(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"worker_id":"w1","role":"aggregated","ready":true,"healthy":true,"active":0,"deployment_generation":2,"execution_config_digest":"d2"}`))
	}))
	m := []Member{{URL: srv.URL, Name: srv.URL, LB: &balancer.Backend{}}}
	g := NewGroup(Config{Interval: 20 * time.Millisecond, TTL: 200 * time.Millisecond}, m)
	g.Start()
	defer g.Stop()
	waitFor(t, func() bool { r, _ := g.Judge(0, &bound); return r == Eligible })

	m[0].Worker = g.Member(0).Worker
	next := NewGroup(Config{Interval: 20 * time.Millisecond, TTL: 200 * time.Millisecond}, m)
	defer next.Stop()
	r, _ := next.Judge(0, &bound)
	require.Equal(t, Eligible, r, "the new snapshot's group has the observation before it polls")

	srv.Close()
	waitFor(t, func() bool { r, _ := g.Judge(0, &bound); return r == Stale })
	require.NotEmpty(t, g.Member(0).Worker.View().Error)
}

// waitFor polls cond until it holds, failing after 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within 5s")
		time.Sleep(5 * time.Millisecond) // polling for the condition, not asserting on time
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
