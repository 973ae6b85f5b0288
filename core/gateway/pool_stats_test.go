package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// startPoolGateway runs a gateway whose entrypoint "web" (engine; two event loops on gnet)
// proxies every path to upstream, with lb appended to the service's load_balancer table, and
// the admin API on loopback. It returns the entrypoint and admin addresses.
func startPoolGateway(t *testing.T, engine, upstream, lb string) (addr, admin string) {
	t.Helper()
	loops := ""
	if engine != "fasthttp" {
		loops = "event_loops = 2"
	}
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
%s

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]
%s

[admin]
address = "127.0.0.1:0"
`, engineTOML(engine), loops, upstream, lb)
	cfg, err := config.LoadBytes("test.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })
	return g.Addr("web"), "http://" + g.AdminAddr()
}

// backendStats is the one backend's entry of /api/gateway/backends.
type backendStats struct {
	IdleConns int `json:"idle_conns"`
	Dials     int `json:"dials"`
	Reuses    int `json:"reuses"`
}

func getBackendStats(t *testing.T, admin string) backendStats {
	t.Helper()
	st, body := adminGet(t, admin+"/api/gateway/backends")
	require.Equal(t, 200, st, body)
	var out []backendStats
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	require.Len(t, out, 1, body)
	return out[0]
}

// waitBackendStats polls /api/gateway/backends until ok holds, or fails after 5 s with the
// last figures (an upstream connection goes idle just after its response went out).
func waitBackendStats(t *testing.T, admin string, what string, ok func(backendStats) bool) backendStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := getBackendStats(t, admin)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: backend stats %+v", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The admin API's dials, reuses and idle connections count every upstream connection of a
// backend, wherever its I/O runs: requests one after the other on fresh client connections
// (spread over the event loops) dial once per event loop at most and reuse for the rest, and
// once a response is out its upstream connection is idle. The client connections stay open to
// the end: one that closes as its response arrives may cancel an exchange not yet released.
func TestBackendStatsCountEveryPath(t *testing.T) {
	const requests = 20
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			addr, admin := startPoolGateway(t, engine, up.addr(), "")
			before := getBackendStats(t, admin)
			for i := range requests {
				c := dial(t, addr)
				send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
				require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status, "request %d", i)
				waitBackendStats(t, admin, fmt.Sprintf("request %d dialled or reused, its connection idle", i), func(s backendStats) bool {
					dials := s.Dials - before.Dials
					return dials+s.Reuses-before.Reuses == i+1 && s.IdleConns == dials
				})
			}
			s := getBackendStats(t, admin)
			dials := s.Dials - before.Dials
			require.LessOrEqual(t, dials, 2, "one dial per event loop at most: %+v", s)
			require.GreaterOrEqual(t, s.Reuses-before.Reuses, requests-2, "%+v", s)
		})
	}
}

// max_idle_conns caps the idle connections to a server, not to a server per event loop: 12
// requests held at the upstream at once (so 12 upstream connections, spread over the event
// loops) leave 4 connections idle once answered, and the upstream sees the other 8 closed.
func TestMaxIdleConnsIsPerServer(t *testing.T) {
	const inFlight, maxIdle = 12, 4
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			arrived, release := make(chan struct{}, inFlight), make(chan struct{})
			up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, head string, body []byte) bool {
				arrived <- struct{}{}
				select {
				case <-release:
				case <-u.stop:
					return false
				}
				return echo(c, r, head, body)
			})
			addr, admin := startPoolGateway(t, engine, up.addr(), fmt.Sprintf("max_idle_conns = %d", maxIdle))
			readers := make([]*bufio.Reader, inFlight)
			for i := range readers {
				c := dial(t, addr)
				send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
				readers[i] = bufio.NewReader(c)
			}
			for range inFlight {
				select {
				case <-arrived:
				case <-time.After(5 * time.Second):
					t.Fatal("the requests did not all reach the upstream")
				}
			}
			close(release)
			for i, r := range readers {
				require.Equal(t, 200, readResponse(t, r, false).status, "request %d", i)
			}
			for range inFlight - maxIdle {
				up.waitConnClosed(t, 5*time.Second)
			}
			waitBackendStats(t, admin, "max_idle_conns idle", func(s backendStats) bool {
				if engine == "gnet" {
					// The loops keep spare connections for concurrent requests: some requests
					// ran on spares dialled for them, more dials than requests in all.
					return s.IdleConns == maxIdle && s.Dials >= inFlight-s.Reuses
				}
				return s.IdleConns == maxIdle && s.Dials == inFlight
			})
		})
	}
}

// killableUpstream is an echo upstream that kill stops as a crashed server does: its listener
// and every connection it accepted are closed, so the gateway's idle connections to it get
// the upstream's FIN.
type killableUpstream struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func serveKillable(t *testing.T) *killableUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &killableUpstream{ln: ln}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				r := bufio.NewReader(c)
				for {
					head, body, err := readRequest(r)
					if err != nil || !echo(c, r, head, body) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(u.kill)
	return u
}

func (u *killableUpstream) addr() string { return u.ln.Addr().String() }

// kill closes the listener and every connection, and waits for the serving goroutines.
func (u *killableUpstream) kill() {
	_ = u.ln.Close()
	u.mu.Lock()
	for _, c := range u.conns {
		_ = c.Close()
	}
	u.conns = nil
	u.mu.Unlock()
	u.wg.Wait()
}

// The admin API's idle_conns and the sluice_upstream_idle_connections gauge count the idle
// connections that may carry a request: once a backend dies, the connections it closed are
// not counted. On the worker path (the pool's idle stack, gnet-worker and fasthttp) the pool
// checks its idle connections when asked, so the first look after the kill shows none; on
// the event loop path each loop's poller sees the close and drops the connection at once.
func TestBackendStatsDropIdleConnsOfADeadBackend(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveKillable(t)
			addr, admin := startPoolGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
			waitBackendStats(t, admin, "the request's upstream connection idle", func(s backendStats) bool { return s.IdleConns == 1 })

			up.kill()
			gauge := fmt.Sprintf(`sluice_upstream_idle_connections{service="up",backend="http://%s"}`, up.addr())
			if engine == "gnet" {
				waitBackendStats(t, admin, "the loop dropped the closed connection", func(s backendStats) bool { return s.IdleConns == 0 })
			} else {
				require.Zero(t, getBackendStats(t, admin).IdleConns, "the connection the dead backend closed is not idle")
			}
			_, page := adminGet(t, admin+"/metrics")
			require.Contains(t, page, gauge+" 0", "the gauge agrees")
		})
	}
}
