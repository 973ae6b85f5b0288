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

// Connections the kernel completed into the listen backlog just before a drain, which the
// engine had not accepted, are served when the entrypoint drains (with Connection: close), not
// reset by the listener's close. On gnet the clients connect and send their requests in the
// window between the loops letting go of the listener and its close; on fasthttp while its
// accept is held.
func TestDrainServesTheListenBacklog(t *testing.T) {
	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) { testDrainServesTheListenBacklog(t, engine) })
	}
}

func testDrainServesTheListenBacklog(t *testing.T, engine string) {
	up := newUpstream(t, answerNow)
	set := ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1}
	const waiting = 3
	var clients []net.Conn
	// connect dials the waiting clients and sends their requests; on gnet it runs in the
	// backlog hook, on the draining goroutine, so it returns its failure for the test's
	// goroutine to report.
	connect := func(addr string) error {
		for range waiting {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			t.Cleanup(func() { _ = c.Close() })
			clients = append(clients, c)
			if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
				return err
			}
			if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
				return err
			}
		}
		return nil
	}
	var tr ingress.Transport
	var hookErr error // connect's, from the backlog hook; read once Refusing is closed
	if engine == "gnet" {
		tr = ingress.NewGnet(set, newResolver(t, up.addr()), nil)
		require.NoError(t, tr.Start())
		t.Cleanup(ingress.SetBacklogHook(func() { hookErr = connect(tr.Addr()) }))
	} else {
		release := make(chan struct{})
		t.Cleanup(ingress.SetAcceptGate(func() { <-release }))
		tr = ingress.NewFast(set, newResolver(t, up.addr()), nil)
		require.NoError(t, tr.Start())
		go func() {
			<-tr.Refusing() // the backlog was taken and the socket closed
			close(release)
		}()
		require.NoError(t, connect(tr.Addr()))
	}

	// The clients read while the drain runs: the fasthttp engine lingers on a closing
	// connection until its client has read the response.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- tr.Drain(ctx) }()
	if engine == "gnet" {
		<-tr.Refusing() // the hook, which dials the clients, ran before
		require.NoError(t, hookErr, "the clients connected")
	}
	require.Len(t, clients, waiting, "the clients connected")
	for i, c := range clients {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "client %d", i)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "client %d", i)
		require.Equal(t, 200, resp.StatusCode, "client %d", i)
		require.Equal(t, "hello", string(body), "client %d", i)
		require.True(t, resp.Close, "client %d: the draining entrypoint closes the connection", i)
		_ = c.Close()
	}
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(5*time.Second + cutSlack):
		t.Fatal("Drain did not return")
	}
	require.True(t, refused(tr.Addr()), "new connections are refused once drained")
}
