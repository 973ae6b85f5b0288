package ingress_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// A drain that begins after a response ended, while the client's next request on the
// connection kept alive waits unread in its socket (its event loop has not got to it), serves
// that request, with Connection: close, rather than closing the connection as idle: a client
// that sent a POST there would not send it again.
func TestDrainServesTheRequestItsLoopHasNotRead(t *testing.T) {
	toml := "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n[admin]\naddress = \"\"\n"
	cfg, err := config.LoadBytes("drain.toml", []byte(toml))
	require.NoError(t, err)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { snap.Retire(nil) })
	chain, err := pipeline.NewChain(statusStage{})
	require.NoError(t, err)
	res := withStages{snap, chain}

	for _, ce := range contractEngines[:2] { // the gnet engines
		t.Run(ce.name, func(t *testing.T) {
			tr := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, res)
			require.NoError(t, tr.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = tr.Drain(ctx)
			})
			c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
			require.NoError(t, err)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(c)
			_, err = io.WriteString(c, "POST /200 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
			require.NoError(t, err)
			head := readResponseHead(t, r)
			require.NotContains(t, strings.ToLower(head), "connection: close", "the first response keeps the connection")

			release := ingress.HoldLoop(tr)
			defer release()
			_, err = io.WriteString(c, "POST /200 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
			require.NoError(t, err)
			deadline := time.Now().Add(eventWait)
			for !ingress.UnreadInput(tr) {
				require.True(t, time.Now().Before(deadline), "the request never reached the gateway's socket")
				time.Sleep(time.Millisecond)
			}
			ingress.SweepDraining(tr)
			release()

			head = readResponseHead(t, r)
			require.True(t, strings.HasPrefix(head, "HTTP/1.1 200 "), "the request is served: %q", head)
			require.Contains(t, strings.ToLower(head), "connection: close", "and the drain closes the connection after it")
			_, err = r.ReadByte()
			require.ErrorIs(t, err, io.EOF)
		})
	}
}
