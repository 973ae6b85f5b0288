package pipeline

import (
	"time"

	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pool"
)

// skipFirst leaves backend 0 out of every pick and counts its calls.
type skipFirst struct{ calls *int }

func (s skipFirst) OnPick(_ *RequestCtx, c *balancer.Choice) {
	*s.calls++
	c.Exclude.Add(0)
}

// A pick stage judges every pick afresh: what it leaves out does not stay in the request's
// own choice, while the backends the request excluded stay out of the stage's.
func TestPickStageJudgesEachPick(t *testing.T) {
	lbs := []*balancer.Backend{{ID: 0, Name: "http://10.0.0.1:8000"}, {ID: 1, Name: "http://10.0.0.2:8000"}, {ID: 2, Name: "http://10.0.0.3:8000"}}
	bal, err := balancer.New(balancer.RoundRobin, lbs)
	require.NoError(t, err)
	svc := &Service{Name: "up", Balancer: bal}
	for _, lb := range lbs {
		svc.Backends = append(svc.Backends, &Backend{URL: lb.Name, Host: []byte(lb.Name[7:]), LB: lb, Pool: pool.New(pool.Options{Addr: lb.Name[7:]})})
	}
	calls := 0
	chain, err := NewChain(skipFirst{&calls})
	require.NoError(t, err)
	require.Equal(t, 1, chain.Len())
	rt := &Route{Name: "pick", Service: svc, Chain: chain, M: metrics.ForRoute("pick", "up")}
	ep := NewEntrypoint("web", false, oneRoute{rt}, metrics.ForEntrypoint("pick"), nil)
	var rc RequestCtx
	rc.SetClientAddr(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, rc.Req.ParseRequestHead([]byte(benchChatHead), nil))
	require.NoError(t, ep.route(&rc, time.Now()))

	for range 6 {
		b, _ := rc.pick()
		require.NotNil(t, b)
		require.NotEqual(t, 0, b.LB.ID)
		b.Release()
	}
	require.Equal(t, 6, calls)
	require.False(t, rc.choice.Exclude.Has(0), "the stage's exclusion lasts one pick")
	rc.Exclude(1) // a connect failure
	for range 3 {
		b, _ := rc.pick()
		require.Equal(t, 2, b.LB.ID)
		b.Release()
	}
	rc.Exclude(2)
	b, _ := rc.pick()
	require.Nil(t, b, "nothing left: the stage's 0 and the request's 1 and 2")
}
