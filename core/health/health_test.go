package health

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
)

// engineServer is a loopback server whose readiness endpoint answers status (changeable)
// and counts its probes.
type engineServer struct {
	url    string
	status atomic.Int32
	probes atomic.Int32
	paths  chan string
}

func startEngine(t *testing.T, status int) *engineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &engineServer{url: "http://" + ln.Addr().String(), paths: make(chan string, 1024)}
	e.status.Store(int32(status))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.probes.Add(1)
		select {
		case e.paths <- r.URL.Path:
		default:
		}
		w.WriteHeader(int(e.status.Load()))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

func spec(path string) Spec {
	return Spec{Path: path, Interval: 5 * time.Millisecond, Timeout: time.Second, HealthyThreshold: 2, UnhealthyThreshold: 2}
}

// A llama.cpp server answers 503 on /health while it loads its model: it is unhealthy until
// it answers 200 twice in a row, and WaitHealthy returns then (a replica lifecycle's wait).
func TestCheckerFollowsAnEngineLoading(t *testing.T) {
	e := startEngine(t, 503)
	tgt := NewTarget("llama", e.url, false)
	results := make(chan Result, 1024)
	c := New(spec(DefaultPath(KindLlamaCpp)), nil, []*Target{tgt}, func(r Result) { results <- r })
	c.Start()
	defer c.Stop()
	r := <-results
	require.ErrorIs(t, r.Err, ErrStatus)
	require.False(t, tgt.Healthy())
	require.Equal(t, "/health", <-e.paths)

	e.status.Store(200)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, tgt.WaitHealthy(ctx))
	for r := range results {
		if r.Changed {
			require.NoError(t, r.Err)
			break
		}
	}

	e.status.Store(500)
	for r := range results {
		if r.Changed {
			require.Error(t, r.Err)
			require.False(t, tgt.Healthy(), "two failed probes in a row")
			break
		}
	}
}

// After Stop returns no probe reaches the server: a second checker's probes, counted on
// another server, show time passing with none for the stopped one.
func TestStopEndsProbes(t *testing.T) {
	stopped, other := startEngine(t, 200), startEngine(t, 200)
	c := New(spec("/health"), nil, []*Target{NewTarget("a", stopped.url, true)}, nil)
	c.Start()
	<-stopped.paths
	c.Stop()
	n := stopped.probes.Load()

	o := New(spec("/health"), nil, []*Target{NewTarget("b", other.url, true)}, nil)
	o.Start()
	for range 10 {
		<-other.paths
	}
	o.Stop()
	require.Equal(t, n, stopped.probes.Load())
}

func TestDefaultPaths(t *testing.T) {
	require.Equal(t, "/health", DefaultPath(KindVLLM))
	require.Equal(t, "/health", DefaultPath(KindSGLang))
	require.Equal(t, "/api/version", DefaultPath(KindOllama))
	require.Equal(t, "/health", DefaultPath(KindHTTP))
}

func passive(n int) (*Passive, []*balancer.Backend) {
	var ms []Member
	var lbs []*balancer.Backend
	for i := range n {
		lb := &balancer.Backend{ID: i, Name: "b" + string(rune('0'+i))}
		lbs = append(lbs, lb)
		ms = append(ms, Member{LB: lb})
	}
	s := DefaultPassive()
	// Long enough that an ejection cannot end between the call that caused it and the check
	// that follows, on a loaded machine; short enough that the tests wait one out.
	s.Ejection, s.MaxEjection = time.Second, 2*time.Second
	return NewPassive(s, "svc", ms, nil), lbs
}

// Five failures in a row eject; after the ejection two successes readmit for good, and a
// failure before them ejects again.
func TestPassiveEjectsAndReadmits(t *testing.T) {
	p, lbs := passive(2)
	for range 4 {
		p.Observe(0, true)
	}
	require.False(t, lbs[0].Ejected(), "four failures are not enough")
	p.Observe(0, false)
	for range 4 {
		p.Observe(0, true)
	}
	require.False(t, lbs[0].Ejected(), "a success ends the run")
	p.Observe(0, true)
	require.True(t, lbs[0].Ejected())

	require.Eventually(t, func() bool { return !lbs[0].Ejected() }, 10*time.Second, time.Millisecond, "the ejection ends")
	p.Observe(0, true)
	require.True(t, lbs[0].Ejected(), "a failure on probation ejects again")
	require.Eventually(t, func() bool { return !lbs[0].Ejected() }, 10*time.Second, time.Millisecond)
	p.Observe(0, false)
	p.Observe(0, false)
	p.Observe(0, true)
	require.False(t, lbs[0].Ejected(), "readmitted for good: one failure is not a run")
}

// The last backend in rotation is not ejected: it keeps serving.
func TestPassiveKeepsTheLastBackend(t *testing.T) {
	p, lbs := passive(2)
	lbs[1].SetDown(true)
	for range 10 {
		p.Observe(0, true)
	}
	require.False(t, lbs[0].Ejected())
}

// An error rate above the threshold ejects even without a run of failures.
func TestPassiveErrorRate(t *testing.T) {
	p, lbs := passive(2)
	for i := range 40 {
		p.Observe(0, i%3 != 0) // two failures in three, never five in a row
		if lbs[0].Ejected() {
			require.GreaterOrEqual(t, i+1, DefaultMinRequests, "judged only after min_requests")
			return
		}
	}
	t.Fatal("a 2/3 error rate did not eject")
}
