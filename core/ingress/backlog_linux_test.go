package ingress_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// Connections the kernel completed into the listen backlog just before a drain, which no
// event loop accepted any more, are served when the entrypoint drains (with Connection:
// close), not reset by the listener's close. The clients connect and send their requests in
// the window between the loops letting go of the listener and its close.
func TestDrainServesTheListenBacklog(t *testing.T) {
	up := newUpstream(t, answerNow)
	tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1}, newResolver(t, up.addr()), nil)
	require.NoError(t, tr.Start())
	const waiting = 3
	var clients []net.Conn
	restore := ingress.SetBacklogHook(func() {
		for range waiting {
			c := dialClient(t, tr.Addr())
			writeRequest(t, c, "/x")
			clients = append(clients, c)
		}
	})
	t.Cleanup(restore)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, drainWithin(t, tr, ctx, 5*time.Second+cutSlack))
	require.Len(t, clients, waiting, "the hook ran")
	for i, c := range clients {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "client %d", i)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "client %d", i)
		require.Equal(t, 200, resp.StatusCode, "client %d", i)
		require.Equal(t, "hello", string(body), "client %d", i)
		require.True(t, resp.Close, "client %d: the draining entrypoint closes the connection", i)
	}
	require.True(t, refused(tr.Addr()), "new connections are refused once drained")
}
