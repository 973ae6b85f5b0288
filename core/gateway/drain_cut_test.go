package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
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

// On SIGTERM each entrypoint's streams get its own drain_timeout, not the longest of them:
// a stream on an entrypoint of 200 ms is cut while one on an entrypoint of 30 s still runs.
func TestDrainGivesEachEntrypointItsOwnTimeout(t *testing.T) {
	up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		ev := "data: {\"i\":0}\n\n"
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev); err != nil {
			return false
		}
		u.watchClose(r) // the stream ends only when the gateway closes the connection
		<-u.stop
		return false
	})
	g, _ := startFromFile(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
drain_timeout = "200ms"
[entrypoints.slow]
address = "127.0.0.1:0"
drain_timeout = "30s"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = ""
`, up.addr()))
	open := func(ep string) (net.Conn, *bufio.Reader) {
		c := dial(t, g.Addr(ep))
		send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			require.NoError(t, err, ep)
			if strings.HasPrefix(line, "data: ") {
				return c, r
			}
		}
	}
	short, shortR := open("web")
	long, longR := open("slow")

	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		drained <- g.Drain(ctx)
	}()
	require.NoError(t, short.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := io.ReadAll(shortR)
	require.NoError(t, err, "the 200 ms entrypoint's stream was cut at its drain_timeout, well within 10 s")
	select {
	case err := <-drained:
		t.Fatalf("the drain ended (%v) while the 30 s entrypoint's stream was still running", err)
	default:
	}
	require.NoError(t, long.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = io.ReadAll(longR) // what is left of the first event, then nothing: no close
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the 30 s entrypoint's stream still runs")

	require.NoError(t, long.Close()) // its client leaves: nothing is left to drain
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not end once the last stream's client left")
	}
}
