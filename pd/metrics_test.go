package pd_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/gateway"
)

// metricValue returns the value of the series matching re on the admin metrics page.
func metricValue(t *testing.T, page, re string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + re + ` (\S+)$`).FindStringSubmatch(page)
	require.NotNil(t, m, "no series %s", re)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// The exchange is measured: per-phase durations, pair retries, aborts by reason and prepare
// batch sizes. (The series are process-wide, so they are checked for at least what this
// test caused.)
func TestMetricsCountPhasesRetriesAbortsAndBatches(t *testing.T) {
	f := startFleet(t, faulty(prefillA, "status=503"))
	g := startGateway(t, f.gatewayTOML("", ""))
	msg := promptRankedFirst(t, "prefill-a", "prefill-b")
	status, data := stream(t, g, chatBody(msg))
	require.Equal(t, 200, status, data)

	fetch := func() string {
		resp, err := http.Get("http://" + g.AdminAddr() + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		return string(b)
	}
	l := `model="chat",target="t"`
	// The decode phase is recorded when the request completes, just after its last byte.
	deadline := time.Now().Add(5 * time.Second)
	for !regexp.MustCompile(`(?m)^sluice_pd_phase_duration_seconds_count\{` + l + `,phase="decode"\} [1-9]`).MatchString(fetch()) {
		require.True(t, time.Now().Before(deadline), "no decode phase recorded within 5s")
		time.Sleep(5 * time.Millisecond) // polling for the event, not asserting on time
	}
	page := fetch()
	for _, phase := range []string{"prepare", "prefill", "decode_head", "decode"} {
		require.GreaterOrEqual(t, metricValue(t, page, `sluice_pd_phase_duration_seconds_count\{`+l+`,phase="`+phase+`"\}`), 1.0, phase)
	}
	require.GreaterOrEqual(t, metricValue(t, page, `sluice_pd_phase_failures_total\{`+l+`,phase="prefill"\}`), 1.0)
	require.GreaterOrEqual(t, metricValue(t, page, `sluice_pd_pair_retries_total\{`+l+`\}`), 1.0)
	require.GreaterOrEqual(t, metricValue(t, page, `sluice_pd_aborts_total\{`+l+`,reason="leg_failed"\}`), 1.0)
	require.GreaterOrEqual(t, metricValue(t, page, `sluice_pd_prepare_batch_size_count\{`+l+`\}`), 2.0)
}

// sluice_pd_phase_failures_total counts the phases a worker failed: an exchange aborted
// because the client left or because the gateway's execution_timeout_ms passed is counted by
// its abort reason, not as a failure of the worker whose call was cut.
func TestAbortsNoWorkerCausedAreNotPhaseFailures(t *testing.T) {
	slowPrefill := func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillA || i == prefillB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	}
	const (
		failures = `sluice_pd_phase_failures_total{model="chat",target="t",phase="prefill"}`
		aborts   = `sluice_pd_aborts_total{model="chat",target="t",reason="`
	)
	for _, tc := range []struct {
		reason string
		extra  string // the target's extra configuration
		run    func(t *testing.T, f *fleet, g *gateway.Gateway)
	}{
		{"client_gone", "", func(t *testing.T, f *fleet, g *gateway.Gateway) {
			leaveDuring(t, g.Addr("web"), f, promptRankedFirst(t, "prefill-a", "prefill-b"), prefillA, "prefill")
		}},
		{"timeout", "execution_timeout_ms = 300", func(t *testing.T, f *fleet, g *gateway.Gateway) {
			status, data := stream(t, g, chatBody("too slow"))
			require.Equal(t, 504, status, data)
		}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			f := startFleet(t, slowPrefill)
			g := startGateway(t, f.gatewayTOML("", tc.extra))
			before := pdCounters(t)
			tc.run(t, f, g)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				now, err := readPDCounters()
				if assert.NoError(c, err) {
					assert.Equal(c, before[aborts+tc.reason+`"}`]+1, now[aborts+tc.reason+`"}`], "the exchange was aborted")
				}
			}, 5*time.Second, 5*time.Millisecond)
			after := pdCounters(t)
			require.Equal(t, before[failures], after[failures], "no worker failed its prefill")
			require.Equal(t, before[aborts+`leg_failed"}`], after[aborts+`leg_failed"}`], "no worker failed its leg")
		})
	}
}
