package mirror

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pool"
)

// copyHead is the head of the copies these tests send. A zero pipeline.CopyHead completes to
// the backend's Host value alone (there is no request to take a head from here), so the
// backends below carry a whole request head as their Host.
const copyHead = "POST /copy HTTP/1.1\r\nHost: shadow\r\nContent-Length: 2\r\n\r\n"

// shadowOf is a shadow service with one backend, sending over p.
func shadowOf(t *testing.T, p *pool.Pool) *pipeline.Service {
	t.Helper()
	lb := &balancer.Backend{Name: "http://" + p.Options().Addr}
	bal, err := balancer.New(balancer.RoundRobin, []*balancer.Backend{lb})
	require.NoError(t, err)
	return &pipeline.Service{Name: "shadow", Balancer: bal, Backends: []*pipeline.Backend{{URL: lb.Name, Host: []byte(copyHead), LB: lb, Pool: p}}}
}

// countingShadow answers every request 200 and reports each on the channel it returns.
func countingShadow(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	got := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					_ = req.Body.Close()
					got <- struct{}{}
					if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), got
}

// A copy whose backend was chosen from the shadow service of a configuration that a reload
// then replaced, and whose pool that configuration closed as it retired before the copy went
// out, goes to the shadow service in force instead: nothing was sent, so it is sent once. A
// copy that meets a closed pool with no newer shadow in force fails: there is nowhere else to
// send it.
func TestACopyRacingAReloadGoesToTheNewShadow(t *testing.T) {
	addr, got := countingShadow(t)
	closed := pool.New(pool.Options{Addr: "127.0.0.1:1"})
	closed.Close() // the retired configuration's pool
	live := pool.New(pool.Options{Addr: addr})
	t.Cleanup(live.Close)
	old, cur := shadowOf(t, closed), shadowOf(t, live)

	m := New(Options{Service: "racing", Shadow: "shadow", QueueSize: 1, MaxConcurrent: 1, MaxBytes: 1 << 20, Timeout: 5 * time.Second}, old)
	t.Cleanup(m.Close)
	j := &job{body: []byte("{}")}

	b := old.Pick(nil)
	require.False(t, m.sendTo(j, old, b, true), "the shadow in force is the one chosen from: no newer one to go to")
	b.Release()

	m.InForce(cur) // the reload goes in force after the sender chose its backend from old
	b = old.Pick(nil)
	require.True(t, m.sendTo(j, old, b, true), "the copy goes again, to the shadow in force")
	require.False(t, m.sendTo(j, old, b, false), "but only so many times")
	b.Release()

	m.send(&job{body: []byte("{}")})
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the copy never reached the shadow in force")
	}
	require.Zero(t, cur.Backends[0].LB.Active(), "a copy is in flight only while it is sent")
	require.Zero(t, old.Backends[0].LB.Active())
}
