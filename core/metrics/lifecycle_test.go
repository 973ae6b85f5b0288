package metrics

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// populateLifecycle creates a series of every lifecycle family.
func populateLifecycle() {
	m := ForMirror("up", "shadow")
	m.Publish()
	m.Sent()
	m.Dequeued()
	m.Answered(200)
	m.Dropped(MirrorQueueFull)
	sp := ForSplit("up")
	r := sp.Revision("v1")
	r.SetPercent(90)
	r.Request(false)
	ro := sp.Rollout()
	ro.SetState(RolloutProgressing)
	ro.Event(RolloutAdvanced)
	sp.InForce()
	sc := ForScaling("up")
	sc.Set(1, 1, 0, 0, 1)
	sc.Rejected(ScalingTimeout)
	sc.InForce()
}

// scrapeLines returns the exposition's lines that start with prefix.
func scrapeLines(prefix string) []string {
	var b bytes.Buffer
	WritePrometheus(&b)
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// Of two scalers of a service, only the one in force is exposed, whichever wrote last; the
// replaced one retiring leaves the new one's gauges, the one in force retiring removes them.
func TestScalingGaugesFollowTheScalerInForce(t *testing.T) {
	const desired = `sluice_scaling_desired_replicas{service="owned"}`
	old := ForScaling("owned")
	old.Set(1, 0, 1, 0, 0)
	old.InForce()
	require.Equal(t, []string{desired + " 1"}, scrapeLines(desired))

	cur := ForScaling("owned")
	cur.Set(3, 2, 1, 0, 0)
	cur.InForce()
	old.Set(0, 0, 0, 0, 0) // the replaced scaler stops its replicas
	old.Retire()
	require.Equal(t, []string{desired + " 3"}, scrapeLines(desired))
	require.Equal(t, []string{`sluice_scaling_replicas{service="owned",state="starting"} 2`}, scrapeLines(`sluice_scaling_replicas{service="owned",state="starting"}`))

	cur.Retire()
	require.Empty(t, scrapeLines(`sluice_scaling_`+`desired_replicas{service="owned"}`))
	require.Empty(t, scrapeLines(`sluice_scaling_replicas{service="owned"`))
}
