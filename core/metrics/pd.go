package metrics

import (
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// Phases of a prefill/decode exchange (label phase of the sluice_pd_ families).
const (
	PDPrepare    = "prepare"
	PDPrefill    = "prefill"
	PDDecodeHead = "decode_head"
	PDDecode     = "decode"
)

// Reasons a prefill/decode execution is aborted (label reason of sluice_pd_aborts_total).
const (
	PDAbortLegFailed  = "leg_failed"
	PDAbortClientGone = "client_gone"
	PDAbortTimeout    = "timeout"
	PDAbortStream     = "stream_failed"
	// PDAbortGatewayResources: the gateway could not connect a worker for want of its own
	// descriptors, memory or ports. No worker is at fault, so it is not a leg_failed.
	PDAbortGatewayResources = "gateway_resources"
)

// PDBatchBuckets are the bounds of sluice_pd_prepare_batch_size, in reservations.
var PDBatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// PD holds the prefill/decode serving metrics of one target of a model alias.
type PD struct {
	series    *series
	phase     map[string]*vm.PrometheusHistogram
	failures  map[string]*vm.Counter
	aborts    map[string]*vm.Counter
	pairRetry *vm.Counter
	exhausted *vm.Counter
	batchSize *vm.PrometheusHistogram
}

// ForPD returns the prefill/decode metrics of target of model alias model. They survive
// reloads that keep the target and go once no configuration in force names it (InForce).
func ForPD(model, target string) *PD {
	l := labels("model", model, "target", target)
	x := seriesOf("pd{" + l + "}")
	m := &PD{
		series: x,
		phase:  map[string]*vm.PrometheusHistogram{}, failures: map[string]*vm.Counter{}, aborts: map[string]*vm.Counter{},
		pairRetry: x.s.GetOrCreateCounter(`sluice_pd_pair_retries_total{` + l + `}`),
		exhausted: x.s.GetOrCreateCounter(`sluice_pd_pairs_exhausted_total{` + l + `}`),
		batchSize: x.s.GetOrCreatePrometheusHistogramExt(`sluice_pd_prepare_batch_size{`+l+`}`, PDBatchBuckets),
	}
	for _, p := range []string{PDPrepare, PDPrefill, PDDecodeHead, PDDecode} {
		m.phase[p] = x.s.GetOrCreatePrometheusHistogramExt(`sluice_pd_phase_duration_seconds{`+l+`,phase="`+p+`"}`, DurationBuckets)
	}
	for _, p := range []string{PDPrepare, PDPrefill, PDDecodeHead} {
		m.failures[p] = x.s.GetOrCreateCounter(`sluice_pd_phase_failures_total{` + l + `,phase="` + p + `"}`)
	}
	for _, r := range []string{PDAbortLegFailed, PDAbortClientGone, PDAbortTimeout, PDAbortStream, PDAbortGatewayResources} {
		m.aborts[r] = x.s.GetOrCreateCounter(`sluice_pd_aborts_total{` + l + `,reason="` + r + `"}`)
	}
	return m
}

func (m *PD) groups() []*series {
	if m == nil {
		return nil
	}
	return []*series{m.series}
}

// Phase records a phase that succeeded, begun at since.
func (m *PD) Phase(phase string, since time.Time) { m.phase[phase].UpdateDuration(since) }

// Failed counts a phase a worker failed (PDPrepare, PDPrefill or PDDecodeHead).
func (m *PD) Failed(phase string) { m.failures[phase].Inc() }

// PairRetry counts a request sent to another worker pair.
func (m *PD) PairRetry() { m.pairRetry.Inc() }

// Exhausted counts a request no pair of the target could serve.
func (m *PD) Exhausted() { m.exhausted.Inc() }

// Aborted counts an execution aborted on both workers for reason.
func (m *PD) Aborted(reason string) { m.aborts[reason].Inc() }

// Batch records a prepare call to a decode worker carrying n reservations.
func (m *PD) Batch(n int) { m.batchSize.Update(float64(n)) }
