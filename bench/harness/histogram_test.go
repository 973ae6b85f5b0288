package harness

import (
	"math"
	"sync"
	"testing"
)

func within(t *testing.T, name string, got, want, relTol float64) {
	t.Helper()
	if math.Abs(got-want) > relTol*want {
		t.Errorf("%s = %v, want %v ± %.2f%%", name, got, want, relTol*100)
	}
}

func TestHistogramPercentilesOfUniformValues(t *testing.T) {
	h := NewHistogram()
	for us := int64(1); us <= 10000; us++ { // 1 µs … 10 ms
		h.Record(us * 1000)
	}
	s := h.Summary()
	if s.Count != 10000 {
		t.Fatalf("count = %d", s.Count)
	}
	within(t, "p50", s.P50Us, 5000, 0.002)
	within(t, "p90", s.P90Us, 9000, 0.002)
	within(t, "p99", s.P99Us, 9900, 0.002)
	within(t, "p999", s.P999Us, 9990, 0.002)
	within(t, "max", s.MaxUs, 10000, 0.002)
	within(t, "min", s.MinUs, 1, 0.002)
	within(t, "mean", s.MeanUs, 5000.5, 0.002)
}

func TestHistogramTailIsNotAveragedAway(t *testing.T) {
	h := NewHistogram()
	for i := 0; i < 999; i++ {
		h.Record(100_000) // 100 µs
	}
	h.Record(1_000_000_000) // one 1 s stall
	s := h.Summary()
	within(t, "p99", s.P99Us, 100, 0.002)
	within(t, "max", s.MaxUs, 1e6, 0.002)
	if h.ValueAtPercentile(99.95) < 999_000_000 {
		t.Errorf("p99.95 = %d ns, want the 1 s stall", h.ValueAtPercentile(99.95))
	}
}

func TestHistogramClampsOutOfRangeValues(t *testing.T) {
	h := NewHistogram()
	h.Record(-5)
	h.Record(10)
	h.Record(histHighestNs * 10)
	if h.Count() != 3 {
		t.Fatalf("count = %d, want 3 (nothing dropped)", h.Count())
	}
	within(t, "min", h.Summary().MinUs, 0.001, 0.002)
}

func TestHistogramEmpty(t *testing.T) {
	h := NewHistogram()
	if s := h.Summary(); s != (Summary{}) {
		t.Errorf("empty summary = %+v", s)
	}
	if d := h.Distribution(); d != nil {
		t.Errorf("empty distribution = %v", d)
	}
	if v := h.ValueAtPercentile(99); v != 0 {
		t.Errorf("empty p99 = %d", v)
	}
}

func TestHistogramMerge(t *testing.T) {
	a, b := NewHistogram(), NewHistogram()
	for i := 0; i < 100; i++ {
		a.Record(1_000_000)
		b.Record(3_000_000)
	}
	a.Merge(b)
	a.Merge(nil)
	s := a.Summary()
	if s.Count != 200 {
		t.Fatalf("count = %d", s.Count)
	}
	within(t, "mean", s.MeanUs, 2000, 0.002)
	within(t, "p50", s.P50Us, 1000, 0.002)
	within(t, "p90", s.P90Us, 3000, 0.002)
}

func TestDistributionIsMonotonic(t *testing.T) {
	h := NewHistogram()
	for i := int64(1); i <= 100000; i++ {
		h.Record(i * 37 % 50_000_000)
	}
	d := h.Distribution()
	if len(d) < 40 || d[len(d)-1].Percentile != 100 {
		t.Fatalf("distribution has %d points, last %+v", len(d), d[len(d)-1])
	}
	for i := 1; i < len(d); i++ {
		if d[i].Percentile <= d[i-1].Percentile || d[i].ValueUs < d[i-1].ValueUs {
			t.Fatalf("not monotonic at %d: %+v then %+v", i, d[i-1], d[i])
		}
	}
	if d[len(d)-2].Percentile < 99.999 {
		t.Errorf("distribution stops at p%v, want up to p99.999", d[len(d)-2].Percentile)
	}
}

func TestRecorderConcurrentRecordAndSnapshot(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				r.Record(w, int64(w+1)*1_000_000)
			}
		}(w)
	}
	wg.Wait()
	s := r.Snapshot().Summary()
	if s.Count != 8000 {
		t.Fatalf("count = %d", s.Count)
	}
	within(t, "mean", s.MeanUs, 4500, 0.002)
}
