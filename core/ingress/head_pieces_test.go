package ingress_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// answerInPieces writes the upstream's response one byte per write: the gateway reads its
// head in as many pieces as the network gives it.
func answerInPieces(_ *contractUpstream, c net.Conn) bool {
	for _, b := range []byte("HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: 2\r\nContent-Length: 5\r\n\r\nhello") {
		if _, err := c.Write([]byte{b}); err != nil {
			return false
		}
	}
	return true
}

// TestHeadsInPieces: request heads written a byte at a time (the second after empty lines,
// on the same keep-alive connection) and a response head read a byte at a time are served
// as when they come whole: the scan for the end of a head resumes where it stopped and starts
// over for the next request.
func TestHeadsInPieces(t *testing.T) {
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			up := newUpstream(t, answerInPieces)
			tr := startTransport(t, ce, up.addr())
			c := dialClient(t, tr.Addr())
			br := bufio.NewReader(c)
			for _, req := range []string{
				"GET /a HTTP/1.1\r\nHost: x\r\nX-1: 1\r\nX-2: 2\r\n\r\n",
				"\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: X-1, keep-alive\r\nX-1: 1\r\n\r\n",
			} {
				for i := range len(req) {
					_, err := c.Write([]byte{req[i]})
					require.NoError(t, err)
				}
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, 200, resp.StatusCode)
				require.Equal(t, "hello", string(body))
				require.Equal(t, "2", resp.Header.Get("X-B"))
			}
		})
	}
}
