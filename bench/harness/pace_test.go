package harness

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWaitUntilReturnsAtOrAfterTheIntendedTime(t *testing.T) {
	pool := newPacerPool(1)
	defer pool.close()
	if len(pool.all) != 1 {
		t.Fatalf("newPacerPool(1) made %d pacers", len(pool.all))
	}
	exhausted := newPacerPool(1)
	defer exhausted.close()
	exhausted.get() // taken and never returned: waitUntil must fall back to time.Sleep
	for name, pp := range map[string]*pacerPool{"pacer": pool, "no pool": nil, "pool exhausted": exhausted} {
		r := &runState{base: time.Now(), pacers: pp}
		// Far enough to cross from time.Sleep to the precise sleep.
		at := r.clock() + int64(preciseWindow+3*time.Millisecond)
		if !r.waitUntil(at) {
			t.Errorf("%s: waitUntil(future) = false", name)
		}
		if now := r.clock(); now < at {
			t.Errorf("%s: returned %v before the intended time", name, time.Duration(at-now))
		}
		if r.waitUntil(r.clock() - 1) {
			t.Errorf("%s: waitUntil(past) = true, want false (the worker was late, not the generator)", name)
		}
	}
	if p := pool.get(); p == nil {
		t.Error("the pacer was not returned to its pool")
	}
}

func TestWaitUntilStopsWithTheRun(t *testing.T) {
	r := &runState{base: time.Now()}
	r.stopping.Store(true)
	done := make(chan bool)
	go func() { done <- r.waitUntil(r.clock() + int64(time.Hour)) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waitUntil ignored the stopped run")
	}
}

func TestPacerSleepsAtLeastTheDuration(t *testing.T) {
	p := newPacer()
	defer p.close()
	for _, d := range []time.Duration{50 * time.Microsecond, 300 * time.Microsecond, 1500 * time.Microsecond} {
		start := time.Now()
		p.sleep(d)
		if el := time.Since(start); el < d {
			t.Errorf("sleep(%v) returned after %v", d, el)
		}
	}
}

// TestOpenLoopReportsSendLag: the open loop reports how late the generator
// itself sent (a part of each request's latency, so never above it); the
// closed loop has no intended times and reports none.
func TestOpenLoopReportsSendLag(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 4})
	res, err := Run(context.Background(), Options{
		Target: target, Workload: WorkloadJSON, Rate: 300, Connections: 4,
		Duration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.OK == 0 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.ErrorsByKind)
	}
	if res.SendLag == nil || res.SendLag.Count == 0 || res.SendLag.Count > res.Requests {
		t.Fatalf("send lag %+v, want a count in 1..%d", res.SendLag, res.Requests)
	}
	if res.SendLag.MaxUs > res.Latency.MaxUs {
		t.Errorf("max send lag %.0f µs > max latency %.0f µs", res.SendLag.MaxUs, res.Latency.MaxUs)
	}
	closed, err := Run(context.Background(), Options{
		Target: target, Workload: WorkloadJSON, Concurrency: 2, Duration: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if closed.SendLag != nil {
		t.Errorf("closed loop send lag %+v, want none (no intended times)", closed.SendLag)
	}
}

// BenchmarkOpenLoopSendLag measures the generator's own precision: how late
// it sends open-loop requests (1,000 req/s on 8 connections for 1 s against
// the basic upstream), with the pacer and with time.Sleep alone. Reported
// as send-lag-p50-µs and send-lag-p99-µs (medians of the runs' values).
//
//	go test -run '^$' -bench OpenLoopSendLag -benchtime 3x ./bench/harness
func BenchmarkOpenLoopSendLag(b *testing.B) {
	target := startBasicUpstream(b, UpstreamOptions{Tokens: 4})
	for _, mode := range []string{"pacer", "sleep"} {
		b.Run(mode, func(b *testing.B) {
			usePacer = mode == "pacer"
			defer func() { usePacer = true }()
			var p50, p99 []float64
			for range b.N {
				res, err := Run(context.Background(), Options{
					Target: target, Workload: WorkloadJSON, Rate: 1000, Connections: 8,
					Duration: time.Second, Warmup: 200 * time.Millisecond,
				})
				if err != nil {
					b.Fatal(err)
				}
				p50, p99 = append(p50, res.SendLag.P50Us), append(p99, res.SendLag.P99Us)
			}
			b.ReportMetric(median(p50), "send-lag-p50-µs")
			b.ReportMetric(median(p99), "send-lag-p99-µs")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestOpenLoopTimerfdsAreCapped: however many connections an open loop has, it holds at most
// maxPacers timerfds (each connection needs a descriptor too; a per-worker pacer made 1,000
// connections need 2,000 descriptors).
func TestOpenLoopTimerfdsAreCapped(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 1})
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), Options{
			Target: target, Workload: WorkloadJSON, Rate: 400, Connections: 3 * maxPacers,
			Duration: 600 * time.Millisecond, Warmup: 0,
		})
		done <- err
	}()
	most := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if most == 0 || most > maxPacers {
				t.Fatalf("open loop held %d timerfds at most, want 1..%d", most, maxPacers)
			}
			return
		case <-time.After(20 * time.Millisecond):
			most = max(most, countTimerfds(t))
		}
	}
}

func countTimerfds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "timerfd") {
			n++
		}
	}
	return n
}
