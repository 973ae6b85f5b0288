package gateway_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that leaves after waiting longer than read_header_timeout for its answer still
// cancels the upstream exchange at once: the header deadline bounds reading the request, not
// the watch for the client's departure while the upstream works.
func TestClientLeavingAfterHeaderTimeoutCancelsUpstream(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			arrived, released := make(chan struct{}, 1), make(chan struct{}, 1)
			up := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
				arrived <- struct{}{}
				_, _ = io.Copy(io.Discard, r) // never answers; returns when the gateway lets go
				released <- struct{}{}
				return false
			})
			_, addr := startGateway(t, engine, up.addr(), `read_header_timeout = "200ms"`)
			c := dial(t, addr)
			send(t, c, "GET /slow HTTP/1.1\r\nHost: gw\r\n\r\n")
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the request never reached the upstream")
			}
			// The behaviour under test: the client waits past the header deadline, then leaves.
			time.Sleep(500 * time.Millisecond)
			require.NoError(t, c.Close())
			select {
			case <-released:
			case <-time.After(3 * time.Second):
				t.Fatal("the upstream exchange went on after the client left")
			}
		})
	}
}
