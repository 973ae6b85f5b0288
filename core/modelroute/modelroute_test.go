package modelroute

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/workers"
)

// fleet is a service of two loopback workers of generations 1 and 2, observed by a group.
func fleet(t *testing.T) (*pipeline.Service, *workers.Group) {
	t.Helper()
	svc := &pipeline.Service{Name: "fleet"}
	var members []workers.Member
	for gen := 1; gen <= 2; gen++ {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, `{"worker_id":"w%d","role":"aggregated","ready":true,"healthy":true,"active":0,"max_active":4,"deployment_generation":%d}`, gen, gen)
		}))
		t.Cleanup(srv.Close)
		lb := &balancer.Backend{ID: gen - 1, Name: srv.URL}
		svc.Backends = append(svc.Backends, &pipeline.Backend{URL: srv.URL, LB: lb})
		members = append(members, workers.Member{URL: srv.URL, Name: srv.URL, LB: lb})
	}
	g := workers.NewGroup(workers.Config{Service: "fleet", Interval: 20 * time.Millisecond, TTL: time.Minute}, members)
	g.Start()
	t.Cleanup(g.Stop)
	deadline := time.Now().Add(5 * time.Second)
	for g.Member(0).Worker.View().Kind != workers.Observed || g.Member(1).Worker.View().Kind != workers.Observed {
		require.True(t, time.Now().Before(deadline), "the workers were never observed")
		time.Sleep(5 * time.Millisecond) // polling for the first observations
	}
	return svc, g
}

// A target carries its service's group and what it needs of the workers; the stage's
// OnPick leaves out the workers the target must not use, without allocating, and does
// nothing for a target whose servers are not observed.
func TestOnPickLeavesOutWorkersTheTargetMustNotUse(t *testing.T) {
	svc, g := fleet(t)
	other := &pipeline.Service{Name: "other"}
	tbl, err := NewTable(map[string]*config.Model{
		"m": {Name: "m", Targets: map[string]*config.Target{
			"new": {Service: "fleet", UpstreamModel: "m", Weight: 1, DeploymentGeneration: 2, ExecutionConfigDigest: ""},
			"any": {Service: "other", UpstreamModel: "m", Weight: 1, Priority: 1},
		}},
	}, map[string]*pipeline.Service{"fleet": svc, "other": other}, map[string]*workers.Group{"fleet": g}, nil)
	require.NoError(t, err)
	tiers := tbl.Alias("m").Tiers()
	require.Len(t, tiers, 2)
	bound, plain := tiers[0][0], tiers[1][0]
	require.Same(t, g, bound.Workers)
	require.Equal(t, workers.Needs{Role: workers.RoleAggregated, Generation: 2}, bound.Needs)
	require.Nil(t, plain.Workers)

	s := NewStage(tbl)
	var rc pipeline.RequestCtx
	st := &state{target: bound}
	rc.Set(&stateSlot, st)
	var c balancer.Choice
	s.OnPick(&rc, &c)
	require.True(t, c.Exclude.Has(0), "generation 1 is left out")
	require.False(t, c.Exclude.Has(1))
	require.Zero(t, testing.AllocsPerRun(200, func() { c.Reset(); s.OnPick(&rc, &c) }))

	c.Reset()
	st.target = plain
	s.OnPick(&rc, &c)
	require.Zero(t, c.Exclude.Len())
	rc.Set(&stateSlot, nil)
	s.OnPick(&rc, &c) // a request the stage did not route
	require.Zero(t, c.Exclude.Len())
}

// The stage's taker counts a request on a worker only when the target may use it on the
// count the request joins: up to the worker's max_active, and never on a worker the target
// must not use; it does not allocate.
func TestTakerCountsOnlyWhereTheTargetMayGo(t *testing.T) {
	svc, g := fleet(t)
	tbl, err := NewTable(map[string]*config.Model{
		"m": {Name: "m", Targets: map[string]*config.Target{
			"new": {Service: "fleet", UpstreamModel: "m", Weight: 1, DeploymentGeneration: 2},
		}},
	}, map[string]*pipeline.Service{"fleet": svc}, map[string]*workers.Group{"fleet": g}, nil)
	require.NoError(t, err)
	tk := (*taker)(tbl.Alias("m").Tiers()[0][0])
	old, cur := svc.Backends[0].LB, svc.Backends[1].LB

	require.False(t, tk.Take(old), "generation 1 is not the target's")
	require.Zero(t, old.Active())
	for range 4 { // max_active
		require.True(t, tk.Take(cur))
	}
	require.False(t, tk.Take(cur), "at capacity")
	require.EqualValues(t, 4, cur.Active(), "counted up to max_active, not beyond")
	cur.Release()
	require.Zero(t, testing.AllocsPerRun(200, func() {
		if tk.Take(cur) {
			cur.Release()
		}
	}))
}
