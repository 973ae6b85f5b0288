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

// firstFree keeps, of the backends with fewer than max requests in flight, the one of the
// lowest ID, and hands the count to itself as Taker, which judges again on the count the
// request joins. race, when set, runs once after the first judgement: another request
// counted meanwhile.
type firstFree struct {
	max   int64
	picks int
	race  func()
}

func (s *firstFree) OnPick(rc *RequestCtx, c *balancer.Choice) {
	s.picks++
	kept := false
	for _, b := range rc.Service().Backends {
		if kept || b.LB.Active() >= s.max {
			c.Exclude.Add(b.LB.ID)
			continue
		}
		kept = true
	}
	if !kept {
		rc.RefusePick(ErrAtCapacity)
	}
	rc.TakePick(s)
	if s.race != nil {
		s.race()
		s.race = nil
	}
}

func (s *firstFree) Take(b *balancer.Backend) bool {
	n := b.Active()
	return n < s.max && b.AcquireFrom(n)
}

// A pick stage that hands the count to a Taker has the backend chosen counted once, by the
// Taker; a backend the Taker refuses (another request took its last slot after the stage
// judged it) is not counted, and the stages judge again: the request goes to a backend with
// room, or gets the stages' refusal when none is left.
func TestPickTakerJudgesOnTheCountTheRequestJoins(t *testing.T) {
	lbs := []*balancer.Backend{{ID: 0, Name: "http://10.0.0.1:8000"}, {ID: 1, Name: "http://10.0.0.2:8000"}}
	bal, err := balancer.New(balancer.RoundRobin, lbs)
	require.NoError(t, err)
	svc := &Service{Name: "up", Balancer: bal}
	for _, lb := range lbs {
		svc.Backends = append(svc.Backends, &Backend{URL: lb.Name, Host: []byte(lb.Name[7:]), LB: lb, Pool: pool.New(pool.Options{Addr: lb.Name[7:]})})
	}
	stage := &firstFree{max: 1}
	chain, err := NewChain(stage)
	require.NoError(t, err)
	rt := &Route{Name: "take", Service: svc, Chain: chain, M: metrics.ForRoute("take", "up")}
	ep := NewEntrypoint("web", false, oneRoute{rt}, metrics.ForEntrypoint("take"), nil)
	var rc RequestCtx
	rc.SetClientAddr(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, rc.Req.ParseRequestHead([]byte(benchChatHead), nil))
	require.NoError(t, ep.route(&rc, time.Now()))

	b, err := rc.pick()
	require.NoError(t, err)
	require.Equal(t, 0, b.LB.ID)
	require.EqualValues(t, 1, lbs[0].Active(), "counted once, by the taker")
	require.Equal(t, 1, stage.picks)
	b.Release()

	// Backend 0 is free when judged and full when taken.
	stage.picks, stage.race = 0, lbs[0].Acquire
	b, err = rc.pick()
	require.NoError(t, err)
	require.Equal(t, 1, b.LB.ID, "judged again, the request goes where there is room")
	require.Equal(t, 2, stage.picks)
	require.EqualValues(t, 1, lbs[0].Active(), "the backend filled meanwhile is not counted beyond its room")
	require.EqualValues(t, 1, lbs[1].Active())
	require.False(t, rc.choice.Exclude.Has(0), "the refusal lasts one pick")

	// Backend 1 fills after the judgement too: no room is left.
	stage.picks, stage.race = 0, lbs[1].Acquire
	b.Release()
	b, err = rc.pick()
	require.Nil(t, b)
	require.Same(t, ErrAtCapacity, err, "the stage's refusal answers")
	require.Equal(t, 2, stage.picks)
	require.EqualValues(t, 1, lbs[0].Active())
	require.EqualValues(t, 1, lbs[1].Active())
	require.Nil(t, rc.pickTake, "the request keeps no taker past its pick")
}
