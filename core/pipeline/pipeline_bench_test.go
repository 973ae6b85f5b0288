package pipeline

import (
	"time"

	"net/netip"
	"testing"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pool"
)

type noopStage struct{}

func (noopStage) OnRequest(*RequestCtx) error  { return nil }
func (noopStage) OnResponse(*RequestCtx) error { return nil }
func (noopStage) OnComplete(*RequestCtx)       {}

type oneRoute struct{ rt *Route }

func (o oneRoute) Resolve(string, *http1.Request) (*Route, *Chain) { return o.rt, nil }
func (o oneRoute) Hooks() *Chain                                   { return nil }

const benchChatHead = "POST /v1/chat/completions HTTP/1.1\r\nHost: api.example.com\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-test\r\nX-Forwarded-For: 10.0.0.1\r\nContent-Length: 2\r\n\r\n"

// BenchmarkRouteToUpstreamHead is the pipeline's own cost for one request with three no-op
// stages: request ID, route, request stages, backend choice and the upstream head. The peer
// is not trusted: its X-Forwarded-For is dropped.
func BenchmarkRouteToUpstreamHead(b *testing.B) { benchRouteToUpstreamHead(b, nil) }

// BenchmarkRouteToUpstreamHeadAuthenticated is BenchmarkRouteToUpstreamHead on a route that
// authenticates callers itself: the credential fields are left out of the upstream head.
func BenchmarkRouteToUpstreamHeadAuthenticated(b *testing.B) {
	stripAuth = true
	defer func() { stripAuth = false }()
	benchRouteToUpstreamHead(b, nil)
}

// stripAuth sets the benchmark route's Authenticates and StripAuthorization.
var stripAuth bool

// BenchmarkRouteToUpstreamHeadTrustedPeer is BenchmarkRouteToUpstreamHead from a peer in
// trusted_ips (the last of several networks): its X-Forwarded-For is extended.
func BenchmarkRouteToUpstreamHeadTrustedPeer(b *testing.B) {
	benchRouteToUpstreamHead(b, []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("127.0.0.1/32"),
	})
}

// BenchmarkRouteToUpstreamHeadTaker is BenchmarkRouteToUpstreamHead with a pick stage that
// leaves out the backends with no room and has the backend chosen counted by its Taker,
// judged again on the count the request joins (as a model router over observed workers).
func BenchmarkRouteToUpstreamHeadTaker(b *testing.B) {
	benchRouteToUpstreamHead(b, nil, &firstFree{max: 1 << 20})
}

func benchRouteToUpstreamHead(b *testing.B, trusted []netip.Prefix, stages ...any) {
	lbs := []*balancer.Backend{{ID: 0, Name: "http://10.0.0.2:8000"}, {ID: 1, Name: "http://10.0.0.3:8000"}}
	bal, err := balancer.New(balancer.RoundRobin, lbs)
	if err != nil {
		b.Fatal(err)
	}
	svc := &Service{Name: "up", Balancer: bal}
	for _, lb := range lbs {
		svc.Backends = append(svc.Backends, &Backend{URL: lb.Name, Host: []byte(lb.Name[7:]), LB: lb, Pool: pool.New(pool.Options{Addr: lb.Name[7:]})})
	}
	chain, err := NewChain(append([]any{noopStage{}, noopStage{}, noopStage{}}, stages...)...)
	if err != nil {
		b.Fatal(err)
	}
	rt := &Route{Name: "bench", Service: svc, Chain: chain, M: metrics.ForRoute("bench", "up"), Authenticates: stripAuth, StripAuthorization: stripAuth}
	ep := NewEntrypoint("web", false, oneRoute{rt}, metrics.ForEntrypoint("bench"), nil)
	ep.Port, ep.TrustedIPs = "8080", trusted
	var rc RequestCtx
	rc.SetClientAddr(netip.MustParseAddr("127.0.0.1"))
	if err := rc.Req.ParseRequestHead([]byte(benchChatHead), nil); err != nil {
		b.Fatal(err)
	}
	rc.Req.Body = append(rc.Req.Body, "{}"...)
	b.ReportAllocs()
	for b.Loop() {
		if err := ep.route(&rc, time.Now()); err != nil {
			b.Fatal(err)
		}
		bk, _ := rc.pick()
		if bk == nil || len(*rc.upHead) == 0 {
			b.Fatal("no backend")
		}
		if rc.trusted != (trusted != nil) {
			b.Fatal("trust not decided")
		}
		bk.Release()
	}
}
