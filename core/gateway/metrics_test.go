package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// metricsGateway is a running gateway with its admin API, for metrics tests.
type metricsGateway struct {
	g     *gateway.Gateway
	addr  string // the entrypoint
	admin string // admin base URL
	path  string // config file
	toml  func(rule string) string
}

// startMetricsGateway runs a gateway whose entrypoint ep (engine) has router (rule
// PathPrefix(`/v1`)) proxying to upstream, with extra appended to the entrypoint's table, and
// the admin API on loopback. Metrics are process-wide: tests give their entrypoints and
// routers names of their own so that no other test's requests count into them.
func startMetricsGateway(t *testing.T, engine, ep, router, upstream, extra string) *metricsGateway {
	t.Helper()
	m := &metricsGateway{path: filepath.Join(t.TempDir(), "sluice.toml")}
	m.toml = func(rule string) string {
		return fmt.Sprintf(`
[entrypoints.%s]
address = "127.0.0.1:0"
engine = %s
%s

[routers.%s]
rule = %q
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[admin]
address = "127.0.0.1:0"
`, ep, engineTOML(engine), extra, router, rule, upstream)
	}
	require.NoError(t, os.WriteFile(m.path, []byte(m.toml("PathPrefix(`/v1`)")), 0o644))
	cfg, err := config.Load(m.path)
	require.NoError(t, err)
	m.g, err = gateway.New(cfg, m.path, nil)
	require.NoError(t, err)
	require.NoError(t, m.g.Start())
	t.Cleanup(func() { _ = m.g.Drain(t.Context()) })
	m.addr, m.admin = m.g.Addr(ep), "http://"+m.g.AdminAddr()
	return m
}

// scrape returns the metrics page.
func (m *metricsGateway) scrape(t *testing.T) string {
	t.Helper()
	st, body := adminGet(t, m.admin+"/metrics")
	require.Equal(t, 200, st)
	return body
}

// value returns the value of series (name and labels as written) in the metrics page, 0 when
// absent.
func (m *metricsGateway) value(t *testing.T, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(m.scrape(t), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// waitValue waits until series has the value want (the counts of a request are taken after
// its response went out).
func (m *metricsGateway) waitValue(t *testing.T, series string, want float64) {
	t.Helper()
	waitMetric(t, m.admin+"/metrics", series, func(v float64) bool { return v == want })
}

// Requests refused before routing, on the engine's own parsing and limits, count in
// sluice_requests_total and sluice_gateway_errors_total the same on both engines.
func TestMetricsRejectedRequestsCountAlikeOnBothEngines(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			ep := "rejects_" + engine
			m := startMetricsGateway(t, engine, ep, "rejects_"+engine, up.addr(),
				"max_header_bytes = 2048\nmax_body_bytes = 16\nread_header_timeout = \"500ms\"")
			requests := fmt.Sprintf(`sluice_requests_total{entrypoint=%q}`, ep)
			errSeries := func(st int) string {
				return fmt.Sprintf(`sluice_gateway_errors_total{entrypoint=%q,status="%d"}`, ep, st)
			}
			base := map[string]float64{requests: m.value(t, requests)}
			for _, st := range []int{400, 404, 408, 413, 414, 431} {
				base[errSeries(st)] = m.value(t, errSeries(st))
			}
			for _, tc := range []struct {
				req    string
				status int
			}{
				{"POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
				{"GET /v1/x HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 4096) + "\r\n\r\n", 431},
				{"GET /v1/" + strings.Repeat("a", 4096) + " HTTP/1.1\r\nHost: gw\r\n\r\n", 414},
				{"GET /v1/x HTTP/1.1\nHost: gw\n\n", 400},
				{"POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 17\r\n\r\n01234567890123456", 413},
				{"POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 17\r\nExpect: 100-continue\r\n\r\n", 413},
				{"GET /nope HTTP/1.1\r\nHost: gw\r\n\r\n", 404},
			} {
				c := dial(t, m.addr)
				send(t, c, tc.req)
				require.Equal(t, tc.status, readResponse(t, bufio.NewReader(c), false).status)
				base[errSeries(tc.status)]++
				m.waitValue(t, errSeries(tc.status), base[errSeries(tc.status)])
			}
			// A head, and a body, that never complete: both engines answer 408 and count the
			// connection as shed for header_timeout.
			shed := fmt.Sprintf(`sluice_connections_shed_total{entrypoint=%q,reason="header_timeout"}`, ep)
			base[shed] = m.value(t, shed)
			for _, partial := range []string{"GET /v1/x HTTP/1.1\r\nHost: gw\r\n", "POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\nabc"} {
				c := dial(t, m.addr)
				send(t, c, partial)
				resp := readResponse(t, bufio.NewReader(c), false)
				require.Equal(t, 408, resp.status, partial)
				require.Contains(t, string(resp.body), `"code":"request_timeout"`)
				base[errSeries(408)]++
				base[shed]++
				m.waitValue(t, errSeries(408), base[errSeries(408)])
				m.waitValue(t, shed, base[shed])
			}
			m.waitValue(t, requests, base[requests]+9)
		})
	}
}

// sluice_active_streams counts a streamed response from its head to its end, whether it
// completes or its client leaves.
func TestMetricsActiveStreams(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int)
			up := sseUpstream(t, next)
			t.Cleanup(func() { close(next) }) // before the upstream waits for its scripts
			router := "streams_" + engine
			m := startMetricsGateway(t, engine, "web", router, up.addr(), "")
			series := fmt.Sprintf(`sluice_active_streams{router=%q,service="up"}`, router)
			base := m.value(t, series)
			for _, leave := range []bool{false, true} {
				c := dial(t, m.addr)
				send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
				r := bufio.NewReader(c)
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "HTTP/1.1 200 OK\r\n", line)
				for l := ""; l != "\r\n"; {
					l, err = r.ReadString('\n')
					require.NoError(t, err)
				}
				next <- 0
				require.Equal(t, "data: {\"i\":0}\n\n", readChunk(t, r))
				m.waitValue(t, series, base+1)
				if leave {
					require.NoError(t, c.Close())
				} else {
					next <- -1
					require.Equal(t, "data: [DONE]\n\n", readChunk(t, r))
					require.Equal(t, "", readChunk(t, r), "last chunk")
				}
				m.waitValue(t, series, base)
			}
		})
	}
}

// A reload is counted by result; the time of the last configuration put in force moves only
// on success.
func TestMetricsReloads(t *testing.T) {
	up := serveUpstream(t, echo)
	m := startMetricsGateway(t, "gnet", "web", "reloads", up.addr(), "")
	const ok, failed, last = `sluice_config_reloads_total{result="success"}`, `sluice_config_reloads_total{result="failure"}`, `sluice_config_last_reload_success_timestamp_seconds`
	okBase, failedBase, started := m.value(t, ok), m.value(t, failed), m.value(t, last)
	require.NotZero(t, started, "the configuration loaded at start is the last good one")

	reload := func() int {
		resp, err := http.Post(m.admin+"/api/gateway/reload", "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.NoError(t, os.WriteFile(m.path, []byte("[routers.reloads]\nrule = 5\n"), 0o644))
	require.Equal(t, 400, reload())
	require.Equal(t, failedBase+1, m.value(t, failed))
	require.Equal(t, okBase, m.value(t, ok))
	require.Equal(t, started, m.value(t, last))

	require.NoError(t, os.WriteFile(m.path, []byte(m.toml("PathPrefix(`/v2`)")), 0o644))
	require.Equal(t, 200, reload())
	require.Equal(t, okBase+1, m.value(t, ok))
	require.Equal(t, failedBase+1, m.value(t, failed))
	require.GreaterOrEqual(t, m.value(t, last), started)
}

// metricsUpstream serves /v1/stream as an SSE stream of three events, answers /v1/fail with
// bytes that are not HTTP, and echoes anything else.
func metricsUpstream(t *testing.T) *upstream {
	return serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		switch {
		case strings.HasPrefix(head, "POST /v1/stream "):
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			for _, ev := range []string{"data: {\"i\":0}\n\n", "data: {\"i\":1}\n\n", "data: [DONE]\n\n"} {
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
			}
			_, err := io.WriteString(c, "0\r\n\r\n")
			return err == nil
		case strings.HasPrefix(head, "POST /v1/fail "):
			io.WriteString(c, "not http\r\n\r\n")
			return false
		}
		return echo(c, r, head, body)
	})
}

// serveTraffic sends a streamed request, a request whose upstream fails and one no router
// matches, and waits until the gateway has counted them.
func serveTraffic(t *testing.T, m *metricsGateway, ep, router, upstream string) {
	t.Helper()
	l := fmt.Sprintf(`router=%q,service="up"`, router)
	ttft := m.value(t, `sluice_ttft_seconds_count{`+l+`}`)
	protoErrs := m.value(t, `sluice_upstream_errors_total{`+l+`,reason="protocol"}`)
	noRoute := m.value(t, fmt.Sprintf(`sluice_gateway_errors_total{entrypoint=%q,status="404"}`, ep))

	c := dial(t, m.addr)
	r := bufio.NewReader(c)
	send(t, c, "POST /v1/stream HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
	resp := readResponse(t, r, false)
	require.Equal(t, 200, resp.status)
	require.Contains(t, string(resp.body), "[DONE]")
	send(t, c, "POST /v1/fail HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
	require.Equal(t, 502, readResponse(t, r, false).status)
	send(t, c, "GET /nope HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.Equal(t, 404, readResponse(t, r, false).status)

	m.waitValue(t, `sluice_ttft_seconds_count{`+l+`}`, ttft+1)
	m.waitValue(t, `sluice_upstream_errors_total{`+l+`,reason="protocol"}`, protoErrs+1)
	m.waitValue(t, fmt.Sprintf(`sluice_gateway_errors_total{entrypoint=%q,status="404"}`, ep), noRoute+1)
	// Both upstream requests went on connections the gateway opened.
	waitMetric(t, m.admin+"/metrics", fmt.Sprintf(`sluice_upstream_connect_seconds_count{service="up",backend="http://%s"}`, upstream),
		func(v float64) bool { return v >= 1 })
}

// The metrics page of a gateway that served a streamed request, a failed one and a 404 passes
// promtool's checks without a warning.
func TestMetricsPassPromtool(t *testing.T) {
	up := metricsUpstream(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			m := startMetricsGateway(t, engine, "web", "promtool", up.addr(), "")
			serveTraffic(t, m, "web", "promtool", up.addr())
			page := m.scrape(t)
			require.Contains(t, page, "# HELP sluice_ttft_seconds ")
			require.Contains(t, page, "# TYPE sluice_ttft_seconds histogram")
			require.NotContains(t, page, "vmrange")

			promtool, err := exec.LookPath("promtool")
			if err != nil {
				t.Skip("promtool is not on PATH (Debian: package prometheus); the exposition format is not checked")
			}
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(page)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Run(), "promtool check metrics:\n%s", out.String())
			require.Empty(t, out.String(), "promtool check metrics warns")
		})
	}
}
