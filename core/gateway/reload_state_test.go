package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/gateway"
)

// stateSim runs one simulator instance that answers fast, failing every request with a 500
// when failing is set.
func stateSim(t *testing.T, failing bool) *llmsim.Fleet {
	t.Helper()
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(2 * time.Millisecond)
	cfg.Defaults.ITL = llmsim.Duration(time.Millisecond)
	cfg.Defaults.Tokens = 4
	if failing {
		cfg.Defaults.FaultRate = 1
		cfg.Defaults.Fault = "status=500"
	}
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// llmConfig is a gateway whose service "llm" balances over sims with the given
// load_balancer lines, with the admin API on.
func llmConfig(engine, lb string, sims ...*llmsim.Fleet) string {
	var servers []string
	for _, s := range sims {
		servers = append(servers, fmt.Sprintf("{ url = %q }", "http://"+s.Addrs()[0]))
	}
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.load_balancer]
servers = [%s]
%s
`, engineTOML(engine), strings.Join(servers, ", "), lb)
}

// reloadableGateway runs a gateway on the configuration file path, written with toml, and
// returns the gateway and its admin API's base URL.
func reloadableGateway(t *testing.T, path, toml string) (*gateway.Gateway, string) {
	t.Helper()
	g, _ := startHealthGateway(t, path, toml)
	return g, "http://" + g.AdminAddr()
}

// adminReload reloads the configuration through the admin API, as an operator does.
func adminReload(t *testing.T, admin string) {
	t.Helper()
	resp, err := http.Post(admin+"/api/gateway/reload", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "the reload is put in force")
}

// backendState is one backend's entry of /api/gateway/backends.
type backendState struct {
	Active int64 `json:"active_requests"`
	Down   bool  `json:"down"`
}

// backendStates reads /api/gateway/backends by backend URL.
func backendStates(t *testing.T, admin string) map[string]backendState {
	t.Helper()
	st, body := adminGet(t, admin+"/api/gateway/backends")
	require.Equal(t, 200, st, body)
	var list []struct {
		URL string `json:"url"`
		backendState
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	out := map[string]backendState{}
	for _, b := range list {
		out[b.URL] = b.backendState
	}
	return out
}

// backendGauge reads a per-backend gauge of service llm from the metrics page; the series
// must be there.
func backendGauge(t *testing.T, admin, name string, sim *llmsim.Fleet) float64 {
	t.Helper()
	series := fmt.Sprintf(`%s{service="llm",backend="http://%s"}`, name, sim.Addrs()[0])
	_, body := adminGet(t, admin+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "no series %s", series)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// heldStream opens a streamed chat completion through the gateway at addr that the simulator
// holds open after its first event, and returns once that event arrived (the gateway counts
// the request in flight from before it sent it). The stream ends when the returned function
// or the test's cleanup closes it.
func heldStream(t *testing.T, addr string) (stop func()) {
	t.Helper()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(llmsim.FaultHeader, "stall-after=1")
	// A client of its own: the stream's connection closes with it, whatever the pool does.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	_, err = bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err, "the first event arrives")
	stop = func() { resp.Body.Close() }
	t.Cleanup(stop)
	return stop
}

// chat sends a chat completion through the gateway at base and returns its status.
func chat(t *testing.T, base string) int {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitBackendActive polls /api/gateway/backends until sim's backend shows want requests in
// flight, or fails after 5 s.
func waitBackendActive(t *testing.T, admin string, sim *llmsim.Fleet, want int64) {
	t.Helper()
	url := "http://" + sim.Addrs()[0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := backendStates(t, admin)[url].Active
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %s: %d requests in flight, want %d", url, got, want)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not an assertion
	}
}

// A reload keeps what the gateway counts in flight on each server it keeps: streams sent
// before it go on counting in /api/gateway/backends and sluice_upstream_active, and
// least-connections in the new configuration balances on them. With 4 streams on a, a reload
// that adds b sends the next 4 to b; with 2 of a's ended, a reload that changes nothing sends
// the next 2 to a.
func TestReloadKeepsRequestsInFlightPerServer(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			a, b := stateSim(t, false), stateSim(t, false)
			urlA, urlB := "http://"+a.Addrs()[0], "http://"+b.Addrs()[0]
			const lb = `strategy = "least-connections"`
			path := filepath.Join(t.TempDir(), "sluice.toml")
			g, admin := reloadableGateway(t, path, llmConfig(engine, lb, a))
			addr := g.Addr("web")
			inFlight := func(when string, wantA, wantB int64) {
				t.Helper()
				st := backendStates(t, admin)
				assert.Equal(t, wantA, st[urlA].Active, "%s: a's active_requests", when)
				assert.Equal(t, float64(wantA), backendGauge(t, admin, "sluice_upstream_active", a), "%s: a's sluice_upstream_active", when)
				if wantB >= 0 {
					assert.Equal(t, wantB, st[urlB].Active, "%s: b's active_requests", when)
					assert.Equal(t, float64(wantB), backendGauge(t, admin, "sluice_upstream_active", b), "%s: b's sluice_upstream_active", when)
				}
			}

			var onA []func()
			for range 4 {
				onA = append(onA, heldStream(t, addr))
			}
			inFlight("before any reload", 4, -1)
			adminReload(t, admin)
			inFlight("after a reload that changes nothing", 4, -1)

			require.NoError(t, os.WriteFile(path, []byte(llmConfig(engine, lb, a, b)), 0o644))
			adminReload(t, admin)
			inFlight("after a reload that adds b", 4, 0)
			for range 4 {
				heldStream(t, addr)
			}
			assert.Equal(t, int64(4), a.Stats(0).Requests, "a, the busier, got none of the 4 after the reload")
			assert.Equal(t, int64(4), b.Stats(0).Requests, "b got all 4")
			inFlight("with 4 streams on each", 4, 4)

			// Streams sent under an earlier configuration end into the count in force.
			onA[0]()
			onA[1]()
			waitBackendActive(t, admin, a, 2)
			adminReload(t, admin)
			inFlight("after another reload that changes nothing", 2, 4)
			for range 2 {
				heldStream(t, addr)
			}
			assert.Equal(t, int64(6), a.Stats(0).Requests, "a, now the less busy, got both")
			assert.Equal(t, int64(4), b.Stats(0).Requests, "b got neither")
			inFlight("with 4 streams on each again", 4, 4)
		})
	}
}

// A server ejected by passive health stays ejected through a reload that keeps it, for the
// rest of its ejection: it is down in /api/gateway/backends and sluice_backend_up, and gets
// no request.
func TestReloadKeepsPassiveEjection(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			bad, good := stateSim(t, true), stateSim(t, false)
			const lb = `passive_health = { consecutive_failures = 3, ejection = "60s", error_rate = 0 }`
			path := filepath.Join(t.TempDir(), "sluice.toml")
			g, admin := reloadableGateway(t, path, llmConfig(engine, lb, bad, good))
			base := "http://" + g.Addr("web")
			for bad.Stats(0).Requests < 3 {
				chat(t, base)
			}
			waitMetric(t, admin+"/metrics", fmt.Sprintf(`sluice_backend_up{service="llm",backend="http://%s"}`, bad.Addrs()[0]),
				func(v float64) bool { return v == 0 })

			adminReload(t, admin)
			assert.True(t, backendStates(t, admin)["http://"+bad.Addrs()[0]].Down, "ejected in /api/gateway/backends")
			assert.Equal(t, 0.0, backendGauge(t, admin, "sluice_backend_up", bad), "ejected in sluice_backend_up")
			for range 10 {
				assert.Equal(t, 200, chat(t, base), "the good server answers")
			}
			assert.Equal(t, int64(3), bad.Stats(0).Requests, "the ejected server gets no request after the reload")
		})
	}
}
