package pd

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/workers"
)

// observedTarget is a target (generation 1, digest "d") over one worker per observation
// (the JSON each answers), observed once before it returns; nothing is sent to the workers
// but the observations.
func observedTarget(tb testing.TB, obs ...string) *Target {
	tb.Helper()
	var members []workers.Member
	svc := &pipeline.Service{Name: "svc"}
	for i, o := range obs {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(o))
		}))
		tb.Cleanup(srv.Close)
		lb := &balancer.Backend{ID: i, Name: srv.URL}
		svc.Backends = append(svc.Backends, &pipeline.Backend{URL: srv.URL, LB: lb})
		members = append(members, workers.Member{URL: srv.URL, Name: srv.URL, LB: lb})
	}
	// The observations last the whole test: one round of polls is enough.
	g := workers.NewGroup(workers.Config{Service: "svc", Interval: time.Hour, TTL: 2 * time.Hour}, members)
	g.Start()
	tb.Cleanup(g.Stop)
	require.Eventually(tb, func() bool {
		for i := range obs {
			if g.Member(i).Worker.View().Kind != workers.Observed {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the workers were not all observed")
	t := NewTarget(Options{Alias: "chat", APIKey: "k", ExecutionTimeout: time.Second}, "t", svc, g, 1, "d")
	tb.Cleanup(t.Close)
	return t
}

// workerObs is the observation of an idle worker of role with max_active 1.
func workerObs(id, role string) string {
	return fmt.Sprintf(`{"worker_id":%q,"role":%q,"ready":true,"healthy":true,"active":0,"max_active":1,"waiting":0,"state_transfer":true,"execution_config_digest":"d","deployment_generation":1,"epoch":0}`, id, role)
}

// A worker chosen for a pair that another request filled since the candidates were judged is
// not counted beyond its capacity: it is left out, the next best is taken, and when none is
// left the choice reports the target full, having counted nothing.
func TestTakeLeavesOutAWorkerFilledSinceJudged(t *testing.T) {
	tg := observedTarget(t, workerObs("p0", RolePrefill), workerObs("d0", RoleDecode), workerObs("d1", RoleDecode))
	active := func(i int) int64 { return tg.service.Backends[i].LB.Active() }
	decodes := func() []candidate { return []candidate{{i: 1, id: "d0"}, {i: 2, id: "d1"}} }
	key := RequestKey([]byte("a request"))
	first := decodes()[byLoadThenRank(decodes(), key)]
	other := 3 - first.i

	// Another request takes the preferred worker's one sequence after this one judged it.
	tg.service.Backends[first.i].LB.Acquire()
	c, taken, lost, _ := tg.take(decodes(), &tg.decodeNeeds, key, nil, "")
	require.True(t, taken)
	require.True(t, lost, "a candidate was dropped for being at capacity")
	require.Equal(t, other, c.i, "the next best is taken")
	require.EqualValues(t, 1, active(first.i), "the filled worker is not counted beyond max_active")
	require.EqualValues(t, 1, active(other))

	// Both full now: nothing is taken, nothing counted.
	_, taken, lost, _ = tg.take(decodes(), &tg.decodeNeeds, key, nil, "")
	require.False(t, taken)
	require.True(t, lost)
	require.EqualValues(t, 1, active(first.i))
	require.EqualValues(t, 1, active(other))
	_, ok, full := tg.pickPair(key, new(excluded), nil)
	require.False(t, ok)
	require.True(t, full)
	require.Zero(t, active(0), "the prefill worker is not counted for a pair that was not made")

	// A freed sequence makes a pair again, counted on both workers.
	tg.service.Backends[other].Release()
	pr, ok, _ := tg.pickPair(key, new(excluded), nil)
	require.True(t, ok)
	require.Equal(t, pair{0, other}, pr)
	require.EqualValues(t, 1, active(0))
	require.EqualValues(t, 1, active(other))
}

// When no prefill worker can be taken, the decode worker taken for the pair is given back.
func TestTakePairGivesBackTheDecodeWorkerWithoutAPrefillOne(t *testing.T) {
	tg := observedTarget(t, workerObs("p0", RolePrefill), workerObs("d0", RoleDecode))
	key := RequestKey([]byte("a request"))
	// The prefill worker was free when the candidates were judged, and is full when taken.
	tg.service.Backends[0].LB.Acquire()
	_, ok, lost, same := tg.takePair([]candidate{{i: 0, id: "p0"}}, []candidate{{i: 1, id: "d0"}}, key, nil)
	require.False(t, ok)
	require.True(t, lost, "left out for being at capacity")
	require.False(t, same)
	require.Zero(t, tg.service.Backends[1].LB.Active(), "the decode worker's count was given back")
	require.EqualValues(t, 1, tg.service.Backends[0].LB.Active())

	// A prefill worker of the decode worker's worker_id is no pair: nothing stays counted.
	tg.service.Backends[0].Release()
	_, ok, _, same = tg.takePair([]candidate{{i: 0, id: "d0"}}, []candidate{{i: 1, id: "d0"}}, key, nil)
	require.False(t, ok)
	require.True(t, same)
	require.Zero(t, tg.service.Backends[0].LB.Active())
	require.Zero(t, tg.service.Backends[1].LB.Active())
}

// A preferred prefill worker of the decode worker's worker_id is passed over for the next
// one, rather than failing the pair while another prefill worker has room.
func TestTakePairPassesOverAPrefillWorkerOfTheDecodeWorkersID(t *testing.T) {
	tg := observedTarget(t, workerObs("d0", RolePrefill), workerObs("d0", RoleDecode), workerObs("p1", RolePrefill))
	key := RequestKey([]byte("a request"))
	// The prefill worker reporting the decode worker's worker_id is the less loaded one.
	ps := []candidate{{i: 0, id: "d0"}, {i: 2, id: "p1", load: 1}}
	pr, ok, lost, same := tg.takePair(ps, []candidate{{i: 1, id: "d0"}}, key, nil)
	require.True(t, ok, "the other prefill worker makes the pair")
	require.False(t, lost)
	require.False(t, same)
	require.Equal(t, pair{2, 1}, pr)
	require.Zero(t, tg.service.Backends[0].LB.Active(), "the passed-over worker is not counted")
	require.EqualValues(t, 1, tg.service.Backends[1].LB.Active())
	require.EqualValues(t, 1, tg.service.Backends[2].LB.Active())
}
