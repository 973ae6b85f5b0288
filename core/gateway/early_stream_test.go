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

// A chunked stream that is not SSE (NDJSON, as Ollama streams) whose first chunk comes in the
// same write as its head: those bytes are the stream's first token, and count in
// sluice_ttft_seconds, on every engine.
func TestFirstChunkWithTheHeadCountsItsTTFT(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		l := `{"response":"t0","done":false}` + "\n"
		_, _ = io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(l), l))
		time.Sleep(50 * time.Millisecond) // the upstream's pace: the second chunk comes apart, the behaviour under test
		l = `{"response":"t1","done":true}` + "\n"
		_, err := io.WriteString(c, fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(l), l))
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			name := "early_" + strings.ReplaceAll(engine, "-", "_")
			m := startMetricsGateway(t, engine, name, name, up.addr(), "")
			c := dial(t, m.addr)
			send(t, c, "POST /v1/generate HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			l := fmt.Sprintf(`{router=%q,service="up"}`, name)
			m.waitValue(t, "sluice_request_duration_seconds_count"+l, 1)
			require.Equal(t, 1.0, m.value(t, "sluice_ttft_seconds_count"+l), "the first chunk is the first token")
		})
	}
}
