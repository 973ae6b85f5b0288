package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/metrics"
)

// A request the upstream received whole is not sent again when the reused connection closes
// unanswered, unless it is idempotent (method, or Idempotency-Key): RFC 9112 §9.3.1.
func TestRequestReceivedWholeIsNotResent(t *testing.T) {
	cases := []struct {
		name, req string
		want      int
		arrivals  int32
	}{
		{"POST", "POST /boom HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 502, 1},
		{"GET", "GET /boom HTTP/1.1\r\nHost: gw\r\n\r\n", 200, 2},
		{"POST with Idempotency-Key", "POST /boom HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: k1\r\nContent-Length: 2\r\n\r\n{}", 200, 2},
	}
	for _, engine := range engines {
		for _, tc := range cases {
			t.Run(engine+"/"+tc.name, func(t *testing.T) {
				var conns, arrivals atomic.Int32
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				t.Cleanup(func() { ln.Close() })
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						n := conns.Add(1)
						go func() {
							defer c.Close()
							r := bufio.NewReader(c)
							for {
								head, _, err := readRequest(r)
								if err != nil {
									return
								}
								if strings.Contains(head, "/boom") {
									arrivals.Add(1)
									if n == 1 {
										return // read whole, closed without an answer
									}
								}
								if _, err := fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
									return
								}
							}
						}()
					}
				}()
				_, addr := startGateway(t, engine, ln.Addr().String(), "")
				c := dial(t, addr)
				r := bufio.NewReader(c)
				send(t, c, "GET /warm HTTP/1.1\r\nHost: gw\r\n\r\n")
				require.Equal(t, 200, readResponse(t, r, false).status)
				send(t, c, tc.req)
				require.Equal(t, tc.want, readResponse(t, r, false).status)
				require.Equal(t, tc.arrivals, arrivals.Load(), "upstream arrivals of the request")
			})
		}
	}
}

// A refused connection sent nothing: the request goes to the next server, and passive health
// takes the dead one out of rotation until it listens again.
func TestRefusedConnectionTriesNextServer(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var aliveHits atomic.Int32
			alive := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
				aliveHits.Add(1)
				return echo(c, r, head, body)
			})
			dead, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			deadAddr := dead.Addr().String()
			require.NoError(t, dead.Close())
			toml := fmt.Sprintf(`servers = [{ url = "http://%s" }, { url = "http://%s" }]`, deadAddr, alive.addr())
			// A router of its own, whose dial failures (a process-wide counter) are the dead
			// server's.
			router := "refused_" + strings.ReplaceAll(engine, "-", "_")
			g := runGateway(t, "test.toml", strings.Replace(gatewayTOML(engine, "PathPrefix(`/`)", "", toml), "[routers.api]", "[routers."+router+"]", 1))
			dialErrors := fmt.Sprintf(`sluice_upstream_errors_total{router=%q,service="up",reason="dial"}`, router)
			c := dial(t, g.Addr("web"))
			r := bufio.NewReader(c)
			// get sends one request on c, given 10 s however long the test has run.
			get := func(what string) {
				t.Helper()
				require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
				send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
				require.Equal(t, 200, readResponse(t, r, false).status, what)
			}
			for i := 0; i < 10; i++ {
				get(fmt.Sprintf("request %d", i))
			}
			require.EqualValues(t, 10, aliveHits.Load())
			require.Positive(t, processSeries(t, dialErrors), "the dead server was tried")

			// A refused connect ejects the server for balancer.MinEjection (more when it
			// fails again in a row): it is out of rotation, and its gauge says so, while that
			// lasts. Both are read so that the ejection cannot have ended first, however
			// loaded the machine: out of rotation, after a request that tried the dead server
			// and took less than MinEjection to be answered; the gauge, while the server is
			// out of rotation both before and after the metrics are written. A reading that
			// cannot tell is made again, on a later ejection.
			svc := g.Snapshot().Services["up"]
			series := fmt.Sprintf(`sluice_backend_up{service="up",backend="http://%s"} 0`, deadAddr)
			var sawOut, sawGauge bool
			judged := time.Now().Add(time.Minute)
			for !sawOut || !sawGauge {
				require.True(t, time.Now().Before(judged), "no reading within an ejection (out of rotation %v, gauge %v)", sawOut, sawGauge)
				tried := processSeries(t, dialErrors)
				start := time.Now()
				get("a request while the dead server is out")
				down := svc.Backends[0].LB.Down()
				within := time.Since(start) < balancer.MinEjection
				if down {
					var buf bytes.Buffer
					metrics.WritePrometheus(&buf)
					if svc.Backends[0].LB.Down() {
						require.Contains(t, buf.String(), series)
						sawGauge = true
					}
				}
				// Read after the fact: only this connection's requests dial for the router.
				if within && processSeries(t, dialErrors) > tried {
					require.True(t, down, "the dead server is out of rotation")
					sawOut = true
				}
			}

			// It listens again: within its backoff it is back in rotation.
			revived, err := net.Listen("tcp", deadAddr)
			require.NoError(t, err)
			var revivedHits atomic.Int32
			go func() {
				for {
					rc, err := revived.Accept()
					if err != nil {
						return
					}
					go func() {
						defer rc.Close()
						br := bufio.NewReader(rc)
						for {
							head, body, err := readRequest(br)
							if err != nil {
								return
							}
							revivedHits.Add(1)
							if !echo(rc, br, head, body) {
								return
							}
						}
					}()
				}
			}()
			t.Cleanup(func() { revived.Close() })
			// Its backoff doubled for each try that failed in a row, up to balancer.MaxEjection.
			deadline := time.Now().Add(balancer.MaxEjection + 10*time.Second)
			for revivedHits.Load() == 0 {
				require.True(t, time.Now().Before(deadline), "the revived server got no request within its backoff")
				get("a probe for the revived server")
				time.Sleep(20 * time.Millisecond) // pacing the probe requests, not a wait for a result
			}
			require.False(t, svc.Backends[0].LB.Down(), "back in rotation")
		})
	}
}

// An upstream that takes a request and drops the connection without a response byte (a
// crash) loses it for the client only when it may not go elsewhere: an idempotent request, or
// any request on a service with retry_non_idempotent, is answered by another backend.
func TestRequestLostByUpstreamGoesElsewhereWhenAllowed(t *testing.T) {
	post := "POST /gen HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	get := "GET /gen HTTP/1.1\r\nHost: gw\r\n\r\n"
	cases := []struct {
		name, req, lb string
		ok            int   // of four requests
		lost          int32 // arrivals at the crashing server
	}{
		// Round-robin alternates the first tries; a resent request's second pick is the
		// other server, so the next first try is the crashing one again.
		{"POST", post, "", 2, 2},
		{"GET", get, "", 4, 4},
		{"POST with retry_non_idempotent", post, "retry_non_idempotent = true", 4, 4},
	}
	for _, engine := range engines {
		for _, tc := range cases {
			t.Run(engine+"/"+tc.name, func(t *testing.T) {
				var lost, served atomic.Int32
				crasher := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
					lost.Add(1)
					return false // read whole, dropped without an answer
				})
				alive := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
					served.Add(1)
					return echo(c, r, head, body)
				})
				lb := fmt.Sprintf("servers = [{ url = \"http://%s\" }, { url = \"http://%s\" }]\n%s",
					crasher.addr(), alive.addr(), tc.lb)
				_, addr := startGatewayServers(t, engine, lb)
				ok := 0
				for i := 0; i < 4; i++ {
					c := dial(t, addr)
					send(t, c, tc.req)
					switch st := readResponse(t, bufio.NewReader(c), false).status; st {
					case 200:
						ok++
					case 502:
					default:
						t.Fatalf("request %d: status %d, want 200 or 502", i, st)
					}
					c.Close()
				}
				require.Equal(t, tc.ok, ok, "requests answered 200")
				require.EqualValues(t, tc.ok, served.Load(), "arrivals at the live server")
				require.Equal(t, tc.lost, lost.Load(), "arrivals at the crashing server")
			})
		}
	}
}
