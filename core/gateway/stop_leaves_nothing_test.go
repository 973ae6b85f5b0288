package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/lifecycle/scaling/kubetest"
)

// stopWait bounds how long what a gateway ran may take to end once Drain (or a reload, for
// the parts it replaced) returned: nothing should outlive it but goroutines on their way out.
const stopWait = 5 * time.Second

// goroutineDump is one goroutine as runtime.Stack writes it: "goroutine N [state]:", its
// frames and the one that created it.
type goroutineDump struct {
	id    uint64
	stack string
}

// allGoroutines returns every live goroutine.
func allGoroutines() []goroutineDump {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutineDump
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		id, err := strconv.ParseUint(strings.TrimPrefix(head, "goroutine "), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, goroutineDump{id, g})
	}
	return out
}

// goroutineIDs returns the ids of the goroutines running now.
func goroutineIDs() map[uint64]bool {
	ids := map[uint64]bool{}
	for _, g := range allGoroutines() {
		ids[g.id] = true
	}
	return ids
}

// gatewayCode marks a goroutine that runs, or was started by, the gateway's code: sluice's
// packages or gnet's.
var gatewayCode = []string{"github.com/sluice-gw/sluice/", "github.com/panjf2000/gnet/"}

// notTheGateway marks goroutines with sluice code in their stacks that are not a gateway's:
// the test's own (its upstreams and clients), the simulators and build helpers of bench/, the
// fake Kubernetes API server, and the access log's writers, one per destination for the life of the process (every
// configuration that names a destination shares its writer).
var notTheGateway = []string{
	"github.com/sluice-gw/sluice/core/gateway_test.",
	"github.com/sluice-gw/sluice/bench/",
	"github.com/sluice-gw/sluice/core/lifecycle/scaling/kubetest.",
	"github.com/sluice-gw/sluice/core/accesslog.(*sink).run",
}

// gatewayGoroutines returns the live goroutines running gateway code that were not running
// when before was taken, leaving out those whose stacks contain one of also.
func gatewayGoroutines(before map[uint64]bool, also ...string) []goroutineDump {
	var out []goroutineDump
	for _, g := range allGoroutines() {
		if before[g.id] || !containsAny(g.stack, gatewayCode) || containsAny(g.stack, notTheGateway) || containsAny(g.stack, also) {
			continue
		}
		out = append(out, g)
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// requireGoroutinesEnd waits until left returns no goroutine, failing t after stopWait with
// the stacks of those still running.
func requireGoroutinesEnd(t *testing.T, what string, left func() []goroutineDump) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		gs := left()
		stacks := make([]string, len(gs))
		for i, g := range gs {
			stacks[i] = g.stack
		}
		assert.Emptyf(c, gs, "%s: %d goroutines still running:\n\n%s", what, len(gs), strings.Join(stacks, "\n\n"))
	}, stopWait, 20*time.Millisecond)
}

// requireSocketsClosed waits until this process holds no TCP socket on one of the ports
// listening (the listener, or a connection it accepted) nor one connected to one of the ports
// upstream, failing t after stopWait with those left. On a system without /proc it checks
// nothing.
func requireSocketsClosed(t *testing.T, what string, listening, upstream []int) {
	t.Helper()
	if _, err := ownTCPSockets(); errors.Is(err, errors.ErrUnsupported) {
		return
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		socks, err := ownTCPSockets()
		if !assert.NoError(c, err) {
			return
		}
		var left []string
		for _, s := range socks {
			if slices.Contains(listening, s.local) || slices.Contains(upstream, s.remote) {
				left = append(left, fmt.Sprintf("%v", s))
			}
		}
		assert.Emptyf(c, left, "%s: sockets still open (gateway ports %v, upstream ports %v):\n%s", what, listening, upstream, strings.Join(left, "\n"))
	}, stopWait, 20*time.Millisecond)
}

// requireProcessesGone fails t unless every process of pids has ended (and been waited for).
func requireProcessesGone(t *testing.T, what string, pids []int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, pid := range pids {
			assert.ErrorIsf(c, syscall.Kill(pid, 0), syscall.ESRCH, "%s: replica process %d still there", what, pid)
		}
	}, stopWait, 20*time.Millisecond)
}

// portOf returns the port of "host:port" or of a URL's host.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

// stopPDKeyEnv holds the P/D workers' bearer key in the tests of this file.
const stopPDKeyEnv = "SLUICE_TEST_STOP_PD_KEY"

// holdingServer answers 200 to every request, except that it holds one with an X-Hold
// header until its client goes (or the test ends).
type holdingServer struct {
	url    string
	probed chan struct{} // a value per request
	held   chan struct{} // a value per request held
}

func startHoldingServer(t *testing.T) *holdingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &holdingServer{url: "http://" + ln.Addr().String(), probed: make(chan struct{}, 4096), held: make(chan struct{}, 64)}
	stop := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.probed <- struct{}{}:
		default:
		}
		if r.Header.Get("X-Hold") != "" {
			s.held <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		w.WriteHeader(200)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { close(stop); _ = srv.Close() })
	return s
}

// stopUpstreams is one generation of what a gateway of stopConfig runs against: a
// health-checked upstream, the shadow its mirror copies to, a prefill/decode llmsim fleet,
// the entrypoint's certificate files, the llmsim binary the scaled service starts, and the
// Kubernetes API server (a fake) of the service scaled by the kube executor.
type stopUpstreams struct {
	kube      *kubetest.Server
	kubeToken string
	up        *connCountingServer
	shadow    *holdingServer
	pd        *llmsim.Fleet
	cert, key string
	roots     *x509.CertPool
	llmsimBin string
}

func startStopUpstreams(t *testing.T) *stopUpstreams {
	t.Helper()
	cfg := llmsim.Config{Seed: 3, APIKey: os.Getenv(stopPDKeyEnv)}
	for _, w := range []struct {
		id   string
		role llmsim.Role
	}{{"prefill", llmsim.RolePrefill}, {"decode", llmsim.RoleDecode}} {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.WorkerID, ic.Role, ic.Generation = "127.0.0.1:0", w.id, w.role, 3
		// Long enough answers for a stream to be in flight when the gateway stops; the
		// quick requests ask for 4 tokens.
		ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(2*time.Millisecond), llmsim.Duration(10*time.Millisecond), 1000
		ic.KVTransfer, ic.KVTransferPerToken = llmsim.Duration(time.Millisecond), 0
		cfg.Instance = append(cfg.Instance, ic)
	}
	pd, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pd.Close() })
	u := &stopUpstreams{up: startConnCountingServer(t), shadow: startHoldingServer(t), pd: pd, llmsimBin: testenv.BuildBinary(t, "./cmd/llmsim")}
	u.cert, u.key, u.roots = selfSigned(t, t.TempDir())
	u.kube, err = kubetest.Start("models", "llm", "llm-svc", 0)
	require.NoError(t, err)
	t.Cleanup(u.kube.Close)
	u.kubeToken = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(u.kubeToken, []byte(u.kube.Token+"\n"), 0o600))
	return u
}

// ports returns the upstream ports of u, the replicas' aside.
func (u *stopUpstreams) ports(t *testing.T) []int {
	ps := []int{portOf(t, u.up.url), portOf(t, u.shadow.url), portOf(t, u.kube.URL)}
	for _, a := range u.pd.Addrs() {
		ps = append(ps, portOf(t, a))
	}
	return ps
}

// stopConfig is a gateway running as many long-lived parts as a test on loopback can: both
// engines (gnet with its upstream I/O on the loops and on workers, fasthttp with TLS whose
// certificate files are watched), the admin API, a watched configuration file, an active
// health check, a mirror, a rate limit, a service scaled from zero (llmsim replicas), one
// scaled by the kube executor (a Deployment kept at one replica, its EndpointSlices watched)
// and a prefill/decode model whose workers are observed. gen changes a key of each part, so that a
// reload from one gen to another replaces every one.
func stopConfig(u *stopUpstreams, gen int) string {
	var pd []string
	for _, a := range u.pd.Addrs() {
		pd = append(pd, fmt.Sprintf(`{ url = "http://%s" }`, a))
	}
	return fmt.Sprintf(`
[providers.file]
watch = true
debounce = "20ms"

[entrypoints.web]
address = "127.0.0.1:0"
engine = "gnet"
max_connections = %[1]d

[entrypoints.worker]
address = "127.0.0.1:0"
engine = "gnet"
upstream_io = "worker"
max_connections = %[1]d

[entrypoints.secure]
address = "127.0.0.1:0"
engine = "fasthttp"
max_connections = %[1]d
tls = { cert_file = %[2]q, key_file = %[3]q, watch = true }

[admin]
address = "127.0.0.1:0"

[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true

[routers.llm]
rule = "PathPrefix(`+"`/llm`"+`)"
service = "llm"
middlewares = ["nollm"]

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["limit"]

[middlewares.nollm]
type = "strip-prefix"
prefixes = ["/llm"]

[middlewares.limit]
type = "rate-limit"
rate = 1000
burst = %[1]d

[services.up.load_balancer]
servers = [{ url = %[4]q }]
health_check = { path = "/health", interval = "100ms" }

[services.up.mirror]
service = "shadow"
percentage = 100
queue_size = %[1]d

[services.shadow.load_balancer]
servers = [{ url = %[5]q }]

[services.llm.scaling]
executor = "exec"
min_replicas = 0
max_replicas = 1
scale_down_delay = "%[1]ds"
startup_timeout = "%[1]dm"
[services.llm.scaling.exec]
command = [%[6]q, "--listen", "127.0.0.1:{port}", "--ttft", "1ms", "--itl", "1ms", "--tokens", "4"]
stop_timeout = "2s"

[services.kube.scaling]
executor = "kube"
min_replicas = 1
max_replicas = 1
scale_down_delay = "%[1]ds"
startup_timeout = "%[1]dm"
[services.kube.scaling.kube]
namespace = "models"
deployment = "llm"
service = "llm-svc"
url = %[4]q
api_server = %[9]q
token_file = %[10]q

[services.fleet.load_balancer]
servers = [%[7]s]
[services.fleet.workers]
observe_interval = "50ms"
api_key_env = %[8]q

[models.chat.targets.t]
service = "fleet"
deployment_generation = 3
[models.chat.scheduling]
phase = "decode"
[models.chat.scheduling.distributed_serving]
api_key_env = %[8]q
`, 100+gen, u.cert, u.key, u.up.url, u.shadow.url, u.llmsimBin, strings.Join(pd, ", "), stopPDKeyEnv, u.kube.URL, u.kubeToken)
}

// stopClient is the test's client of a gateway of stopConfig: plain HTTP for the gnet
// entrypoints, HTTPS trusting roots for the TLS one.
type stopClient struct {
	t *testing.T
	c *http.Client
}

func newStopClient(t *testing.T, roots *x509.CertPool) *stopClient {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	return &stopClient{t: t, c: &http.Client{Timeout: 10 * time.Second, Transport: tr}}
}

// do sends a request and returns its status and body; the connection stays open, idle.
func (sc *stopClient) do(method, url, body string) (int, string) {
	sc.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(sc.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := sc.c.Do(req)
	require.NoError(sc.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(sc.t, err)
	return resp.StatusCode, string(b)
}

// gatewayURLs returns the base URLs of the entrypoints of a gateway of stopConfig.
func gatewayURLs(g *gateway.Gateway) []string {
	return []string{"http://" + g.Addr("web"), "http://" + g.Addr("worker"), "https://" + g.Addr("secure")}
}

// gatewayPorts returns the listening ports of a gateway of stopConfig: its entrypoints' and
// its admin API's.
func gatewayPorts(t *testing.T, g *gateway.Gateway) []int {
	return []int{portOf(t, g.Addr("web")), portOf(t, g.Addr("worker")), portOf(t, g.Addr("secure")), portOf(t, g.AdminAddr())}
}

// exercise sends requests through every part of a gateway of stopConfig running on u: the
// health-checked and mirrored service on each entrypoint, a cold start of the scaled service,
// and a prefill/decode completion. It returns the replicas' ports and process ids.
func exercise(t *testing.T, g *gateway.Gateway, u *stopUpstreams, sc *stopClient) (replicaPorts, pids []int) {
	t.Helper()
	admin := "http://" + g.AdminAddr()
	select {
	case <-u.up.probed: // the health check's first probe (or a request)
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream was never probed")
	}
	for _, base := range gatewayURLs(g) {
		st, body := sc.do("GET", base+"/ping", "")
		require.Equal(t, 200, st, "%s: %s", base, body)
	}
	select {
	case <-u.shadow.probed: // a mirrored copy
	case <-time.After(10 * time.Second):
		t.Fatal("the shadow got no copy")
	}
	st, body := sc.do("GET", "http://"+g.Addr("web")+"/llm/health", "")
	require.Equal(t, 200, st, "the scaled service, from zero: %s", body)
	for _, r := range scalingOf(t, admin).Replicas {
		if r.PID != 0 {
			replicaPorts, pids = append(replicaPorts, portOf(t, r.URL)), append(pids, r.PID)
		}
	}
	require.NotEmpty(t, pids, "a replica runs")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		replicas, _ := u.kube.Replicas()
		assert.Equal(c, 1, replicas, "the Deployment's replicas")
	}, 10*time.Second, 10*time.Millisecond)
	waitWorkers(t, admin, func(rows []workerRow) bool {
		return len(rows) == 2 && rows[0].Eligible && rows[1].Eligible
	})
	st, body = sc.do("POST", "http://"+g.Addr("web")+"/v1/chat/completions", fmt.Sprintf(chatBody, "chat"))
	require.Equal(t, 200, st, "prefill/decode: %s", body)
	require.NotEmpty(t, u.pd.Calls(0), "the prefill worker served the chat request")
	return replicaPorts, pids
}

// holdStreams starts a prefill/decode stream on each entrypoint of g and returns once each
// has sent its first event; the streams go on for seconds, until the test closes them.
func holdStreams(t *testing.T, g *gateway.Gateway, roots *x509.CertPool) {
	t.Helper()
	body := `{"model":"chat","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hold"}]}`
	for _, base := range gatewayURLs(g) {
		u, err := url.Parse(base)
		require.NoError(t, err)
		var c net.Conn
		if u.Scheme == "https" {
			c, err = tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots})
		} else {
			c, err = net.DialTimeout("tcp", u.Host, 2*time.Second)
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, line, " 200 ", base)
		for !strings.HasPrefix(line, "data: ") {
			line, err = r.ReadString('\n')
			require.NoError(t, err, base)
		}
	}
}

// startStopGateway runs a gateway of stopConfig(u, gen) from a file (so that the file watch
// and reloads have one), drained at the end of the test unless the test drained it.
func startStopGateway(t *testing.T, u *stopUpstreams, gen int) (*gateway.Gateway, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(path, []byte(stopConfig(u, gen)), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Drain(t.Context()) }) // a second Drain does nothing
	require.NoError(t, g.Start())
	return g, path
}

// A gateway that has drained leaves nothing running: no goroutine of its own (its engines'
// event loops and accept loops, its health checks, workers' polls, scalers, mirror senders,
// file and certificate watchers, admin API, requests cut by the drain), no listening socket,
// no connection to an upstream, no replica process, whatever was in flight when it stopped:
// streams on each engine, a mirrored copy the shadow holds, idle keep-alive connections, an
// admin request half sent.
func TestDrainedGatewayLeavesNothingRunning(t *testing.T) {
	t.Setenv(stopPDKeyEnv, "stop-pd-key")
	before := goroutineIDs()
	u := startStopUpstreams(t)
	g, _ := startStopGateway(t, u, 1)
	sc := newStopClient(t, u.roots)
	replicaPorts, pids := exercise(t, g, u, sc)
	listening := gatewayPorts(t, g)
	holdStreams(t, g, u.roots)
	// A mirrored copy the shadow holds: in flight when the gateway stops.
	req, err := http.NewRequest("GET", "http://"+g.Addr("web")+"/hold", nil)
	require.NoError(t, err)
	req.Header.Set("X-Hold", "1")
	resp, err := sc.c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "the primary answers")
	select {
	case <-u.shadow.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the shadow got no copy to hold")
	}
	half, err := net.DialTimeout("tcp", g.AdminAddr(), 2*time.Second)
	require.NoError(t, err)
	defer half.Close()
	_, err = io.WriteString(half, "GET /api/gateway/health HTTP/1.1\r\nHost: "+g.AdminAddr()+"\r\n")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = g.Drain(ctx) // cuts the streams
	sc.c.CloseIdleConnections()

	requireGoroutinesEnd(t, "after Drain", func() []goroutineDump { return gatewayGoroutines(before) })
	requireSocketsClosed(t, "after Drain", listening, append(u.ports(t), replicaPorts...))
	requireProcessesGone(t, "after Drain", pids)
}

// gatewayLifetime marks the goroutines of a gateway that a reload keeps whatever it changes:
// the admin API's server and its connections (a reload does not rebind it) and the
// configuration file watch.
var gatewayLifetime = []string{
	"github.com/sluice-gw/sluice/core/gateway.startAdmin",
	"github.com/sluice-gw/sluice/core/gateway.(*adminConn)",
	"github.com/sluice-gw/sluice/core/gateway.(*watcher).run",
}

// A reload that replaces every part of the configuration (every entrypoint, upstream, health
// check, mirror, scaler, rate limit, certificate and observed worker) stops what the replaced
// configuration ran: of the gateway's goroutines before the reload, only those that live as
// long as the gateway (the admin API, the file watch) are left once the retired entrypoints
// have drained; no connection to a replaced upstream stays open and the replaced scaler's
// replica has ended. The new configuration's parts end in turn with the drain.
func TestReloadThatReplacesEverythingStopsTheOldParts(t *testing.T) {
	t.Setenv(stopPDKeyEnv, "stop-pd-key")
	before := goroutineIDs()
	a, b := startStopUpstreams(t), startStopUpstreams(t)
	g, path := startStopGateway(t, a, 1)
	sc := newStopClient(t, a.roots)
	replicaPortsA, pidsA := exercise(t, g, a, sc)
	sc.c.CloseIdleConnections()
	ranA := goroutineIDs()

	// The file watch reloads.
	require.NoError(t, os.WriteFile(path, []byte(stopConfig(b, 2)), 0o644))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ok, failed := g.Reloads()
		assert.Equal(c, uint64(1), ok, "reloads put in force")
		assert.Zero(c, failed, "reloads refused")
	}, 10*time.Second, 10*time.Millisecond)

	requireGoroutinesEnd(t, "after the reload", func() []goroutineDump {
		var left []goroutineDump
		for _, gr := range gatewayGoroutines(before, gatewayLifetime...) {
			if ranA[gr.id] {
				left = append(left, gr)
			}
		}
		return left
	})
	requireSocketsClosed(t, "after the reload", nil, append(a.ports(t), replicaPortsA...))
	requireProcessesGone(t, "after the reload", pidsA)

	sc = newStopClient(t, b.roots)
	replicaPortsB, pidsB := exercise(t, g, b, sc)
	listening := gatewayPorts(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, g.Drain(ctx))
	sc.c.CloseIdleConnections()
	requireGoroutinesEnd(t, "after Drain", func() []goroutineDump { return gatewayGoroutines(before) })
	requireSocketsClosed(t, "after Drain", listening, append(b.ports(t), replicaPortsB...))
	requireProcessesGone(t, "after Drain", pidsB)
}

// A gateway whose Start fails (an entrypoint's or the admin API's port is taken) stops what
// New set running for its configuration (the health checks, the workers' polls and the
// scaler with its replica) and what Start had started before the failure (the entrypoints,
// the file watch).
func TestStartThatFailsLeavesNothingRunning(t *testing.T) {
	t.Setenv(stopPDKeyEnv, "stop-pd-key")
	for _, tc := range []struct {
		name string
		// edit makes the configuration bind taken, a listener's address.
		edit func(toml, taken string) string
		key  string
	}{
		{"entrypoint", func(toml, taken string) string {
			return toml + fmt.Sprintf("\n[entrypoints.taken]\naddress = %q\n", taken)
		}, "entrypoints.taken.address"},
		{"admin", func(toml, taken string) string {
			return strings.Replace(toml, "[admin]\naddress = \"127.0.0.1:0\"", fmt.Sprintf("[admin]\naddress = %q", taken), 1)
		}, "admin.address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goroutineIDs()
			u := startStopUpstreams(t)
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer taken.Close()
			toml := tc.edit(strings.Replace(stopConfig(u, 1), "min_replicas = 0", "min_replicas = 1", 1), taken.Addr().String())
			path := filepath.Join(t.TempDir(), "sluice.toml")
			require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
			cfg, err := config.Load(path)
			require.NoError(t, err)
			g, err := gateway.New(cfg, path, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = g.Drain(t.Context()) })
			// New put the configuration in force: its replica starts and its upstream is probed.
			var pids []int
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				st := g.Snapshot().Scaler("llm").Status()
				pids = pids[:0]
				for _, r := range st.Replicas {
					if r.PID != 0 {
						pids = append(pids, r.PID)
					}
				}
				assert.Equal(c, 1, st.Ready, "replicas ready")
			}, 10*time.Second, 10*time.Millisecond)
			select {
			case <-u.up.probed:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream was never probed")
			}

			require.ErrorContains(t, g.Start(), tc.key)
			require.Error(t, g.Start(), "a gateway that could not start cannot start again")

			requireGoroutinesEnd(t, "after a failed Start", func() []goroutineDump { return gatewayGoroutines(before) })
			requireSocketsClosed(t, "after a failed Start", nil, u.ports(t))
			requireProcessesGone(t, "after a failed Start", pids)
		})
	}
}
