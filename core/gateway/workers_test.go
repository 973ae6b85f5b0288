package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/metrics"
)

// The llmsim instances of the worker fleet, each but "good" with one reason to be left out
// of a target that binds generation 2 and digest "sha256:good".
var fleetWorkers = []struct {
	id     string
	reason string // the reason for the bound target; "" eligible
	mod    func(*llmsim.InstanceConfig)
}{
	{"good", "", func(*llmsim.InstanceConfig) {}},
	{"oldgen", "deployment_generation", func(ic *llmsim.InstanceConfig) { ic.Generation = 1 }},
	{"otherdigest", "execution_config_digest", func(ic *llmsim.InstanceConfig) { ic.Digest = "sha256:other" }},
	{"prefill", "wrong_role", func(ic *llmsim.InstanceConfig) { ic.Role = llmsim.RolePrefill }},
	{"starting", "not_ready", func(ic *llmsim.InstanceConfig) { ic.StartupDelay = llmsim.Duration(time.Hour) }},
	{"full", "at_capacity", func(ic *llmsim.InstanceConfig) { ic.MaxRunning = 1 }},
	{"killed", "stale", func(*llmsim.InstanceConfig) {}},
}

const (
	fullWorker   = 5
	killedWorker = 6
)

// stubServer is a loopback server that answers observations with obs (404 when obs is nil)
// and chat completions with a fixed answer, counting them.
type stubServer struct {
	*httptest.Server
	chats atomic.Int64
}

func startStub(t *testing.T, obs func() string) *stubServer {
	t.Helper()
	s := &stubServer{}
	mux := http.NewServeMux()
	if obs != nil {
		mux.HandleFunc("GET /power/v1/observation", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(obs()))
		})
	}
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		s.chats.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"stub","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`))
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// workerFleet is the fleet behind the service "fleet": the llmsim instances of fleetWorkers,
// then an unhealthy stub worker, a stub worker that restarts between any two polls, and a
// plain server (404 on the observation).
type workerFleet struct {
	sim        *llmsim.Fleet
	unhealthy  *stubServer
	restarting *stubServer
	plain      *stubServer
}

func (f *workerFleet) urls() []string {
	var out []string
	for _, a := range f.sim.Addrs() {
		out = append(out, "http://"+a)
	}
	return append(out, f.unhealthy.URL, f.restarting.URL, f.plain.URL)
}

func startWorkerFleet(t *testing.T) *workerFleet {
	t.Helper()
	cfg := llmsim.Config{Seed: 1}
	for _, w := range fleetWorkers {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.WorkerID, ic.Generation, ic.Digest = "127.0.0.1:0", w.id, 2, "sha256:good"
		ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(2*time.Millisecond), llmsim.Duration(time.Millisecond), 4
		w.mod(&ic)
		cfg.Instance = append(cfg.Instance, ic)
	}
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	f := &workerFleet{sim: sim}
	f.unhealthy = startStub(t, func() string {
		return `{"worker_id":"unhealthy","role":"aggregated","ready":true,"healthy":false,"active":0,"max_active":8,"waiting":0,"deployment_generation":2,"execution_config_digest":"sha256:good","epoch":0}`
	})
	var epoch atomic.Int64
	f.restarting = startStub(t, func() string {
		return fmt.Sprintf(`{"worker_id":"restarting","role":"aggregated","ready":true,"healthy":true,"active":0,"max_active":8,"waiting":0,"deployment_generation":2,"execution_config_digest":"sha256:good","epoch":%d}`, epoch.Add(1))
	})
	f.plain = startStub(t, nil)
	return f
}

// workerGatewayTOML is a model router over the fleet: "bound" binds generation 2 and digest
// "sha256:good", "open" binds nothing, "next-gen" prefers generation 3 (no worker has it)
// and falls back to generation 2.
func workerGatewayTOML(engine string, urls []string, extra string) string {
	var servers []string
	for _, u := range urls {
		servers = append(servers, fmt.Sprintf("{ url = %q }", u))
	}
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.fleet.load_balancer]
servers = [%s]
[services.fleet.workers]
observe_interval = "200ms"
observation_ttl = "3s"
%s
[models.bound.targets.t]
service = "fleet"
deployment_generation = 2
execution_config_digest = "sha256:good"
[models.open.targets.t]
service = "fleet"
[models.next-gen.targets.new]
service = "fleet"
deployment_generation = 3
[models.next-gen.targets.current]
service = "fleet"
priority = 1
deployment_generation = 2
`, engineTOML(engine), strings.Join(servers, ", "), extra)
}

type workerRow struct {
	URL         string `json:"url"`
	Kind        string `json:"kind"`
	Observation *struct {
		WorkerID             string `json:"worker_id"`
		DeploymentGeneration int64  `json:"deployment_generation"`
		Epoch                int64  `json:"epoch"`
	} `json:"observation"`
	ReceivedAt *time.Time `json:"received_at"`
	LastError  *string    `json:"last_error"`
	Eligible   bool       `json:"eligible"`
	Reason     *string    `json:"reason"`
	Targets    []struct {
		Model    string  `json:"model"`
		Target   string  `json:"target"`
		Eligible bool    `json:"eligible"`
		Reason   *string `json:"reason"`
	} `json:"targets"`
}

func adminWorkers(t *testing.T, admin string) []workerRow {
	t.Helper()
	status, body := adminGet(t, admin+"/api/gateway/workers")
	require.Equal(t, 200, status, body)
	var rows []workerRow
	require.NoError(t, json.Unmarshal([]byte(body), &rows), body)
	return rows
}

// verdict is a row's reason for model's target t ("" when eligible, "?" when not listed).
func (r workerRow) verdict(model string) string {
	for _, tv := range r.Targets {
		if tv.Model == model && tv.Target == "t" {
			if tv.Reason == nil {
				return ""
			}
			return *tv.Reason
		}
	}
	return "?"
}

// waitWorkers polls the admin API until ok holds for its rows, failing after 10 s with the
// last rows.
func waitWorkers(t *testing.T, admin string, ok func([]workerRow) bool) []workerRow {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows := adminWorkers(t, admin)
		if ok(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(rows, "", " ")
			t.Fatalf("workers never reached the expected state:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond) // polling the admin API, not asserting on time
	}
}

func simRequests(t *testing.T, f *llmsim.Fleet, i int) int64 {
	t.Helper()
	status, body := adminGet(t, "http://"+f.Addrs()[i]+"/llmsim/stats")
	require.Equal(t, 200, status, body)
	var st llmsim.Stats
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	return st.Requests
}

// holdStream starts a stream on addr that holds its batch slot until the test ends.
func holdStream(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hold"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nx-llmsim-fault: stall-after=1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "200")
}

// A model router sends a target's requests only to the workers that may take them: for each
// reason to leave one out, one worker of the fleet has it and receives nothing; a plain
// server is used by a target that binds nothing and left out by one that binds a generation;
// a target with no eligible worker gives way to the next priority. With prefix affinity the
// choice leaves out, and counts, the same workers.
func TestWorkerAwareTargetSelection(t *testing.T) {
	type variant struct{ name, engine, extra string }
	var variants []variant
	for _, engine := range engines {
		variants = append(variants, variant{engine, engine, ""})
	}
	variants = append(variants, variant{"gnet-prefix-affinity", "gnet", "[models.bound.scheduling]\nprefix_affinity = true\n"})
	for _, v := range variants {
		engine := v.engine
		t.Run(v.name, func(t *testing.T) {
			f := startWorkerFleet(t)
			holdStream(t, f.sim.Addrs()[fullWorker])
			cfg, err := config.LoadBytes("workers.toml", []byte(workerGatewayTOML(engine, f.urls(), v.extra)))
			require.NoError(t, err)
			g, err := gateway.New(cfg, "", nil)
			require.NoError(t, err)
			require.NoError(t, g.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = g.Drain(ctx)
			})
			base, admin := "http://"+g.Addr("web"), "http://"+g.AdminAddr()

			// The killed worker dies once observed, so that it has an observation to go stale.
			waitWorkers(t, admin, func(rows []workerRow) bool { return rows[killedWorker].Kind == "worker" })
			require.NoError(t, f.sim.Crash(killedWorker, time.Hour))

			want := map[int]string{}
			for i, w := range fleetWorkers {
				want[i] = w.reason
			}
			n := len(fleetWorkers)
			want[n], want[n+1], want[n+2] = "unhealthy", "identity_changed", "no_observation"
			rows := waitWorkers(t, admin, func(rows []workerRow) bool {
				for i, r := range want {
					if rows[i].verdict("bound") != r {
						return false
					}
				}
				return true
			})
			require.Len(t, rows, n+3)
			good := rows[0]
			require.Equal(t, "worker", good.Kind)
			require.Equal(t, "good", good.Observation.WorkerID)
			require.EqualValues(t, 2, good.Observation.DeploymentGeneration)
			require.NotNil(t, good.ReceivedAt)
			require.True(t, good.Eligible)
			require.Equal(t, "plain", rows[n+2].Kind)
			require.Nil(t, rows[n+2].Observation)
			require.True(t, rows[n+2].Eligible, "a plain server is judged by health alone")
			require.NotNil(t, rows[killedWorker].LastError, "the killed worker's polls fail")
			require.Equal(t, "", rows[1].verdict("open"), "open binds no generation")
			require.Equal(t, "", rows[n+2].verdict("open"))

			before := make([]int64, len(fleetWorkers))
			for i := range fleetWorkers {
				if i != killedWorker {
					before[i] = simRequests(t, f.sim, i)
				}
			}
			excludedBefore := exclusionCounts(t)
			chat := base + "/v1/chat/completions"
			const boundN = 12
			for range boundN {
				r := call(t, "POST", chat, "", fmt.Sprintf(chatBody, "bound"))
				require.Equal(t, 200, r.status, r.raw)
			}
			// Every request left each ineligible server out, under its reason.
			excluded := exclusionCounts(t)
			perReason := map[string]int{}
			for _, r := range want {
				if r != "" {
					perReason[r]++
				}
			}
			for reason, servers := range perReason {
				require.EqualValues(t, boundN*servers, excluded[reason]-excludedBefore[reason], "exclusions for %s", reason)
			}
			require.EqualValues(t, boundN, simRequests(t, f.sim, 0)-before[0], "the eligible worker took every request")
			for i := 1; i < len(fleetWorkers); i++ {
				if i != killedWorker {
					require.Equal(t, before[i], simRequests(t, f.sim, i), "worker %s (%s) got a request", fleetWorkers[i].id, fleetWorkers[i].reason)
				}
			}
			require.Zero(t, f.unhealthy.chats.Load()+f.restarting.chats.Load()+f.plain.chats.Load(), "the stubs and the plain server got a request")

			// A target that binds nothing: the good worker, the other generation and digest,
			// and the plain server share the requests.
			for range 60 {
				r := call(t, "POST", chat, "", fmt.Sprintf(chatBody, "open"))
				require.Equal(t, 200, r.status, r.raw)
			}
			for i := range 3 {
				require.Greater(t, simRequests(t, f.sim, i)-before[i], int64(0), "worker %s got no request of open", fleetWorkers[i].id)
			}
			require.Positive(t, f.plain.chats.Load(), "the plain server is used")
			for i := 3; i < len(fleetWorkers); i++ {
				if i != killedWorker {
					require.Equal(t, before[i], simRequests(t, f.sim, i), "worker %s (%s) got a request", fleetWorkers[i].id, fleetWorkers[i].reason)
				}
			}
			require.Zero(t, f.unhealthy.chats.Load()+f.restarting.chats.Load())

			// No worker has generation 3: the next priority's target (generation 2, any digest)
			// takes the request, on one of the generation-2 workers ("good", "otherdigest"; the
			// killed and full ones are out), whichever the load makes least loaded.
			n0, n2 := simRequests(t, f.sim, 0), simRequests(t, f.sim, 2)
			for range 3 {
				r := call(t, "POST", chat, "", fmt.Sprintf(chatBody, "next-gen"))
				require.Equal(t, 200, r.status, r.raw)
			}
			require.EqualValues(t, 3, simRequests(t, f.sim, 0)-n0+simRequests(t, f.sim, 2)-n2)
		})
	}
}

// A reload that keeps a server keeps its last observation (here of a worker that stopped
// answering since, which a fresh poll could not observe), and the replaced snapshot's
// polling stops. The workers' key comes from api_key_env.
func TestWorkerObservationsSurviveReload(t *testing.T) {
	t.Setenv("SLUICE_TEST_POWER_KEY", "pk-1")
	cfg := llmsim.DefaultConfig()
	cfg.APIKey = "pk-1"
	cfg.Defaults.Listen, cfg.Defaults.WorkerID, cfg.Defaults.Generation, cfg.Defaults.Digest = "127.0.0.1:0", "w-reload", 2, "sha256:good"
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })

	path := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(weight int) {
		toml := workerGatewayTOML("gnet", []string{"http://" + sim.Addrs()[0]}, `api_key_env = "SLUICE_TEST_POWER_KEY"`)
		toml = strings.Replace(toml, `observation_ttl = "3s"`, `observation_ttl = "1m"`, 1)
		toml += fmt.Sprintf("[models.extra.targets.t]\nservice = \"fleet\"\nweight = %d\n", weight)
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	}
	write(1)
	c, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(c, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	admin := "http://" + g.AdminAddr()
	rows := waitWorkers(t, admin, func(rows []workerRow) bool { return rows[0].Kind == "worker" })
	require.Equal(t, "w-reload", rows[0].Observation.WorkerID, "the bearer key from api_key_env is sent")

	require.NoError(t, sim.Crash(0, time.Hour))
	waitWorkers(t, admin, func(rows []workerRow) bool { return rows[0].LastError != nil })
	old := g.Snapshot().Workers["fleet"]
	write(2)
	require.NoError(t, g.Reload())
	select {
	case <-old.Done():
	default:
		t.Fatal("the replaced snapshot still polls")
	}
	rows = adminWorkers(t, admin)
	require.Equal(t, "worker", rows[0].Kind, "the observation survived the reload")
	require.Equal(t, "w-reload", rows[0].Observation.WorkerID)
	require.Equal(t, "", rows[0].verdict("bound"), "and counts until its TTL")
	require.NotSame(t, old, g.Snapshot().Workers["fleet"])
}

// A worker's observation is the server's, not its URL's: a reload that writes the server's URL
// another way (a trailing slash, the host in another letter case) keeps the observation in
// hand, so that the request right after the reload is served on the observed worker, before
// any poll answers, and no server is left out for want of an observation.
func TestWorkerObservationSurvivesAReloadThatRewritesTheServerURL(t *testing.T) {
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen, cfg.Defaults.WorkerID, cfg.Defaults.Generation, cfg.Defaults.Digest = "127.0.0.1:0", "w-rewrite", 2, "sha256:good"
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	// The worker behind a front that stops answering its observations on demand and serves
	// its requests all along: after the reload only the observation in hand can count.
	var paused atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: sim.Addrs()[0]})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/power/v1/observation" && paused.Load() {
			http.Error(w, "observations paused", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	_, port, err := net.SplitHostPort(front.Listener.Addr().String())
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(u string) {
		toml := workerGatewayTOML("gnet", []string{u}, "")
		toml = strings.Replace(toml, `observation_ttl = "3s"`, `observation_ttl = "1m"`, 1)
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	}
	write("http://localhost:" + port)
	c, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(c, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	base, admin := "http://"+g.Addr("web"), "http://"+g.AdminAddr()
	waitWorkers(t, admin, func(rows []workerRow) bool { return rows[0].Kind == "worker" })
	paused.Store(true)
	waitWorkers(t, admin, func(rows []workerRow) bool { return rows[0].LastError != nil })

	for _, u := range []string{"http://localhost:" + port + "/", "http://LocalHost:" + port} {
		excluded, served := exclusionCounts(t)["no_observation"], simRequests(t, sim, 0)
		write(u)
		require.NoError(t, g.Reload(), u)
		r := call(t, "POST", base+"/v1/chat/completions", "", fmt.Sprintf(chatBody, "bound"))
		require.Equal(t, 200, r.status, "%s: %s", u, r.raw)
		require.Equal(t, served+1, simRequests(t, sim, 0), "%s: served on the observed worker", u)
		require.Equal(t, excluded, exclusionCounts(t)["no_observation"], "%s: left out for want of an observation", u)
		rows := adminWorkers(t, admin)
		require.Equal(t, "worker", rows[0].Kind, u)
		require.Equal(t, "w-rewrite", rows[0].Observation.WorkerID, u)
	}
}

// exclusionCounts reads sluice_worker_exclusions_total of the fleet service by reason.
func exclusionCounts(t *testing.T) map[string]float64 {
	t.Helper()
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf)
	out := map[string]float64{}
	prefix := `sluice_worker_exclusions_total{service="fleet",reason="`
	for _, line := range strings.Split(buf.String(), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		reason, value, ok := strings.Cut(rest, `"} `)
		require.True(t, ok, line)
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, line)
		out[reason] = v
	}
	return out
}
