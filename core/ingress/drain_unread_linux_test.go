package ingress_test

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// A drain that begins after a response ended, while the client's next request on the
// connection kept alive waits unread in its socket (its event loop has not got to it), serves
// that request, with Connection: close, rather than closing the connection as idle: a client
// that sent a POST there would not send it again.
func TestDrainServesTheRequestItsLoopHasNotRead(t *testing.T) {
	res := statusResolver(t)
	for _, ce := range contractEngines[:2] { // the gnet engines
		t.Run(ce.name, func(t *testing.T) {
			tr := startStatusEngine(t, ce, res)
			c, r := dialEngine(t, tr)
			_, err := io.WriteString(c, "POST /200 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
			require.NoError(t, err)
			head := readResponseHead(t, r)
			require.NotContains(t, strings.ToLower(head), "connection: close", "the first response keeps the connection")

			release := ingress.HoldLoop(tr)
			defer release()
			_, err = io.WriteString(c, "POST /200 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
			require.NoError(t, err)
			require.True(t, ingress.AwaitUnreadInput(tr, eventWait), "the request never reached the gateway's socket")
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
