package pd

import (
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/sluice-gw/sluice/core/metrics"
)

// Phases of the exchange whose durations are recorded.
const (
	phasePrepare    = "prepare"
	phasePrefill    = "prefill"
	phaseDecodeHead = "decode_head"
	phaseDecode     = "decode"
)

// Abort reasons.
const (
	abortLegFailed  = "leg_failed"
	abortClientGone = "client_gone"
	abortDeadline   = "timeout"
	abortStream     = "stream_failed"
)

// batchSizeBuckets are the bucket bounds of the prepare batch size histogram.
var batchSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// targetMetrics are the P/D metrics of one model alias's target, labelled by model and target
// (bounded by the configuration).
type targetMetrics struct {
	phase     map[string]*vm.PrometheusHistogram
	failures  map[string]*vm.Counter
	aborts    map[string]*vm.Counter
	pairRetry *vm.Counter
	exhausted *vm.Counter
	batchSize *vm.PrometheusHistogram
}

func newTargetMetrics(model, target string) *targetMetrics {
	l := `model="` + model + `",target="` + target + `"`
	m := &targetMetrics{
		phase: map[string]*vm.PrometheusHistogram{}, failures: map[string]*vm.Counter{}, aborts: map[string]*vm.Counter{},
		pairRetry: vm.GetOrCreateCounter(`sluice_pd_pair_retries_total{` + l + `}`),
		exhausted: vm.GetOrCreateCounter(`sluice_pd_pairs_exhausted_total{` + l + `}`),
		batchSize: vm.GetOrCreatePrometheusHistogramExt(`sluice_pd_prepare_batch_size{`+l+`}`, batchSizeBuckets),
	}
	for _, p := range []string{phasePrepare, phasePrefill, phaseDecodeHead, phaseDecode} {
		m.phase[p] = vm.GetOrCreatePrometheusHistogramExt(`sluice_pd_phase_duration_seconds{`+l+`,phase="`+p+`"}`, metrics.DurationBuckets)
		m.failures[p] = vm.GetOrCreateCounter(`sluice_pd_phase_failures_total{` + l + `,phase="` + p + `"}`)
	}
	for _, r := range []string{abortLegFailed, abortClientGone, abortDeadline, abortStream} {
		m.aborts[r] = vm.GetOrCreateCounter(`sluice_pd_aborts_total{` + l + `,reason="` + r + `"}`)
	}
	return m
}

func (m *targetMetrics) observe(phase string, since time.Time) {
	m.phase[phase].UpdateDuration(since)
}
