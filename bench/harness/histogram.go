package harness

import (
	"math"
	"sync"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range and precision. Values are recorded in nanoseconds from
// 1 ns to 1 hour with 3 significant digits (at most 0.1% relative error), as
// in HdrHistogram's usual latency setup; one histogram takes about 260 KiB.
const (
	histLowestNs   = 1
	histHighestNs  = 3_600_000_000_000
	histSigDigits  = 3
	histShardCount = 8
)

// Histogram is a latency histogram in nanoseconds backed by an HDR histogram
// (github.com/HdrHistogram/hdrhistogram-go). The zero value is not usable; use
// NewHistogram. A Histogram is not safe for concurrent use; Recorder is.
type Histogram struct {
	h *hdrhistogram.Histogram
}

// NewHistogram returns an empty histogram for values from 1 ns to 1 hour
// (recorded in ns, 3 significant digits).
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.New(histLowestNs, histHighestNs, histSigDigits)}
}

// Record adds one value in nanoseconds. Values below 1 ns are recorded as
// 1 ns and values above 1 hour as 1 hour, so nothing is dropped silently.
func (h *Histogram) Record(ns int64) {
	if ns < histLowestNs {
		ns = histLowestNs
	} else if ns > histHighestNs {
		ns = histHighestNs
	}
	_ = h.h.RecordValue(ns)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o != nil {
		h.h.Merge(o.h)
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// ValueAtPercentile returns the value in nanoseconds at percentile p (0..100);
// 0 when the histogram is empty.
func (h *Histogram) ValueAtPercentile(p float64) int64 {
	if h.h.TotalCount() == 0 {
		return 0
	}
	return h.h.ValueAtQuantile(p)
}

// Summary is the percentile summary of a histogram, in microseconds.
type Summary struct {
	Count  int64   `json:"count"`
	MinUs  float64 `json:"min"`
	MeanUs float64 `json:"mean"`
	P50Us  float64 `json:"p50"`
	P90Us  float64 `json:"p90"`
	P99Us  float64 `json:"p99"`
	P999Us float64 `json:"p999"`
	MaxUs  float64 `json:"max"`
}

// Summary returns count, min, mean, p50, p90, p99, p99.9 and max in
// microseconds. An empty histogram gives all zeros.
func (h *Histogram) Summary() Summary {
	n := h.h.TotalCount()
	if n == 0 {
		return Summary{}
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return Summary{
		Count:  n,
		MinUs:  us(h.h.Min()),
		MeanUs: h.h.Mean() / 1e3,
		P50Us:  us(h.h.ValueAtQuantile(50)),
		P90Us:  us(h.h.ValueAtQuantile(90)),
		P99Us:  us(h.h.ValueAtQuantile(99)),
		P999Us: us(h.h.ValueAtQuantile(99.9)),
		MaxUs:  us(h.h.Max()),
	}
}

// Point is one point of a latency percentile distribution: Percentile in
// 0..100 and the value at it in microseconds.
type Point struct {
	Percentile float64 `json:"percentile"`
	ValueUs    float64 `json:"value_us"`
}

// Bar is one bucket of recorded values: Count values whose highest equivalent value is
// UpperNs (nanoseconds), the value ValueAtPercentile returns for a percentile that falls in
// the bucket.
type Bar struct {
	UpperNs int64
	Count   int64
}

// Bars returns the buckets that hold values, in ascending order of value: what a percentile
// of several histograms merged with any multiplicities is computed from without merging them
// (see report's round bootstrap). Empty for an empty histogram.
func (h *Histogram) Bars() []Bar {
	if h.h.TotalCount() == 0 {
		return nil
	}
	var bars []Bar
	for _, b := range h.h.Distribution() {
		if b.Count > 0 {
			bars = append(bars, Bar{UpperNs: b.To, Count: b.Count})
		}
	}
	return bars
}

// Distribution returns the percentile distribution at log-spaced "nines"
// (0, 10, 20 … 90, 95, 99, 99.5, 99.9 … up to 99.999 and 100), the shape
// HdrHistogram's percentile plots use. Empty for an empty histogram.
func (h *Histogram) Distribution() []Point {
	if h.h.TotalCount() == 0 {
		return nil
	}
	var pts []Point
	// 1/(1-p) from 1 to 1e5 in steps of 10^(1/8).
	for k := 0; k <= 40; k++ {
		p := 100 * (1 - math.Pow(10, -float64(k)/8))
		pts = append(pts, Point{Percentile: p, ValueUs: float64(h.h.ValueAtQuantile(p)) / 1e3})
	}
	pts = append(pts, Point{Percentile: 100, ValueUs: float64(h.h.Max()) / 1e3})
	return pts
}

// Recorder is a histogram safe for concurrent use: values go to one of a
// fixed set of mutex-guarded shards picked by the caller's shard hint, so
// workers on different shards never contend. Record does not allocate.
type Recorder struct {
	shards [histShardCount]recorderShard
}

type recorderShard struct {
	mu sync.Mutex
	h  *Histogram // allocated on first Record
	_  [40]byte   // keep shards on separate cache lines
}

// NewRecorder returns an empty Recorder. Shards allocate their histogram on
// first use, so an unused Recorder costs no histogram memory.
func NewRecorder() *Recorder { return &Recorder{} }

// Record adds a value in nanoseconds to the shard chosen by hint (any int,
// typically the worker index).
func (r *Recorder) Record(hint int, ns int64) {
	s := &r.shards[uint(hint)%histShardCount]
	s.mu.Lock()
	if s.h == nil {
		s.h = NewHistogram()
	}
	s.h.Record(ns)
	s.mu.Unlock()
}

// Snapshot merges all shards into a new Histogram.
func (r *Recorder) Snapshot() *Histogram {
	out := NewHistogram()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if s.h != nil {
			out.Merge(s.h)
		}
		s.mu.Unlock()
	}
	return out
}
