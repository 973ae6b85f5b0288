package gateway_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shedLine is the start of the warning for a shed client connection.
const shedLine = `level=WARN msg="client connection shed" entrypoint=web `

// Every client connection the gateway sheds is logged once, on every engine, naming the
// entrypoint, the reason (the metric's label), the client's address and what it failed to
// do: a connection that sends nothing and one whose request body stops, each answered 408 at
// read_header_timeout, and a client that reads nothing of its stream for
// client_stall_timeout. The lines are rate limited to one a second per entrypoint, so each
// shed here comes more than a second after the line before it: the next line's
// suppressed_since_last=0 then shows that the shed before it wrote no second line that the
// limit held back.
func TestShedConnectionIsLoggedOnce(t *testing.T) {
	const extra = "read_header_timeout = \"1200ms\"\nclient_stall_timeout = \"1s\"\nsend_buffer_bytes = 16384"
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := pacedUpstream(t, new(atomic.Int64))
			addr, logs := startGatewayLogged(t, engine, up.addr(), extra)
			requireShedsLogged(t, logs, func() net.Conn { return dial(t, addr) }, func() net.Conn { return dialSmallWindow(t, addr) })
		})
	}
	t.Run("fasthttp over TLS", func(t *testing.T) {
		up := pacedUpstream(t, new(atomic.Int64))
		cert, key, roots := selfSigned(t, t.TempDir())
		addr, logs := startGatewayLogged(t, "fasthttp", up.addr(), extra+fmt.Sprintf("\ntls = { cert_file = %q, key_file = %q }", cert, key))
		requireShedsLogged(t, logs, func() net.Conn { return dialTLS(t, addr, roots) }, func() net.Conn {
			c := tls.Client(dialSmallWindow(t, addr), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
			require.NoError(t, c.Handshake())
			return c
		})
	})
}

// requireShedsLogged sheds three connections one after the other on a gateway in front of
// pacedUpstream, each once the line of the one before is in logs: one from dial that sends
// nothing, one from dialSmall that asks for the stream and reads none of it, and one from dial
// whose request body stops.
func requireShedsLogged(t *testing.T, logs *syncBuffer, dial, dialSmall func() net.Conn) {
	t.Helper()
	silent := dial()
	requireShedLine(t, logs, 1, "reason=header_timeout client_addr="+silent.LocalAddr().String()+
		` error="request head not complete within read_header_timeout" suppressed_since_last=0`)

	stalled := dialSmall()
	send(t, stalled, "GET /v1/stream HTTP/1.1\r\nHost: gw\r\n\r\n")
	line := requireShedLine(t, logs, 2, "reason=client_stall client_addr="+stalled.LocalAddr().String()+
		` error="the client read nothing of the response within client_stall_timeout" pending_bytes=`)
	require.True(t, strings.HasSuffix(line, " suppressed_since_last=0"), line)
	var pending, stalledMs int64
	_, err := fmt.Sscanf(line[strings.Index(line, "pending_bytes="):], "pending_bytes=%d stalled_ms=%d", &pending, &stalledMs)
	require.NoError(t, err, line)
	require.Positive(t, pending, "the response bytes the client's socket would not take")
	require.GreaterOrEqual(t, stalledMs, int64(1000), "at least client_stall_timeout")

	trickled := dial()
	send(t, trickled, "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\nab")
	requireShedLine(t, logs, 3, "reason=header_timeout client_addr="+trickled.LocalAddr().String()+
		` error="request body not complete within read_header_timeout" suppressed_since_last=0`)
}

// requireShedLine waits for the shed line holding want and returns it; it requires n shed
// lines in logs by then.
func requireShedLine(t *testing.T, logs *syncBuffer, n int, want string) string {
	t.Helper()
	want = shedLine + want
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no line with\n%s\nin\n%s", want, logs)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not an assertion
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="client connection shed"`) {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, n, "shed lines:\n%s", strings.Join(lines, "\n"))
	return lines[n-1]
}
