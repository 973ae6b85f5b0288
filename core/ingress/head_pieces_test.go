package ingress_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
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

// TestEmptyLinesBeforeARequest: empty lines before a request line are ignored (RFC 9112
// §2.2), as many as the header limit allows however they arrive; a client that sends nothing
// else gets 431 once they pass it, rather than a buffer that grows for as long as it writes.
func TestEmptyLinesBeforeARequest(t *testing.T) {
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			up := newUpstream(t, answerInPieces)
			tr := startTransport(t, ce, up.addr())

			c := dialClient(t, tr.Addr())
			for range 200 {
				_, err := c.Write([]byte("\r\n"))
				require.NoError(t, err)
			}
			_, err := c.Write([]byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"))
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			resp.Body.Close()

			flood := dialClient(t, tr.Addr())
			lines := []byte(strings.Repeat("\r\n", 2<<10))
			go func() {
				// Bounded: 8 MiB at most, far past any header limit; a write fails once the
				// gateway has answered and closed.
				for range 2 << 10 {
					if _, err := flood.Write(lines); err != nil {
						return
					}
				}
			}()
			expect431(t, bufio.NewReader(flood), "a flood of empty lines")

			// Past the limit in the same read as the request line, and after a response on a
			// keep-alive connection, alone or pipelined behind a request: the same answer.
			over := strings.Repeat("\r\n", 10<<10)
			get := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
			for _, tc := range []struct {
				name  string
				first string // a request answered before the empty lines, on its own
				then  string
				ok    int // requests of then answered 200 before the 431
			}{
				{"with the request line", "", over + get, 0},
				{"after a response", get, over, 0},
				{"after a response, with the request line", get, over + get, 0},
				{"pipelined behind a request", "", get + over + get, 1},
			} {
				c := dialClient(t, tr.Addr())
				br := bufio.NewReader(c)
				if tc.first != "" {
					_, err := io.WriteString(c, tc.first)
					require.NoError(t, err)
					expectOK(t, br, tc.name)
				}
				_, err := io.WriteString(c, tc.then)
				require.NoError(t, err)
				for range tc.ok {
					expectOK(t, br, tc.name)
				}
				expect431(t, br, tc.name)
			}
		})
	}
}

func expectOK(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, what)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err, what)
	require.Equal(t, 200, resp.StatusCode, what)
}

func expect431(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer: %s", what)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, what)
	require.Equal(t, 431, resp.StatusCode, what)
	require.Contains(t, string(body), "max_header_bytes", what)
}
