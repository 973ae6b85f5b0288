package gateway_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// shedCount reads sluice_connections_shed_total of entrypoint "web" for reason in this
// process's metrics (gateway tests run one at a time, so a difference is this test's).
func shedCount(t *testing.T, reason string) float64 {
	t.Helper()
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	series := `sluice_connections_shed_total{entrypoint="web",reason="` + reason + `"} `
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// waitShed waits until the shed count for reason reaches want.
func waitShed(t *testing.T, reason string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for shedCount(t, reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_connections_shed_total{reason=%q} is %v, want %v", reason, shedCount(t, reason), want)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not an assertion
	}
	require.Equal(t, want, shedCount(t, reason), "counted once")
}

// A connection over max_connections is closed at once without an answer on every engine, and
// counted as max_connections; the connection within the limit is served.
func TestConnectionOverMaxConnectionsIsShed(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "max_connections = 1")
			before := shedCount(t, "max_connections")
			first := dial(t, addr)
			send(t, first, "GET /a HTTP/1.1\r\nHost: gw\r\n\r\n")
			r := bufio.NewReader(first)
			require.Equal(t, 200, readResponse(t, r, false).status, "the first connection holds the one place")
			second := dial(t, addr)
			_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
			// Its request may be written before the close arrives or fail after it.
			_, _ = io.WriteString(second, "GET /b HTTP/1.1\r\nHost: gw\r\n\r\n")
			got, err := io.ReadAll(second)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection over the limit was not closed")
			}
			require.Empty(t, got, "no answer on a connection over the limit")
			waitShed(t, "max_connections", before+1)
			send(t, first, "GET /c HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status, "the connection within the limit goes on")
		})
	}
}

// A request head that does not complete within read_header_timeout gets 408 with a JSON error
// on every engine, and the connection counts as shed for header_timeout.
func TestSlowHeadGets408AndIsCountedAsShed(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), `read_header_timeout = "300ms"`)
			before := shedCount(t, "header_timeout")
			for i, partial := range []string{
				"GET / HTTP/1.1\r\nHost: gw\r\nX-Slow: ",
				"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
			} {
				c := dial(t, addr)
				send(t, c, partial)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp := readResponse(t, bufio.NewReader(c), false)
				require.Equal(t, 408, resp.status, partial)
				require.Equal(t, "application/json", resp.headers["content-type"])
				require.Contains(t, string(resp.body), `"code":"request_timeout"`)
				require.Equal(t, "close", strings.ToLower(resp.headers["connection"]), "the connection ends after a 408")
				waitEOF(t, c, 5*time.Second)
				waitShed(t, "header_timeout", before+float64(i+1))
			}
		})
	}
}
