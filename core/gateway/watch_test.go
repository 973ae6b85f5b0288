package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

const watchEvents = 20

// watchUpstream serves /stream as an SSE stream of watchEvents events, a millisecond apart,
// and anything else as a short JSON body.
func watchUpstream(t *testing.T) *upstream {
	return serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if !strings.HasPrefix(head, "GET /stream ") {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
			return err == nil
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return false
		}
		for i := range watchEvents {
			ev := fmt.Sprintf("data: {\"i\":%d}\n\n", i)
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
				return false
			}
			time.Sleep(time.Millisecond) // pacing only: streams are in flight across reloads
		}
		_, err := io.WriteString(c, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
		return err == nil
	})
}
