package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idleUpstreamBurst is how many requests a burst holds in flight at once: the upstream answers
// none until all arrived, so the gateway opens that many connections to it.
const idleUpstreamBurst = 4

// burstUpstream serves requests only once idleUpstreamBurst of them wait, so that each comes
// on its own connection; its closed channel reports each connection the gateway closes.
func burstUpstream(t *testing.T) *upstream {
	var waiting atomic.Int32
	all := make(chan struct{})
	return serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		if waiting.Add(1) == idleUpstreamBurst {
			close(all)
		}
		select {
		case <-all:
		case <-u.stop:
			return false
		}
		return echo(c, r, head, body)
	})
}

// burst sends idleUpstreamBurst requests to addr at once, each on its own client connection,
// and waits for their answers.
func burst(t *testing.T, addr string) {
	errs := make(chan error, idleUpstreamBurst)
	for i := 0; i < idleUpstreamBurst; i++ {
		c := dial(t, addr)
		go func() {
			if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			body, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
			}
			errs <- err
		}()
	}
	for i := 0; i < idleUpstreamBurst; i++ {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the burst of requests was not answered")
		}
	}
}

// When traffic stops, the gateway closes its idle upstream connections within
// idle_conn_timeout plus a bounded lag on every engine and upstream I/O path, not only when
// a later request takes or returns a connection: after a burst that leaves max_idle_conns
// connections idle, the upstream sees every one closed.
func TestIdleUpstreamConnsCloseWhenTrafficStops(t *testing.T) {
	const idle = 500 * time.Millisecond
	// The lag allowed past idle_conn_timeout: the pool's janitor slack (at most 100ms) or the
	// event loops' 250ms sweep, with room for a loaded machine.
	const lag = 1500 * time.Millisecond
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := burstUpstream(t)
			_, addr := startGatewayServers(t, engine, fmt.Sprintf("servers = [{ url = \"http://%s\" }]\nidle_conn_timeout = %q\nmax_idle_conns = %d", up.addr(), idle, idleUpstreamBurst))
			burst(t, addr)
			deadline := time.After(idle + lag)
			for i := 0; i < idleUpstreamBurst; i++ {
				select {
				case <-up.closed:
				case <-deadline:
					t.Fatalf("%d of %d idle upstream connections still open %v after the last request (idle_conn_timeout %v)", idleUpstreamBurst-i, idleUpstreamBurst, idle+lag, idle)
				}
			}
		})
	}
}

// A reload that retires a service's pool closes its idle connections and stops its janitor;
// the new pool's janitor then closes the connections it keeps when traffic stops. On the
// event loop path the loops hold the idle connections and sweep them on their own timer, so
// there the pool's janitor has nothing to wait for.
func TestReloadRetiresIdleUpstreamJanitor(t *testing.T) {
	const idle = 500 * time.Millisecond
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up1, up2 := burstUpstream(t), burstUpstream(t)
			doc := func(u *upstream, idleTimeout string) string {
				return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s

[routers.api]
rule = "PathPrefix(%s)"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]
idle_conn_timeout = %q
max_idle_conns = %d

[admin]
address = ""
`, engineTOML(engine), "`/`", u.addr(), idleTimeout, idleUpstreamBurst)
			}
			g, path := startFromFile(t, doc(up1, "1h"))
			addr := g.Addr("web")
			burst(t, addr)
			old := g.Snapshot().Services["up"].Backends[0].Pool
			onLoop := engine == "gnet"
			require.Equal(t, !onLoop, old.JanitorArmed(), "the pool's janitor is armed while its own idle connections wait")
			require.NoError(t, reloadWith(t, g, path, doc(up2, idle.String())))
			for i := 0; i < idleUpstreamBurst; i++ {
				up1.waitConnClosed(t, 5*time.Second)
			}
			require.False(t, old.JanitorArmed(), "the retired pool's janitor is still armed")
			burst(t, addr)
			deadline := time.After(idle + 1500*time.Millisecond)
			for i := 0; i < idleUpstreamBurst; i++ {
				select {
				case <-up2.closed:
				case <-deadline:
					t.Fatalf("%d idle connections of the new pool still open", idleUpstreamBurst-i)
				}
			}
		})
	}
}
