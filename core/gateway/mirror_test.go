package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// startConfigGateway runs a gateway on toml, which must have an entrypoint "web" on an engine
// of %[1]q's choosing and an admin listener; it returns the entrypoint's address and the admin
// API's base URL.
func startConfigGateway(t *testing.T, toml string) (*gateway.Gateway, string, string) {
	t.Helper()
	cfg, err := config.LoadBytes("lifecycle.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	return g, g.Addr("web"), "http://" + g.AdminAddr()
}

// shadow is a loopback upstream that records the bodies it gets and answers each with a small
// JSON body.
type shadow struct {
	*upstream
	mu     sync.Mutex
	bodies []string
	got    chan struct{} // one value per request received
}

func startShadow(t *testing.T) *shadow {
	s := &shadow{got: make(chan struct{}, 1024)}
	s.upstream = serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, body []byte) bool {
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		s.got <- struct{}{}
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
		return err == nil
	})
	return s
}

// startStuckShadow starts a shadow that reads each request and never answers, holding the
// copy until the test ends; held gets a value for each copy it holds.
func startStuckShadow(t *testing.T) (*upstream, <-chan struct{}) {
	held := make(chan struct{}, 64)
	stuck := serveUpstreamU(t, func(u *upstream, _ net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		held <- struct{}{}
		<-u.stop
		return false
	})
	return stuck, held
}

// wait waits for n requests at the shadow.
func (s *shadow) wait(t *testing.T, n int) []string {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-s.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("the shadow got %d of %d copies", i, n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// Mirroring 10% copies exactly every tenth request to the shadow, with the body the primary
// got; the callers only ever see the primary's answers.
func TestMirrorCopiesItsShareWithIdenticalBodies(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			sh := startShadow(t)
			svc := "mirrored-" + engine
			_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = %q
[services.%s.load_balancer]
servers = [{ url = "http://%s" }]
[services.%s.mirror]
service = "shadow"
percentage = 10
[services.shadow.load_balancer]
servers = [{ url = "http://%s" }]
`, engineTOML(engine), svc, svc, sim, svc, sh.addr()))
			// The metrics are the process's: a run of the test with -count counts from where the
			// last one left them.
			okSeries := fmt.Sprintf(`sluice_mirror_responses_total{service=%q,shadow="shadow",code="2xx"}`, svc)
			sentSeries := fmt.Sprintf(`sluice_mirror_sent_total{service=%q,shadow="shadow"}`, svc)
			ok0, sent0 := metricValue(t, admin, okSeries), metricValue(t, admin, sentSeries)
			var sent []string
			for i := 0; i < 100; i++ {
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"request %d"}],"max_tokens":2}`, i)
				sent = append(sent, body)
				r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body)
				require.Equal(t, 200, r.status, r.raw)
				require.Equal(t, "chat.completion", r.body["object"], "the caller gets the primary's answer")
			}
			got := sh.wait(t, 10)
			want := []string{}
			for i := 9; i < 100; i += 10 {
				want = append(want, sent[i])
			}
			require.ElementsMatch(t, want, got, "every tenth request, body byte for byte")
			waitMetric(t, admin+"/metrics", okSeries, func(v float64) bool { return v == ok0+10 })
			waitMetric(t, admin+"/metrics", sentSeries, func(v float64) bool { return v == sent0+10 })
		})
	}
}

// A WebSocket handshake is not copied to the shadow (it would hold a tunnel nobody uses);
// the requests after it on the service are. One sender keeps the copies in order, so the
// first one the shadow gets is the first one taken.
func TestMirrorLeavesWebSocketHandshakesOut(t *testing.T) {
	ws := startWSEcho(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			sh := startShadow(t)
			_, addr, _ := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "ws"
[services.ws.load_balancer]
servers = [{ url = "http://%s" }]
[services.ws.mirror]
service = "shadow"
percentage = 100
max_concurrent = 1
[services.shadow.load_balancer]
servers = [{ url = "http://%s" }]
`, engineTOML(engine), ws.Addr(), sh.addr()))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws://"+addr+"/socket", nil)
			require.NoError(t, err)
			defer c.CloseNow()
			require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("hi")))
			_, got, err := c.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, "hi", string(got))

			const body = `{"after":"the handshake"}`
			r := call(t, "POST", "http://"+addr+"/echo", "", body)
			require.NotZero(t, r.status, r.raw)
			require.Equal(t, []string{body}, sh.wait(t, 1), "the first copy is the POST's")
		})
	}
}

// On a model route the shadow can run another model: the copy's "model" is replaced, the rest
// of the body is the primary's.
func TestMirrorRunsTheShadowModel(t *testing.T) {
	sim := startSimulator(t)
	sh := startShadow(t)
	_, addr, _ := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.sim.load_balancer]
servers = [{ url = "http://%s" }]
[services.sim.workers]
observe = false
[services.sim.mirror]
service = "candidate"
percentage = 100
model = "candidate-model"
[services.candidate.load_balancer]
servers = [{ url = "http://%s" }]
[models.chat.targets.t]
service = "sim"
upstream_model = "internal/model-v1"
`, sim, sh.addr()))
	body := `{"model":"chat","messages":[{"role":"user","content":"compare me"}],"max_tokens":2}`
	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body)
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, "internal/model-v1", r.body["model"], "the primary ran the target's model")
	got := sh.wait(t, 1)
	var copyBody map[string]any
	require.NoError(t, json.Unmarshal([]byte(got[0]), &copyBody))
	require.Equal(t, "candidate-model", copyBody["model"])
	require.Equal(t, `{"model":"candidate-model","messages":[{"role":"user","content":"compare me"}],"max_tokens":2}`, got[0])
}

// A dead shadow and a shadow that never answers change nothing for the primary: every request
// is answered by the primary; the copies fail (counted as errors) or, once the stuck shadow's
// only sender and queue slot are taken, are dropped at once (counted), never waited for.
func TestMirrorToADeadOrStuckShadowLeavesThePrimaryAlone(t *testing.T) {
	sim := startSimulator(t)
	stuck, held := startStuckShadow(t)
	for _, tc := range []struct{ name, shadow, metric string }{
		{"dead", deadUpstream(t), `sluice_mirror_responses_total{service="to-dead",shadow="shadow-dead",code="error"}`},
		{"stuck", stuck.addr(), `sluice_mirror_dropped_total{service="to-stuck",shadow="shadow-stuck",reason="queue_full"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := "to-" + tc.name
			_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = %q
[services.%s.load_balancer]
servers = [{ url = "http://%s" }]
[services.%s.mirror]
service = "shadow-%s"
percentage = 100
queue_size = 1
max_concurrent = 1
timeout = "1m"
[services.shadow-%s.load_balancer]
servers = [{ url = "http://%s" }]
`, svc, svc, sim, svc, tc.name, tc.name, tc.shadow))
			// The metrics are the process's: on a run of the test with -count the series
			// already holds the last run's count, which meets an absolute bound before any
			// request is sent.
			base := metricValue(t, admin, tc.metric)
			for i := 0; i < 20; i++ {
				r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
				require.Equal(t, 200, r.status, r.raw)
			}
			// Dead: 20 failed copies. Stuck: one copy held by the sender, one queued, 18 dropped.
			waitMetric(t, admin+"/metrics", tc.metric, func(v float64) bool { return v >= base+18 })
		})
	}
	require.NotEmpty(t, held, "the stuck shadow got its copy and held it")
}

// The bytes of the copies a mirror holds are bounded by max_bytes, whatever the queue could
// hold: with a shadow that never answers, large bodies fill the budget with one copy and the
// next are dropped as max_bytes, not queued (each would hold its body in memory).
func TestMirrorBoundsTheBytesItHolds(t *testing.T) {
	sim := startSimulator(t)
	stuck, held := startStuckShadow(t)
	_, addr, admin := startConfigGateway(t, budgetMirrorConfig(sim, stuck.addr(), "big", "shadow", 1))
	// 100 KiB bodies: a copy takes its body and 64 KiB for its head from the 256 KiB budget,
	// so one copy fits and a second would not.
	body := bigChat
	// The metrics are the process's: a run of the test with -count counts from where the last
	// one left them.
	const (
		sentSeries = `sluice_mirror_sent_total{service="big",shadow="shadow"}`
		overSeries = `sluice_mirror_dropped_total{service="big",shadow="shadow",reason="max_bytes"}`
		fullSeries = `sluice_mirror_dropped_total{service="big",shadow="shadow",reason="queue_full"}`
	)
	sent0, over0, full0 := metricValue(t, admin, sentSeries), metricValue(t, admin, overSeries), metricValue(t, admin, fullSeries)
	const n = 12
	for i := 0; i < n; i++ {
		r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body)
		require.Equal(t, 200, r.status, r.raw)
	}
	waitMetric(t, admin+"/metrics", overSeries, func(v float64) bool { return v >= over0+n-1 })
	require.Equal(t, sent0+1, metricValue(t, admin, sentSeries))
	require.Equal(t, full0, metricValue(t, admin, fullSeries))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck shadow never got the copy that fit")
	}
}

// The budget holds across reloads: a reload that changes the mirror's settings (here its
// timeout) makes a new mirror while the copy the old one sent is still held by the shadow, and
// the new mirror counts that copy, so it drops the next one instead of granting the budget
// again (each reload would add its bytes).
func TestMirrorBudgetHoldsAcrossReloads(t *testing.T) {
	sim := startSimulator(t)
	stuck, held := startStuckShadow(t)
	conf := func(reload int) string {
		c := budgetMirrorConfig(sim, stuck.addr(), "reloaded", "shadow-r", 4)
		return strings.Replace(c, `timeout = "1m"`, fmt.Sprintf(`timeout = "%ds"`, 60+reload), 1)
	}
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, addr, admin := startFileGateway(t, path, conf(0))
	// The metrics are the process's: a run of the test with -count counts from where the last
	// one left them.
	const sentSeries = `sluice_mirror_sent_total{service="reloaded",shadow="shadow-r"}`
	const droppedSeries = `sluice_mirror_dropped_total{service="reloaded",shadow="shadow-r",reason="max_bytes"}`
	sent0, dropped0 := metricValue(t, admin, sentSeries), metricValue(t, admin, droppedSeries)
	body := bigChat
	send := func() {
		r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body)
		require.Equal(t, 200, r.status, r.raw)
	}
	send()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck shadow never got the first copy")
	}
	for i := 1; i <= 3; i++ {
		require.NoError(t, os.WriteFile(path, []byte(conf(i)), 0o644))
		require.NoError(t, g.Reload())
		addr = g.Addr("web")
		send()
	}
	waitMetric(t, admin+"/metrics", droppedSeries, func(v float64) bool { return v >= dropped0+3 })
	require.Equal(t, sent0+1, metricValue(t, admin, sentSeries), "only the first copy was sent: the reloads' mirrors counted it")
}

// budgetMirrorConfig mirrors every request of service, served by sim, to shadow at
// shadowAddr, with maxConcurrent senders and a budget of 256 KiB: one copy of bigChat fits
// (its body and 64 KiB for its head), a second would not.
func budgetMirrorConfig(sim, shadowAddr, service, shadow string, maxConcurrent int) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = %[3]q
[services.%[3]s.load_balancer]
servers = [{ url = "http://%[1]s" }]
[services.%[3]s.mirror]
service = %[4]q
percentage = 100
max_concurrent = %[5]d
max_bytes = 262144
timeout = "1m"
[services.%[4]s.load_balancer]
servers = [{ url = "http://%[2]s" }]
`, sim, shadowAddr, service, shadow, maxConcurrent)
}

// bigChat is a chat request with 100 KiB of content.
var bigChat = `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100<<10) + `"}],"max_tokens":2}`

// headAnswer answers each request as an origin server does: a HEAD gets the head a GET would
// get, its Content-Length included, and no body (RFC 9110 §9.3.2). Each request's method goes
// to methods.
func headAnswer(t *testing.T, methods chan<- string) *upstream {
	return serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		method, _, _ := strings.Cut(head, " ")
		methods <- method
		body := `{"ok":true}`
		if method == "HEAD" {
			body = ""
		}
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n%s", body)
		return err == nil
	})
}

// A copy of a HEAD request reads the shadow's answer as a HEAD's, with no body whatever its
// Content-Length says: the shadow's answer is counted as it comes, and the mirror's only
// sender is free for the next copy at once, not held until the copy's timeout. On each
// engine.
func TestMirrorCopiesAHeadRequestAsAHead(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			primaryGot, shadowGot := make(chan string, 16), make(chan string, 16)
			primary, sh := headAnswer(t, primaryGot), headAnswer(t, shadowGot)
			svc := "head-" + engine
			_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = %q
[services.%s.load_balancer]
servers = [{ url = "http://%s" }]
[services.%s.mirror]
service = "shadow-%s"
percentage = 100
max_concurrent = 1
timeout = "1m"
[services.shadow-%s.load_balancer]
servers = [{ url = "http://%s" }]
`, engineTOML(engine), svc, svc, primary.addr(), svc, engine, engine, sh.addr()))
			// The metrics are the process's: a run of the test with -count counts from where the
			// last one left them.
			okSeries := fmt.Sprintf(`sluice_mirror_responses_total{service=%q,shadow="shadow-%s",code="2xx"}`, svc, engine)
			ok0 := metricValue(t, admin, okSeries)
			const n = 3
			for range n {
				c := dial(t, addr)
				send(t, c, "HEAD /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
				r := readResponse(t, bufio.NewReader(c), true)
				require.NoError(t, c.Close())
				require.Equal(t, 200, r.status)
				require.Equal(t, "11", r.headers["content-length"], "the primary's head, as it sent it")
				require.Equal(t, "HEAD", <-primaryGot)
			}
			for i := range n {
				select {
				case m := <-shadowGot:
					require.Equal(t, "HEAD", m)
				case <-time.After(10 * time.Second):
					t.Fatalf("the shadow got %d of %d copies: the sender is held by a HEAD's answer", i, n)
				}
			}
			waitMetric(t, admin+"/metrics", okSeries, func(v float64) bool { return v == ok0+n })
		})
	}
}

// A request that a model's next target's service serves, its first target's servers being
// unreachable, is one of that service's requests: its mirror copies it too, with the body
// that service got, as the first service's mirror copied it with the body sent there. On each
// engine.
func TestMirrorOfANextTargetsServiceCopiesItsRequests(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			first, next := startShadow(t), startShadow(t)
			_, addr, _ := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.a.load_balancer]
servers = [{ url = "http://%s" }]
[services.a.mirror]
service = "shadow-a"
percentage = 100
[services.shadow-a.load_balancer]
servers = [{ url = "http://%s" }]
[services.b.load_balancer]
servers = [{ url = "http://%s" }]
[services.b.workers]
observe = false
[services.b.mirror]
service = "shadow-b"
percentage = 100
[services.shadow-b.load_balancer]
servers = [{ url = "http://%s" }]
[models.chat.targets.first]
service = "a"
upstream_model = "model-a"
[models.chat.targets.next]
service = "b"
upstream_model = "model-b"
priority = 1
`, engineTOML(engine), deadUpstream(t), first.addr(), sim, next.addr()))
			r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
			require.Equal(t, 200, r.status, r.raw)
			require.Equal(t, "model-b", r.body["model"], "the next target answered")
			require.Equal(t, []string{`{"model":"model-a","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`}, first.wait(t, 1))
			require.Equal(t, []string{`{"model":"model-b","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`}, next.wait(t, 1),
				"the service that served the request copied it")
		})
	}
}
