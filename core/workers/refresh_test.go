package workers

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
)

// Refresh polls a server out of the rounds and returns with its answer in force: a worker
// that reported itself not ready, then became ready, is eligible as soon as Refresh returns,
// without waiting for the next round an hour away. A worker that comes back as a new process
// (another epoch) is confirmed by Refresh's second poll.
func TestRefreshPollsAtOnce(t *testing.T) {
	var ready atomic.Bool
	var epoch atomic.Int64
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"worker_id":"w1","role":"aggregated","ready":%t,"healthy":true,"active":0,"epoch":%d}`, ready.Load(), epoch.Load())
	}))
	defer worker.Close()
	g := NewGroup(Config{Service: "svc", Interval: time.Hour, TTL: 2 * time.Hour},
		[]Member{{URL: worker.URL, Name: worker.URL, LB: &balancer.Backend{ID: 0}}})
	defer g.Stop()
	g.Start()
	waitFor(t, func() bool { return g.members[0].Worker.View().Kind == Observed })
	r, _ := g.Judge(0, &Needs{Role: RoleAggregated})
	require.Equal(t, NotReady, r)

	ready.Store(true)
	g.Refresh(0)
	r, _ = g.Judge(0, &Needs{Role: RoleAggregated})
	require.Equal(t, Eligible, r)

	epoch.Store(1)
	g.Refresh(0)
	r, _ = g.Judge(0, &Needs{Role: RoleAggregated})
	require.Equal(t, Eligible, r, "the new identity is confirmed by the second poll")
	require.EqualValues(t, 1, g.members[0].Worker.View().Observation.Epoch)

	g.Refresh(1) // no such server: nothing
}

// An observation asked for before the one in force is dropped when it arrives late: a
// round's poll sent while a replica started must not undo a Refresh made once it was ready.
func TestLateObservationDoesNotReplaceANewerOne(t *testing.T) {
	w := new(Worker)
	o := observation("w0")
	now := monoNow()
	w.observed(o, 0, now, now, time.Now())
	stale := o
	stale.Ready = false
	w.observed(stale, 0, now-1, now+1, time.Now())
	require.True(t, w.View().Observation.Ready, "the older poll's answer was dropped")
	w.observed(stale, 0, now+2, now+3, time.Now())
	require.False(t, w.View().Observation.Ready, "a newer poll's answer replaces it")
}
