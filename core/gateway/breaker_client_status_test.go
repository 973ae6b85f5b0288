package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// strictUpstream answers 501 Not Implemented to a method it does not know, as origin servers
// do (RFC 9110 §9.1), and any other request with 200, or with the status in fail while it is
// not 0. hits counts the requests it answered 200 or fail.
type strictUpstream struct {
	*upstream
	hits atomic.Int32
	fail atomic.Int32
}

func serveStrict(t *testing.T) *strictUpstream {
	su := &strictUpstream{}
	su.upstream = serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		method, _, _ := strings.Cut(head, " ")
		switch method {
		case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH":
		default:
			_, err := fmt.Fprintf(c, "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n\r\n")
			return err == nil
		}
		su.hits.Add(1)
		st := int(su.fail.Load())
		if st == 0 {
			st = 200
		}
		_, err := fmt.Fprintf(c, "HTTP/1.1 %d Answer\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", st)
		return err == nil
	})
	return su
}

// rawStatus sends request (a whole request head) on a new connection to addr and returns the
// answer's status.
func rawStatus(t *testing.T, addr, request string) int {
	t.Helper()
	c := dial(t, addr)
	defer c.Close()
	send(t, c, request)
	return readResponse(t, bufio.NewReader(c), false).status
}

// passiveEjections reads sluice_backend_ejections_total{reason="passive"} of a backend (0 when
// the series is not there).
func passiveEjections(t *testing.T, service, backend string) int {
	t.Helper()
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	re := regexp.MustCompile(`(?m)^sluice_backend_ejections_total\{service="` + regexp.QuoteMeta(service) + `",backend="` + regexp.QuoteMeta(backend) + `",reason="passive"\} (\d+)$`)
	if m := re.FindStringSubmatch(b.String()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// Any client can make a working server answer 501 (a method it does not implement) or make
// the gateway answer 505 or 501 (an HTTP/2.0 request line, CONNECT): none of that judges the
// backend. A flood of such requests opens no breaker and ejects no server, so that
// well-formed requests go on being served; a run of the server's own 502s still opens them.
func TestClientProvokedAnswersDoNotJudgeTheBackend(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			a, b := serveStrict(t), serveStrict(t)
			addr := runGateway(t, "cb.toml", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "pair"
middlewares = ["cb"]
[services.pair.load_balancer]
servers = [{ url = "http://%s" }, { url = "http://%s" }]
passive_health = { consecutive_failures = 3 }
[middlewares.cb]
type = "circuit-breaker"
failure_threshold = 3
cooldown_secs = 30
[admin]
address = ""
`, engineTOML(engine), a.addr(), b.addr())).Addr("web")
			aURL, bURL := "http://"+a.addr(), "http://"+b.addr()

			for range 10 {
				require.Equal(t, 501, rawStatus(t, addr, "BREW /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"), "the upstream's 501")
				require.Equal(t, 505, rawStatus(t, addr, "GET /v1/models HTTP/2.0\r\nHost: gw\r\n\r\n"), "the gateway's 505")
				require.Equal(t, 501, rawStatus(t, addr, "CONNECT gw:443 HTTP/1.1\r\nHost: gw:443\r\n\r\n"), "the gateway's 501")
			}
			require.Equal(t, 0, breakerState(t, "cb", aURL), "the breaker stays closed")
			require.Equal(t, 0, breakerState(t, "cb", bURL))
			require.Zero(t, passiveEjections(t, "pair", aURL), "no server was ejected")
			require.Zero(t, passiveEjections(t, "pair", bURL))
			for range 4 {
				require.Equal(t, 200, rawStatus(t, addr, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"))
			}
			require.Positive(t, a.hits.Load(), "both servers serve well-formed requests")
			require.Positive(t, b.hits.Load())

			// The servers fail: their 502s open both breakers, and the gateway answers for them.
			a.fail.Store(502)
			b.fail.Store(502)
			for i := 0; breakerState(t, "cb", aURL) != 1 || breakerState(t, "cb", bURL) != 1; i++ {
				require.Less(t, i, 20, "the breakers did not open")
				// The upstream's 502; or circuit_open, when the last breaker opened between
				// the answer and the look at the gauge.
				require.Contains(t, []int{502, 503}, rawStatus(t, addr, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"))
			}
			hits := a.hits.Load() + b.hits.Load()
			require.Equal(t, 503, rawStatus(t, addr, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"), "circuit_open")
			require.Equal(t, hits, a.hits.Load()+b.hits.Load(), "the gateway answered for the open backends")
		})
	}
}

// Without a circuit breaker, passive health judges the same way: a client's flood of 501s
// ejects no server.
func TestClientProvoked501EjectsNoServer(t *testing.T) {
	a, b := serveStrict(t), serveStrict(t)
	addr := runGateway(t, "ph.toml", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "pair"
[services.pair.load_balancer]
servers = [{ url = "http://%s" }, { url = "http://%s" }]
passive_health = { consecutive_failures = 3 }
[admin]
address = ""
`, a.addr(), b.addr())).Addr("web")
	for range 10 {
		require.Equal(t, 501, rawStatus(t, addr, "BREW /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"))
	}
	require.Zero(t, passiveEjections(t, "pair", "http://"+a.addr()), "no server was ejected")
	require.Zero(t, passiveEjections(t, "pair", "http://"+b.addr()))
	for range 4 {
		require.Equal(t, 200, rawStatus(t, addr, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"))
	}
	require.Positive(t, a.hits.Load(), "both servers serve well-formed requests")
	require.Positive(t, b.hits.Load())
}
