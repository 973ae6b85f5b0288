package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An upstream that closes before its body is complete (RFC 9112 §8: short of its
// Content-Length, or before the last chunk) is never completed for the client, and the
// client learns of it the same way on every engine. While the gateway has not written the
// response head, it answers 502 with its own JSON error, counted as an upstream failure; once
// the head is out, the connection closes mid-body, after the bytes that came, so the client
// sees an incomplete transfer.

// cutBody is the part of a 100-byte body an upstream sends before it closes.
const cutBody = "0123456789"

// A short Content-Length body whose first bytes came with the head is read whole before the
// head goes out: cut short, it is answered 502, and the client's connection carries on.
func TestBodyCutBeforeItsHeadWentOutIs502(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if strings.HasPrefix(head, "GET /v1/ok ") {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		}
		// One write: the head and a tenth of the body arrive together, then the close.
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"+cutBody)
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			router := "cut_early_" + engine
			m := startMetricsGateway(t, engine, router, router, up.addr(), "")
			closedErrs := fmt.Sprintf(`sluice_upstream_errors_total{router=%q,service="up",reason="closed"}`, router)
			gatewayErrs := fmt.Sprintf(`sluice_gateway_errors_total{entrypoint=%q,status="502"}`, router)
			closed0, errs0 := m.value(t, closedErrs), m.value(t, gatewayErrs)

			c := dial(t, m.addr)
			r := bufio.NewReader(c)
			send(t, c, "GET /v1/cut HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 502, resp.status)
			require.Equal(t, "application/json", resp.headers["content-type"])
			require.Contains(t, string(resp.body), `"type":"upstream_error"`)
			require.Contains(t, string(resp.body), `"code":"upstream_closed"`)
			require.Contains(t, string(resp.body), `"message":"the upstream closed the connection before the response was complete"`,
				"the words of the log line: the upstream did answer, and cut its body short")
			require.NotContains(t, string(resp.body), cutBody, "no byte of the cut body reaches the client")

			send(t, c, "GET /v1/ok HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status, "the 502 was a whole response: the connection goes on")
			require.Equal(t, "ok", string(resp.body))

			m.waitValue(t, closedErrs, closed0+1)
			m.waitValue(t, gatewayErrs, errs0+1)
		})
	}
}

// A short Content-Length body whose first bytes came with the head and whose rest follows
// later reaches the client whole, and the connections on both sides carry on.
func TestShortBodyInPiecesReachesTheClientWhole(t *testing.T) {
	rest := strings.Repeat("x", 90)
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"+cutBody)
		// Most likely read apart from the first piece; the answer is the same either way.
		time.Sleep(20 * time.Millisecond) // the upstream's pace: the body in two pieces, the behaviour under test
		_, err := io.WriteString(c, rest)
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for range 2 {
				send(t, c, "GET /v1/pieces HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.Equal(t, "100", resp.headers["content-length"])
				require.Equal(t, cutBody+rest, string(resp.body))
			}
		})
	}
}

// A short Content-Length body whose first bytes came with the head, and whose rest does not
// come within stream_idle_timeout, is answered 504 like a response head that does not come.
func TestBodyStalledBeforeItsHeadWentOutIs504(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"+cutBody)
		_, _ = io.Copy(io.Discard, c) // until the gateway gives up and closes
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayServers(t, engine, fmt.Sprintf(`servers = [{ url = "http://%s" }]
stream_idle_timeout = "200ms"`, up.addr()))
			c := dial(t, addr)
			send(t, c, "GET /v1/stall HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 504, resp.status)
			require.Contains(t, string(resp.body), `"code":"upstream_timeout"`)
		})
	}
}

// Once the head is out, a body cut short ends the transfer: the client gets the head, the
// bytes the upstream sent and the close, never the missing framing or a second response, so
// an HTTP client reports the response incomplete. A chunked body's head goes out at once
// (it may be a stream), also when the first chunk came with it.
func TestBodyCutAfterItsHeadWentOutEndsTheTransfer(t *testing.T) {
	const (
		lengthHead  = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
		chunkedHead = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
		chunk       = "a\r\n" + cutBody + "\r\n"
	)
	for _, tc := range []struct {
		name       string
		head, body string // what the upstream sends: its head, then the body bytes before it closes
		afterHead  bool   // the body bytes follow once the client has the head (else: one write)
		want       string // what the client gets after the head, until the close
	}{
		{"length/after the head", lengthHead, cutBody, true, cutBody},
		{"chunked/with the head", chunkedHead, chunk, false, chunk},
		{"chunked/after the head", chunkedHead, chunk, true, chunk},
	} {
		for _, engine := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				headIn := make(chan struct{})
				up := serveUpstreamU(t, func(u *upstream, c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
					if !tc.afterHead {
						_, _ = io.WriteString(c, tc.head+tc.body)
						return false
					}
					_, _ = io.WriteString(c, tc.head)
					select {
					case <-headIn:
					case <-u.stop:
						return false
					}
					_, _ = io.WriteString(c, tc.body)
					return false
				})
				router := "cut_late_" + engine
				m := startMetricsGateway(t, engine, router, router, up.addr(), "")
				streamErrs := fmt.Sprintf(`sluice_upstream_errors_total{router=%q,service="up",reason="stream"}`, router)
				errs0 := m.value(t, streamErrs)

				c := dial(t, m.addr)
				var got bytes.Buffer
				r := bufio.NewReader(io.TeeReader(c, &got))
				send(t, c, "GET /v1/cut HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, r, true)
				require.Equal(t, 200, resp.status)
				close(headIn)
				rest, err := io.ReadAll(r)
				require.NoError(t, err, "the connection closes, it is not reset")
				require.Equal(t, tc.want, string(rest), "the bytes that came, then the close")

				hr, err := http.ReadResponse(bufio.NewReader(&got), nil)
				require.NoError(t, err)
				body, err := io.ReadAll(hr.Body)
				require.ErrorIs(t, err, io.ErrUnexpectedEOF, "an HTTP client reports the transfer incomplete")
				require.Equal(t, cutBody, string(body))

				m.waitValue(t, streamErrs, errs0+1)
			})
		}
	}
}
