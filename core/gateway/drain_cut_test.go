package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// streamErrors sums sluice_upstream_errors_total{reason="stream"} over every route (metrics
// are process-wide; the admin API is gone once the gateway drained).
func streamErrors(t *testing.T) float64 {
	t.Helper()
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	sum := 0.0
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "sluice_upstream_errors_total{") || !strings.Contains(line, `reason="stream"`) {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += f
	}
	return sum
}

// A drain that runs out of time cuts the streams still running as the gateway's own decision,
// on every engine and wherever the upstream I/O runs, whether the gateway stops (SIGTERM:
// Drain) or a reload replaces the entrypoint: the client's connection closes mid-transfer (no
// SSE error event, no chunked terminator: nothing that reads as the end of a response), the
// access log says canceled with no upstream error, and no upstream failure is counted. The
// upstreams did nothing wrong: the gateway closed their connections as it let go of them.
func TestDrainTimeoutCutsStreamsAsCanceled(t *testing.T) {
	const streams = 8
	for _, engine := range engines {
		for _, how := range []string{"drain", "reload"} {
			t.Run(engine+"-"+how, func(t *testing.T) {
				up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
					ev := "data: {\"i\":0}\n\n"
					_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
					if err != nil {
						return false
					}
					// The stream goes on for longer than the drain waits: it ends only when the
					// gateway closes the connection (or the test ends).
					u.watchClose(r)
					<-u.stop
					return false
				})
				logPath := filepath.Join(t.TempDir(), "access.log")
				doc := func(idle string) string {
					return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
drain_timeout = "200ms"
idle_timeout = %q

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[log]
access_log = %q

[admin]
address = ""
`, engineTOML(engine), idle, up.addr(), logPath)
				}
				g, path := startFromFile(t, doc("60s"))
				addr := g.Addr("web")

				readers := make([]*bufio.Reader, streams)
				for i := range streams {
					c := dial(t, addr)
					send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
					readers[i] = bufio.NewReader(c)
				}
				// Every stream is relaying its body: the head and the first event reached the
				// client.
				for i, r := range readers {
					for {
						line, err := r.ReadString('\n')
						require.NoError(t, err, "stream %d", i)
						if strings.HasPrefix(line, "data: ") {
							break
						}
					}
				}
				before := streamErrors(t)

				if how == "drain" {
					ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
					defer cancel()
					require.ErrorIs(t, g.Drain(ctx), context.DeadlineExceeded)
				} else {
					// Another idle_timeout replaces the entrypoint's transport; the old one drains
					// for its drain_timeout, then cuts its streams.
					require.NoError(t, reloadWith(t, g, path, doc("61s")))
				}

				for i, r := range readers {
					rest, err := io.ReadAll(r) // until the gateway closed the connection
					require.NoError(t, err, "stream %d", i)
					require.NotContains(t, string(rest), "upstream_stream_error", "stream %d: the upstream is not to blame", i)
					require.NotContains(t, string(rest), "0\r\n\r\n", "stream %d: a cut stream does not end like a complete one", i)
				}
				lines := accessLines(t, logPath, streams)
				require.Len(t, lines, streams)
				for _, l := range lines {
					require.Equal(t, true, l["canceled"], "the drain cut the request: %v", l)
					require.Empty(t, l["upstream_error"], "the upstream did not fail: %v", l)
				}
				require.Equal(t, before, streamErrors(t), "no upstream stream error is counted")
			})
		}
	}
}
