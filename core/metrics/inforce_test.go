package metrics

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runName returns a name made of base that no other run of a test in this process has used:
// groups published outside InForce (an entrypoint's) are kept for the process, so a test that
// counts in them starts from zero with -count=N only under a name of its own.
func runName(base string) string {
	return fmt.Sprintf("%s_%d", base, runNames.Add(1))
}

var runNames atomic.Int64

// linesNaming returns the exposition's series lines that contain pair (a label and its
// quoted value).
func linesNaming(pair string) []string {
	var b bytes.Buffer
	WritePrometheus(&b)
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(l, "#") && strings.Contains(l, pair) {
			out = append(out, l)
		}
	}
	return out
}

// kept reports whether allSeries still holds a group of key.
func kept(key string) bool {
	allSeries.mu.Lock()
	defer allSeries.mu.Unlock()
	return allSeries.m[key] != nil
}

// The series of a router the configuration in force no longer names go with the
// configuration that named it; a configuration naming the router again starts its series from
// zero, and one that still names it keeps their values.
func TestInForceForgetsWhatNoConfigurationNames(t *testing.T) {
	ra, rb, up := runName("inforce_a"), runName("inforce_b"), runName("inforce_up")
	a := ForRoute(ra, "up")
	held := InForce([]Named{a, ForBackend(up, "http://inforce:1")}, nil)
	a.Response(200, time.Millisecond, 1)
	okA := `sluice_responses_total{router="` + ra + `",service="up",code="2xx"}`
	require.Equal(t, []string{okA + " 1"}, scrapeLines(okA))
	require.NotEmpty(t, linesNaming(`service="`+up+`"`))

	still := ForRoute(ra, "up")
	held = InForce([]Named{still}, held)
	require.Equal(t, []string{okA + " 1"}, scrapeLines(okA), "a router still named keeps its series")
	require.Empty(t, linesNaming(`service="`+up+`"`), "a backend no longer named goes")

	b := ForRoute(rb, "up")
	held = InForce([]Named{b}, held)
	require.Empty(t, linesNaming(`router="`+ra+`"`))
	require.NotEmpty(t, linesNaming(`router="`+rb+`"`))
	a.Response(200, time.Millisecond, 1) // a request of the replaced configuration, in flight
	require.Empty(t, linesNaming(`router="`+ra+`"`))

	again := ForRoute(ra, "up")
	held = InForce([]Named{again, b}, held)
	require.Equal(t, []string{okA + " 0"}, scrapeLines(okA), "named again, it starts from zero")
	InForce(nil, held)
}

// A group goes when no configuration in force names it: two gateways of one process may each
// have one in force.
func TestInForceCountsEveryConfigurationInForce(t *testing.T) {
	one := InForce([]Named{ForRoute("inforce_shared", "up")}, nil)
	two := InForce([]Named{ForRoute("inforce_shared", "up")}, nil)
	InForce(nil, one)
	require.NotEmpty(t, linesNaming(`router="inforce_shared"`))
	InForce(nil, two)
	require.Empty(t, linesNaming(`router="inforce_shared"`))
	require.False(t, kept(`route{router="inforce_shared",service="up"}`))
}

// The groups made for a configuration compiled and refused are forgotten at the next
// activation; those it shares with the configuration in force stay.
func TestInForceForgetsRefusedConfigurations(t *testing.T) {
	held := InForce([]Named{ForRoute("inforce_live", "up")}, nil)
	ForRoute("inforce_refused", "up").Response(200, time.Millisecond, 1)
	ForRoute("inforce_live", "up")
	require.True(t, kept(`route{router="inforce_refused",service="up"}`))
	held = InForce([]Named{ForRoute("inforce_live", "up")}, held)
	require.False(t, kept(`route{router="inforce_refused",service="up"}`))
	require.Empty(t, linesNaming(`router="inforce_refused"`))
	require.True(t, kept(`route{router="inforce_live",service="up"}`))
	InForce(nil, held)
}

// An entrypoint's counters, made when its listener is bound and published once it serves,
// survive an activation between the two.
func TestActivationKeepsAnEntrypointAboutToServe(t *testing.T) {
	ep := runName("inforce_ep") // published outside InForce, its series stay for the process
	e := ForEntrypoint(ep)
	InForce(nil, nil)
	e.Request()
	e.Publish()
	series := `sluice_requests_total{entrypoint="` + ep + `"}`
	require.Equal(t, []string{series + " 1"}, scrapeLines(series))
	InForce(nil, nil)
	require.NotEmpty(t, scrapeLines(series), "published outside InForce, it stays")
}

// The counters of mirrors, revisions, rollouts, scalers and health checks follow the same
// rule as a router's.
func TestInForceForgetsLifecycleAndHealthCounters(t *testing.T) {
	m := ForMirror("inforce_svc", "inforce_shadow")
	m.Publish() // as the mirror does when its configuration goes in force
	sp := ForSplit("inforce_svc")
	sp.Revision("v1").Request(false)
	sp.Rollout().Event(RolloutAdvanced)
	sp.InForce()
	sc := ForScaling("inforce_svc")
	sc.InForce()
	h := ForHealth("inforce_svc", "http://inforce:2")
	held := InForce([]Named{m, sp, sc, h}, nil)
	for _, f := range []string{"sluice_mirror_sent_total", "sluice_revision_requests_total", "sluice_rollout_events_total", "sluice_scaling_buffer_rejected_total", "sluice_health_checks_total", "sluice_service_no_healthy_backend_total"} {
		require.NotEmpty(t, scrapeLines(f+`{service="inforce_svc"`), f)
	}
	InForce(nil, held)
	sp.Retire()
	sc.Retire()
	require.Empty(t, linesNaming(`service="inforce_svc"`))
}

// The series of a model alias (admission, tokens by target and consumer, usage missing, prefix
// affinity, prefill/decode), of a rate-limit middleware and of an observed service's
// exclusions follow the same rule as a router's: they go with the last configuration in force
// that names them, and come back from zero.
func TestInForceForgetsModelRateLimitAndExclusionCounters(t *testing.T) {
	named := func() []Named {
		m := ForModel("inforce_model", "queue_full")
		m.Rejected("queue_full")
		m.Tokens("inforce_target", "inforce_team").Add(3, 2, 1)
		m.UsageMissing()
		p := ForPrefix("inforce_model")
		p.Selected(1, 4096, 6000)
		pd := ForPD("inforce_model", "inforce_target")
		pd.PairRetry()
		rl := ForRateLimit("inforce_rl")
		rl.Limited()
		ex := ForExclusions("inforce_fleet", "stale")
		ex.Counters[0].Inc()
		return []Named{m, p, pd, rl, ex}
	}
	families := []string{
		`sluice_model_rejected_total{model="inforce_model"`, `sluice_model_queue_wait_seconds_bucket{model="inforce_model"`,
		`sluice_model_tokens_total{model="inforce_model"`, `sluice_model_usage_missing_total{model="inforce_model"`,
		`sluice_prefix_affinity_selections_total{model="inforce_model"`, `sluice_pd_pair_retries_total{model="inforce_model"`,
		`sluice_rate_limited_total{middleware="inforce_rl"`, `sluice_worker_exclusions_total{service="inforce_fleet"`,
	}
	held := InForce(named(), nil)
	for _, f := range families {
		require.NotEmpty(t, scrapeLines(f), f)
	}
	require.Equal(t, []string{`sluice_rate_limited_total{middleware="inforce_rl"} 1`}, scrapeLines(`sluice_rate_limited_total{middleware="inforce_rl"}`))

	held = InForce(nil, held)
	for _, pair := range []string{`model="inforce_model"`, `middleware="inforce_rl"`, `service="inforce_fleet"`} {
		require.Empty(t, linesNaming(pair), pair)
	}

	again := ForRateLimit("inforce_rl")
	held = InForce([]Named{again}, held)
	require.Equal(t, []string{`sluice_rate_limited_total{middleware="inforce_rl"} 0`}, scrapeLines(`sluice_rate_limited_total{middleware="inforce_rl"}`), "named again, it starts from zero")
	InForce(nil, held)
}

// An entrypoint's counters stay while a transport of it serves: one that replaces another
// publishes before the other's release, and counts on; once the last is released they go,
// and a transport of the name published later counts from zero.
func TestEntrypointCountersGoWithItsLastTransport(t *testing.T) {
	const series = `sluice_requests_total{entrypoint="inforce_gone"}`
	old := ForEntrypoint("inforce_gone")
	releaseOld := old.Publish()
	old.Request()
	cur := ForEntrypoint("inforce_gone") // a reload's new transport of the name
	releaseCur := cur.Publish()
	releaseOld()
	cur.Request()
	require.Equal(t, []string{series + " 2"}, scrapeLines(series), "the same counters, counting on")
	releaseCur()
	releaseCur() // a second call does nothing
	require.Empty(t, scrapeLines(series), "no transport of the name serves")
	again := ForEntrypoint("inforce_gone")
	defer again.Publish()()
	require.Equal(t, []string{series + " 0"}, scrapeLines(series))
}
