package ingress_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

const unreadPost = "POST /200 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n"

// A drain that begins after a response ended, while the client's next request on the
// connection kept alive waits unread in its socket (the engine has not got to it: the event
// loop is busy, or fasthttp's goroutine for it is runnable but not run), serves that request,
// with Connection: close, rather than closing the connection as idle: closing a socket with
// unread bytes resets it, and a client that sent a POST there would not send it again. So at
// the drain's first sweep, and at one after freshDrainGrace.
func TestDrainServesTheRequestItsLoopHasNotRead(t *testing.T) {
	res := statusResolver(t)
	for _, ce := range contractEngines {
		for _, sweep := range []struct {
			name  string
			later time.Duration
		}{{"AtDrain", 0}, {"AfterGrace", 2 * ingress.FreshDrainGrace}} {
			t.Run(ce.name+"/"+sweep.name, func(t *testing.T) {
				tr := startStatusEngine(t, ce, res)
				var waiting <-chan struct{}
				release := func() {}
				if isFast(tr) {
					waiting, release = ingress.HoldRead(false)
					defer release()
				}
				c, r := dialEngine(t, tr)
				_, err := io.WriteString(c, unreadPost)
				require.NoError(t, err)
				head := readResponseHead(t, r)
				require.NotContains(t, strings.ToLower(head), "connection: close", "the first response keeps the connection")

				if waiting != nil {
					waitHeld(t, waiting)
				} else {
					release = ingress.HoldLoop(tr)
					defer release()
				}
				_, err = io.WriteString(c, unreadPost)
				require.NoError(t, err)
				require.True(t, ingress.AwaitUnreadInput(tr, eventWait), "the request never reached the gateway's socket")
				ingress.SweepDrainingAt(tr, sweep.later)
				release()

				requireServedAndClosed(t, r)
			})
		}
	}
}

// A drain spares a connection accepted before its listener closed whose first request waits
// unread in its socket when the drain's grace for it ends: it serves that request, with
// Connection: close.
func TestDrainServesTheFirstRequestItsEngineHasNotRead(t *testing.T) {
	res := statusResolver(t)
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startStatusEngine(t, ce, res)
			var waiting <-chan struct{}
			release := func() {}
			later := 2 * ingress.FreshDrainGrace
			if isFast(tr) {
				waiting, release = ingress.HoldRead(true)
				defer release()
				later = 2 * ingress.NewConnDrainGrace
			}
			c, r := dialEngine(t, tr)
			if waiting != nil {
				waitHeld(t, waiting)
			} else {
				require.Eventually(t, func() bool { return tr.Stats().Connections == 1 }, eventWait, time.Millisecond, "the connection never opened")
				release = ingress.HoldLoop(tr)
				defer release()
			}
			_, err := io.WriteString(c, unreadPost)
			require.NoError(t, err)
			require.True(t, ingress.AwaitUnreadInput(tr, eventWait), "the request never reached the gateway's socket")
			ingress.SweepDrainingAt(tr, later)
			release()

			requireServedAndClosed(t, r)
		})
	}
}

// Over TLS the same: bytes unread in the socket are a record the client sent, its next
// request.
func TestDrainServesTheRequestTLSHasNotRead(t *testing.T) {
	up := newUpstream(t, answerNow)
	tr, roots := startTLSTransport(t, up.addr())
	waiting, release := ingress.HoldRead(false)
	defer release()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tr.Addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(c)
	post := "POST /hello HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n"
	_, err = io.WriteString(c, post)
	require.NoError(t, err)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.False(t, resp.Close, "the first response keeps the connection")

	waitHeld(t, waiting)
	_, err = io.WriteString(c, post)
	require.NoError(t, err)
	require.True(t, ingress.AwaitUnreadInput(tr, eventWait), "the request never reached the gateway's socket")
	ingress.SweepDraining(tr)
	release()

	resp, err = http.ReadResponse(r, nil)
	require.NoError(t, err, "the request is served")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "hello", string(body))
	require.True(t, resp.Close, "and the drain closes the connection after it")
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}

func isFast(tr ingress.Transport) bool {
	_, ok := tr.(*ingress.FastEngine)
	return ok
}

func waitHeld(t *testing.T, waiting <-chan struct{}) {
	t.Helper()
	select {
	case <-waiting:
	case <-time.After(eventWait):
		t.Fatal("the engine never began to wait for the request")
	}
}

// requireServedAndClosed reads a 200 response that says Connection: close, and then the end of
// the connection, an orderly one.
func requireServedAndClosed(t *testing.T, r *bufio.Reader) {
	t.Helper()
	head := readResponseHead(t, r)
	require.True(t, strings.HasPrefix(head, "HTTP/1.1 200 "), "the request is served: %q", head)
	require.Contains(t, strings.ToLower(head), "connection: close", "and the drain closes the connection after it")
	_, err := r.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}
