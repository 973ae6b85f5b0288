package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// originDate is a Date an upstream sends.
const originDate = "Tue, 15 Nov 1994 08:12:31 GMT"

// Every response the client gets carries one valid Date (RFC 9110 §6.6.1): the gateway's own
// answers (it is their origin server), upstream answers that came without one (a recipient
// that forwards them adds it), and the framing errors the engines answer themselves.
func TestResponsesWithoutDateGetOne(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		date := ""
		if strings.HasPrefix(head, "GET /dated") {
			date = "Date: " + originDate + "\r\n"
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"+date+"Content-Length: 2\r\n\r\nok")
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayRule(t, engine, up.addr(), "PathPrefix(`/v1`) || PathPrefix(`/dated`)", "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			from := time.Now().Add(-2 * time.Second)
			oneDate := func(resp *response, what string) string {
				dates := resp.all("Date")
				require.Len(t, dates, 1, "%s: Date fields %q", what, dates)
				_, err := http.ParseTime(dates[0])
				require.NoError(t, err, "%s: Date %q", what, dates[0])
				return dates[0]
			}
			recent := func(date, what string) {
				d, _ := http.ParseTime(date)
				require.True(t, d.After(from) && d.Before(time.Now().Add(2*time.Second)), "%s: Date %s is not now", what, date)
			}

			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			recent(oneDate(resp, "upstream answer without Date"), "upstream answer without Date")

			send(t, c, "GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 404, resp.status)
			recent(oneDate(resp, "gateway error"), "gateway error")

			send(t, c, "GET /dated HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			date := oneDate(resp, "upstream answer with Date")
			if engine != "fasthttp" {
				require.Equal(t, originDate, date, "the origin's Date is kept")
			} else {
				// fasthttp manages Date itself and offers no way to pass one through: it sends
				// the time the response left.
				recent(date, "upstream answer with Date")
			}

			bad := dial(t, addr)
			send(t, bad, "GET / HTTP/1.1\r\nHost: gw\r\nContent-Length: x\r\n\r\n")
			resp = readResponse(t, bufio.NewReader(bad), false)
			require.Equal(t, 400, resp.status)
			recent(oneDate(resp, "framing error"), "framing error")
		})
	}
}
