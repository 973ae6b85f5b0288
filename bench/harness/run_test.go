package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func startBasicUpstream(t testing.TB, o UpstreamOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := StartUpstream(ln, o)
	t.Cleanup(func() { _ = u.Close() })
	return "http://" + u.Addr()
}

func TestClosedLoopAllWorkloadsAgainstBasicUpstream(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 8})
	for _, wl := range Workloads {
		t.Run(wl, func(t *testing.T) {
			res, err := Run(context.Background(), Options{
				Target: target, Workload: wl, Concurrency: 4,
				Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Seed: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK < 20 || res.Errors != 0 {
				t.Fatalf("ok=%d errors=%v", res.OK, res.ErrorsByKind)
			}
			if res.Mode != "closed" || res.Latency.Count != res.OK || res.Latency.P50Us <= 0 {
				t.Fatalf("bad result %+v", res)
			}
			if wl != WorkloadJSON {
				if res.TTFT.Count == 0 || res.ITL.Count == 0 || res.Tokens == 0 || res.Tokens%8 != 0 {
					t.Fatalf("stream timing missing: ttft=%d itl=%d tokens=%d", res.TTFT.Count, res.ITL.Count, res.Tokens)
				}
			} else if res.TTFT.Count != 0 || res.Tokens != 0 {
				t.Fatalf("json workload has stream timing: %+v", res.TTFT)
			}
		})
	}
}

// TestOpenLoopLatencyShowsUpstreamStall: one connection at 200 req/s; the
// 40th request is held 300 ms. Measured from the intended send time, the
// ~60 requests scheduled during the stall are all late, so the stall shows in
// p90; measured from the actual send time (what a closed-loop tool reports)
// only one request is slow.
func TestOpenLoopLatencyShowsUpstreamStall(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 40 {
			time.Sleep(300 * time.Millisecond) // the upstream stall under test
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[]}`))
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{
		Target: srv.URL, Workload: WorkloadJSON, Rate: 200, Connections: 1,
		Duration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.OK < 150 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.ErrorsByKind)
	}
	if res.Latency.MaxUs < 290_000 {
		t.Errorf("max latency %.0f µs, want the 300 ms stall", res.Latency.MaxUs)
	}
	if res.Latency.P90Us < 100_000 {
		t.Errorf("intended-time p90 = %.0f µs, want >= 100 ms: coordinated omission hides the stall", res.Latency.P90Us)
	}
	if res.ServiceLatency.P90Us > 150_000 { // far under the stall, with room for a loaded machine
		t.Errorf("service-time p90 = %.0f µs, want the stall in one request only", res.ServiceLatency.P90Us)
	}
}

func TestOpenLoopPoissonRate(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 4})
	res, err := Run(context.Background(), Options{
		Target: target, Workload: WorkloadJSON, Rate: 500, Poisson: true, Connections: 8,
		Duration: time.Second, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	// 500 expected; a Poisson count has sd ≈ 22.
	if res.Errors != 0 || res.OK < 380 || res.OK > 620 {
		t.Fatalf("ok=%d errors=%v, want about 500", res.OK, res.ErrorsByKind)
	}
	if res.Mode != "open" || !res.Poisson {
		t.Fatalf("mode %q poisson %v", res.Mode, res.Poisson)
	}
}

// TestSSETimingOnScriptedUpstream streams a role chunk at once, the first
// content event after 50 ms, then content events 20 ms apart, one of them
// split across two writes 5 ms apart (its time is that of its end).
func TestSSETimingOnScriptedUpstream(t *testing.T) {
	const (
		ttft = 50 * time.Millisecond
		gap  = 20 * time.Millisecond
	)
	ev := func(s string) string { return `data: {"choices":[{"delta":{"content":"` + s + `"}}]}` + "\n\n" }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}`+"\n\n")
		f.Flush()
		time.Sleep(ttft) // the scripted stream's timing under test
		fmt.Fprint(w, ev("a"))
		f.Flush()
		for i := 0; i < 4; i++ {
			time.Sleep(gap) // the scripted stream's timing under test
			fmt.Fprint(w, ev("b"))
			f.Flush()
		}
		time.Sleep(gap - 5*time.Millisecond) // the scripted stream's timing under test
		half := ev("c")
		fmt.Fprint(w, half[:20])
		f.Flush()
		time.Sleep(5 * time.Millisecond) // an event split across two writes, under test
		fmt.Fprint(w, half[20:]+"data: [DONE]\n\n")
		f.Flush()
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{
		Target: srv.URL, Workload: WorkloadSSE, Concurrency: 2, Duration: 400 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.OK < 2 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.ErrorsByKind)
	}
	if res.Tokens != 6*res.OK || res.ITL.Count != 5*res.OK || res.TTFT.Count != res.OK {
		t.Fatalf("tokens=%d itl=%d ttft=%d for %d streams", res.Tokens, res.ITL.Count, res.TTFT.Count, res.OK)
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	if res.TTFT.MinUs < us(ttft) || res.TTFT.P50Us > us(ttft+40*time.Millisecond) {
		t.Errorf("TTFT min %.0f p50 %.0f µs, want about %v", res.TTFT.MinUs, res.TTFT.P50Us, ttft)
	}
	if res.ITL.P50Us < us(gap-5*time.Millisecond) || res.ITL.P50Us > us(gap+25*time.Millisecond) {
		t.Errorf("ITL p50 %.0f µs, want about %v", res.ITL.P50Us, gap)
	}
	if res.Latency.MinUs < us(ttft+5*gap) {
		t.Errorf("latency min %.0f µs shorter than the scripted stream", res.Latency.MinUs)
	}
}

func TestResponseChecksCountErrorsByKind(t *testing.T) {
	cases := []struct {
		name     string
		workload string
		handler  http.HandlerFunc
		kind     string
	}{
		{"status 503", WorkloadJSON, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(503)
		}, "status_5xx"},
		{"status 404", WorkloadJSON, func(w http.ResponseWriter, r *http.Request) {
			http.NotFound(w, r)
		}, "status_4xx"},
		{"stream without DONE", WorkloadSSE, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"delta\":{\"content\":\"x\"}}\n\n")
		}, "no_done"},
		{"stream of JSON", WorkloadSSE, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{}`)
		}, "not_sse"},
		{"stream without content", WorkloadSSE, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"delta\":{\"role\":\"assistant\"}}\n\ndata: [DONE]\n\n")
		}, "no_content"},
		{"stream with error event", WorkloadSSE, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"delta\":{\"content\":\"x\"}}\n\nevent: error\ndata: {\"error\":{}}\n\n")
		}, "sse_error"},
		{"body cut short", WorkloadJSON, func(w http.ResponseWriter, r *http.Request) {
			c, bw, _ := w.(http.Hijacker).Hijack()
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":")
			_ = bw.Flush()
			_ = c.Close()
		}, "incomplete"},
		{"closed before response", WorkloadJSON, func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
		}, "closed"},
		{"garbage status line", WorkloadJSON, func(w http.ResponseWriter, r *http.Request) {
			c, bw, _ := w.(http.Hijacker).Hijack()
			_, _ = bw.WriteString("SPDY/9 nope\r\n\r\n")
			_ = bw.Flush()
			_ = c.Close()
		}, "bad_response"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			res, err := Run(context.Background(), Options{
				Target: srv.URL, Workload: tc.workload, Concurrency: 1, Duration: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != 0 || res.ErrorsByKind[tc.kind] == 0 || res.ErrorsByKind[tc.kind] != res.Errors {
				t.Fatalf("ok=%d errors=%v, want only %s", res.OK, res.ErrorsByKind, tc.kind)
			}
		})
	}
}

// A status error is also counted by its code, so that a model router's 429 (at capacity)
// is told apart from a 431 or a timeout: each code's count adds up to its kind's.
func TestStatusErrorsAreCountedByCode(t *testing.T) {
	codes := []int{408, 429, 431, 499, 503}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(codes[int(n.Add(1)-1)%len(codes)])
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{Target: srv.URL, Concurrency: 1, Duration: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Zero(t, res.OK)
	var by4xx, by5xx int64
	for _, c := range codes {
		k := strconv.Itoa(c)
		require.Positive(t, res.ErrorsByStatus[k], "status %s in %v", k, res.ErrorsByStatus)
		if c < 500 {
			by4xx += res.ErrorsByStatus[k]
		} else {
			by5xx += res.ErrorsByStatus[k]
		}
	}
	require.Len(t, res.ErrorsByStatus, len(codes), "%v", res.ErrorsByStatus)
	require.Equal(t, res.ErrorsByKind["status_4xx"], by4xx)
	require.Equal(t, res.ErrorsByKind["status_5xx"], by5xx)

	// The JSON result carries the breakdown beside the kinds, whose meaning is unchanged.
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Contains(t, doc, "errors_by_status")
	require.Equal(t, float64(by4xx), doc["errors_by_kind"].(map[string]any)["status_4xx"])
}

// The printed summary of errors gives each status kind's codes after it.
func TestErrorSummaryBreaksStatusKindsDownByCode(t *testing.T) {
	res := &Result{
		ErrorsByKind:   map[string]int64{"status_4xx": 12, "status_5xx": 1, "timeout": 3},
		ErrorsByStatus: map[string]int64{"408": 1, "429": 10, "431": 1, "503": 1},
	}
	require.Equal(t, "status_4xx 12 (408 1, 429 10, 431 1), status_5xx 1 (503 1), timeout 3", res.ErrorSummary())
	require.Empty(t, (&Result{}).ErrorSummary())
}

func TestHungUpstreamEndsAfterDrain(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	res, err := Run(context.Background(), Options{
		Target: srv.URL, Workload: WorkloadJSON, Concurrency: 2,
		Duration: 100 * time.Millisecond, Drain: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("run took %v", took)
	}
	if res.Unfinished != 2 || res.Errors != 0 || res.OK != 0 {
		t.Fatalf("unfinished=%d errors=%v ok=%d, want 2 unfinished", res.Unfinished, res.ErrorsByKind, res.OK)
	}
}

func TestConnectErrorsAreCountedAndBackedOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	res, err := Run(context.Background(), Options{
		Target: "http://" + addr, Concurrency: 1, Duration: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := res.ErrorsByKind["connect"]; n == 0 || n > 50 {
		t.Fatalf("connect errors = %d, want a few (backoff)", n)
	}
}

func TestCancelStopsRun(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 1000, ITL: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(ctx, Options{Target: target, Workload: WorkloadSSE, Concurrency: 2, Duration: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("err = %v, want cancelled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancel took %v", took)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	bad := []Options{
		{Target: "http://x", Duration: time.Second},
		{Target: "http://x", Concurrency: 1, Rate: 1, Duration: time.Second},
		{Target: "http://x", Concurrency: 1},
		{Target: "https://x", Concurrency: 1, Duration: time.Second},
		{Target: "::", Concurrency: 1, Duration: time.Second},
		{Target: "http://x", Concurrency: 1, Duration: time.Second, Workload: "nope"},
		// NaN must not run as an empty closed loop, nor 1e12 never end.
		{Target: "http://x", Rate: math.NaN(), Duration: time.Second},
		{Target: "http://x", Rate: -5, Duration: time.Second},
		{Target: "http://x", Rate: math.Inf(1), Duration: time.Second},
		{Target: "http://x", Rate: 1e12, Duration: time.Second},
		{Target: "http://x", Concurrency: -1, Duration: time.Second},
		{Target: "http://x", Rate: 10, Connections: -1, Duration: time.Second},
		// Bounds: 1e-9 req/s would overflow the schedule and spin, 1e8 connections would be
		// OOM-killed, 2562047h would overflow warmup+duration.
		{Target: "http://x", Rate: 1e-9, Duration: time.Second},
		{Target: "http://x", Rate: 10, Connections: MaxConnections + 1, Duration: time.Second},
		{Target: "http://x", Concurrency: MaxConnections + 1, Duration: time.Second},
		{Target: "http://x", Concurrency: 1, Duration: 2562047 * time.Hour},
		{Target: "http://x", Concurrency: 1, Duration: time.Second, Warmup: 2562047 * time.Hour},
		{Target: "http://x", Concurrency: 1, Duration: time.Second, Timeout: -time.Second},
		{Target: "http://x", Concurrency: 1, Duration: time.Second, MaxTokens: -1},
		{Target: "http://x", Concurrency: 1, Duration: time.Second, Turns: -3},
		{Target: "http://x/v1?x", Concurrency: 1, Duration: time.Second},
		{Target: "http://127.0.0.1:99999", Concurrency: 1, Duration: time.Second},
	}
	for _, o := range bad {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) = nil error", o)
		}
	}
}

// TestOpenLoopCountsRequestsNeverSent: the only connection hangs, so the
// rest of the schedule cannot be sent; those requests are unfinished, not
// silently dropped.
func TestOpenLoopCountsRequestsNeverSent(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	res, err := Run(context.Background(), Options{
		Target: srv.URL, Workload: WorkloadJSON, Rate: 100, Connections: 1,
		Duration: 200 * time.Millisecond, Drain: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Unfinished != 20 || res.OK != 0 || res.Errors != 0 {
		t.Fatalf("unfinished=%d ok=%d errors=%v, want all 20 scheduled requests unfinished", res.Unfinished, res.OK, res.ErrorsByKind)
	}
}

func TestOpenIdleHoldsConnections(t *testing.T) {
	var active atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			active.Add(1)
		case http.StateClosed, http.StateHijacked:
			active.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	set, err := OpenIdle(context.Background(), srv.URL, 100)
	if err != nil {
		t.Fatal(err)
	}
	if set.Opened != 100 || len(set.Errors) != 0 || active.Load() != 100 {
		t.Fatalf("opened %d, errors %v, server sees %d", set.Opened, set.Errors, active.Load())
	}
	set.Close()
	deadline := time.Now().Add(5 * time.Second)
	for active.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling for the condition, not asserting on time
	}
	if n := active.Load(); n != 0 {
		t.Fatalf("server still has %d connections after Close", n)
	}
	if _, err := OpenIdle(context.Background(), "ftp://x", 1); err == nil {
		t.Error("bad target accepted")
	}
}

func TestCancelStopsLowRateOpenLoop(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 1})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(ctx, Options{Target: target, Rate: 0.1, Connections: 2, Duration: time.Minute})
	if err == nil {
		t.Fatal("no error after cancel")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancel took %v", took)
	}
}

// TestOverloadedOpenLoopReportsTheRateServed: a target slower than the offered rate answers the
// window's requests during the drain; RPS is what it served, not what was offered (30,000
// req/s offered through a proxy serving ~9,500 must not report 30,000).
// The schedule has exactly rate × window requests.
func TestOverloadedOpenLoopReportsTheRateServed(t *testing.T) {
	// One connection, 10 ms per response: at most ~100 req/s however many are offered.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(10 * time.Millisecond) // the service time under test
		_, _ = w.Write([]byte(`{"choices":[]}`))
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{
		Target: srv.URL, Workload: WorkloadJSON, Rate: 300, Connections: 1,
		Duration: 500 * time.Millisecond, Drain: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK+res.Unfinished != 150 {
		t.Errorf("ok %d + unfinished %d, want the 150 scheduled requests", res.OK, res.Unfinished)
	}
	if res.RPS > 120 {
		t.Errorf("RPS %.0f, want at most the ~100 req/s the target can serve", res.RPS)
	}
}

// TestHungTargetIsNotACleanClosedLoop: requests sent during warmup that never get an answer
// are unfinished, not invisible (never "0 ok, 0 errors, 0 unfinished").
func TestHungTargetIsNotACleanClosedLoop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	res, err := Run(context.Background(), Options{
		Target: "http://" + ln.Addr().String(), Workload: WorkloadJSON, Concurrency: 3,
		Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Drain: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Unfinished != 3 {
		t.Errorf("ok %d unfinished %d, want 0 and the 3 stuck requests", res.OK, res.Unfinished)
	}
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// With NewConnections every request opens a connection of its own and asks the target to
// close it; without, a closed loop of 2 keeps its 2 connections.
func TestNewConnectionsOpensOnePerRequest(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		cl := &countingListener{Listener: ln}
		u := StartUpstream(cl, UpstreamOptions{Tokens: 4})
		res, err := Run(context.Background(), Options{
			Target: "http://" + u.Addr(), Workload: WorkloadSSE, Concurrency: 2, NewConnections: fresh,
			Duration: 200 * time.Millisecond, Seed: 1,
		})
		require.NoError(t, err)
		require.NoError(t, u.Close())
		require.Zero(t, res.Errors, "%v", res.ErrorsByKind)
		require.GreaterOrEqual(t, res.OK, int64(10))
		if fresh {
			require.GreaterOrEqual(t, cl.n.Load(), res.OK, "a connection per request")
		} else {
			require.Equal(t, int64(2), cl.n.Load(), "keep-alive connections")
		}
	}
}

// The window hooks run at the window's edges, in order, and the requests written between them
// are WindowSent: neither the warmup's nor the drain's.
func TestWindowHooksBracketTheWindowsRequests(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 4})
	o := Options{
		Target: target, Workload: WorkloadJSON, Concurrency: 2,
		Duration: 300 * time.Millisecond, Warmup: 200 * time.Millisecond, Seed: 1,
	}
	var startAt, endAt time.Duration
	base := time.Now()
	o.AtWindowStart = func() { startAt = time.Since(base) }
	o.AtWindowEnd = func() { endAt = time.Since(base) }
	res, err := Run(context.Background(), o)
	require.NoError(t, err)
	require.GreaterOrEqual(t, startAt, o.Warmup, "called before the warmup ended")
	require.GreaterOrEqual(t, endAt, o.Warmup+o.Duration, "called before the window ended")
	require.Positive(t, res.WindowSent)
	require.Less(t, res.WindowSent, res.TotalSent, "the warmup's requests are not the window's")
	// The window's requests are those sent in it; a connection's request sent across an edge
	// may fall on either side.
	require.InDelta(t, res.Requests, res.WindowSent, float64(o.Concurrency))
}

// TTFT and ITL are taken from the streams that latency is: those that ended well. A stream cut
// short, or ending in an error event, after content events gives none of its timings.
func TestStreamTimingsComeFromCompleteStreamsOnly(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"delta\":{\"content\":\"x\"}}\n\ndata: {\"delta\":{\"content\":\"y\"}}\n\n")
		switch n.Add(1) % 3 {
		case 0:
			fmt.Fprint(w, "data: [DONE]\n\n")
		case 1:
			fmt.Fprint(w, "event: error\ndata: {\"error\":{}}\n\n")
		}
		// Otherwise the stream ends without [DONE].
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{
		Target: srv.URL, Workload: WorkloadSSE, Concurrency: 1, Duration: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Positive(t, res.OK)
	require.Positive(t, res.Errors)
	require.Equal(t, res.OK, res.TTFT.Count, "TTFT samples of %d streams that ended well (%v)", res.OK, res.ErrorsByKind)
	require.Equal(t, res.OK, res.ITL.Count, "ITL samples, one a stream")
	require.Equal(t, 2*res.OK, res.Tokens)
}

// A token event's arrival is when the read that brought it returned, however the target lays
// its chunked framing out over its writes: here each write carries the CRLF that ends the
// previous chunk, then the next chunk (size line and event), so the harness meets the end of
// every chunk's data while the next write is still on its way.
func TestITLIsBetweenEventsWhateverTheChunkLayout(t *testing.T) {
	const gap = 20 * time.Millisecond
	const events = 5
	target := connServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			lead := ""
			for i := 0; i < events; i++ {
				if i > 0 {
					time.Sleep(gap) // the scripted stream's timing under test
				}
				ev := fmt.Sprintf("data: {\"delta\":{\"content\":\"t%d\"}}\n\n", i)
				_, _ = fmt.Fprintf(c, "%s%x\r\n%s", lead, len(ev), ev)
				lead = "\r\n"
			}
			done := "data: [DONE]\n\n"
			if _, err := fmt.Fprintf(c, "\r\n%x\r\n%s\r\n0\r\n\r\n", len(done), done); err != nil {
				return
			}
		}
	})
	res, err := Run(context.Background(), Options{
		Target: target, Workload: WorkloadSSE, Concurrency: 1, Duration: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Zero(t, res.Errors, "%v", res.ErrorsByKind)
	require.Positive(t, res.OK)
	require.Equal(t, (events-1)*res.OK, res.ITL.Count)
	require.GreaterOrEqual(t, res.ITL.MinUs, float64((gap / 2).Microseconds()), "ITL %+v, want gaps of about %v", res.ITL, gap)
}
