package pd_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/pd"
)

// countedConn is a connection to a worker that counts itself out of open when closed.
type countedConn struct {
	net.Conn
	open *atomic.Int32
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// A request that a reload finds in flight finishes on the retired target's workers, and the
// connections its calls used are closed once they end, not kept idle by a configuration no
// longer in force (for the idle timeout, 90 seconds, on every reload under load).
func TestRetiredTargetKeepsNoIdleConnections(t *testing.T) {
	f := startFleet(t, nil)
	g, reload := startReloadableGateway(t, f.gatewayTOML("", ""))
	var open atomic.Int32
	pd.SetDialHook(func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		open.Add(1)
		return &countedConn{Conn: c, open: &open}, nil
	})
	t.Cleanup(func() { pd.SetDialHook(nil) })

	// The request has its pair when the reload retires its target, and makes its calls after.
	held, release := holdFirstPair(t)
	done := make(chan int, 1)
	go func() {
		status, _, _ := streamErr(g.Addr("web"), chatBody("in flight across a reload"))
		done <- status
	}()
	<-held
	reload()
	release()
	select {
	case status := <-done:
		require.Equal(t, 200, status)
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not end")
	}
	require.Positive(t, len(f.executions(prefillA, "prefill"))+len(f.executions(prefillB, "prefill")), "the retired target's workers served it")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, open.Load(), "connections of the retired target still open")
	}, 5*time.Second, 10*time.Millisecond)
}
