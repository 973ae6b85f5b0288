package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The request's time stamps, on every engine (an event loop reads the clock once per event
// and every stamp of that event uses it): a response whose head the upstream holds back for
// a while lasts at least that long in sluice_request_duration_seconds, and a stream whose
// first event comes a while after its head, and its second as long after that, shows both
// waits in its TTFT and inter-token latency. The upstream's pauses set lower bounds (less a
// little for the gap between two stamps); the upper bound only catches a stamp from the wrong
// clock.
func TestDurationMetricsFollowTheUpstream(t *testing.T) {
	const pause = 150 * time.Millisecond
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if strings.HasPrefix(head, "POST /v1/stream ") {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			for _, ev := range []string{"data: a\n\n", "data: b\n\n"} {
				time.Sleep(pause)
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
			}
			_, err := io.WriteString(c, "0\r\n\r\n")
			return err == nil
		}
		time.Sleep(pause)
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			name := "stamps_" + strings.ReplaceAll(engine, "-", "_")
			m := startMetricsGateway(t, engine, name, name, up.addr(), "")
			c := dial(t, m.addr)
			r := bufio.NewReader(c)
			send(t, c, "POST /v1/plain HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			require.Equal(t, 200, readResponse(t, r, false).status)
			send(t, c, "POST /v1/stream HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Contains(t, string(resp.body), "data: b")

			l := fmt.Sprintf(`{router=%q,service="up"}`, name)
			m.waitValue(t, "sluice_request_duration_seconds_count"+l, 2)
			sum := m.value(t, "sluice_request_duration_seconds_sum"+l)
			require.GreaterOrEqual(t, sum, 3*pause.Seconds(), "the plain answer's pause and the stream's two")
			require.Less(t, sum, 30.0)
			require.Equal(t, 1.0, m.value(t, "sluice_ttft_seconds_count"+l))
			ttft := m.value(t, "sluice_ttft_seconds_sum"+l)
			require.GreaterOrEqual(t, ttft, pause.Seconds())
			require.Less(t, ttft, 15.0)
			// A gap is the difference of two stamps, each taken some time after its event
			// arrived: when the first waited longer for its loop or worker than the second,
			// the gap comes out a little short of the upstream's pause. A stamp from the wrong
			// clock would be off by far more than gapSlack.
			const gapSlack = 20 * time.Millisecond
			require.GreaterOrEqual(t, m.value(t, "sluice_inter_token_latency_seconds_sum"+l), (pause - gapSlack).Seconds(),
				"the gap between the two events")
		})
	}
}
