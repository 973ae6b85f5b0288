package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// tenantStage is a whole feature written once as a stage: it refuses requests without an
// X-Tenant header (401), tells the upstream which tenant it serves, and stamps the response.
type tenantStage struct{}

func (tenantStage) OnRequest(rc *pipeline.RequestCtx) error {
	v, ok := rc.Req.HeaderValue("X-Tenant")
	if !ok {
		return rc.Reply(401, "application/json", []byte(`{"error":{"message":"who are you?","type":"authentication_error","param":null,"code":"no_tenant"}}`))
	}
	rc.AddUpstreamHeader([]byte("X-Served-Tenant"), v)
	return nil
}

func (tenantStage) OnResponse(rc *pipeline.RequestCtx) error {
	rc.AddResponseHeader([]byte("X-Stage"), []byte("tenant"))
	return nil
}

// withStages is a Resolver that runs every route of a snapshot with extra stages.
type withStages struct {
	snap  *snapshot.Snapshot
	chain *pipeline.Chain
}

func (w withStages) Hooks() *pipeline.Chain { return w.snap.Hooks() }

func (w withStages) Resolve(ep string, req *http1.Request) (*pipeline.Route, *pipeline.Chain) {
	rt, hooks := w.snap.Resolve(ep, req)
	if rt == nil {
		return nil, hooks
	}
	cp := *rt
	cp.Chain = w.chain
	return &cp, hooks
}

// startStageTransport starts engine ("gnet" or "fasthttp") on loopback with res, drained
// when the test ends.
func startStageTransport(t *testing.T, engine string, res pipeline.Resolver) ingress.Transport {
	t.Helper()
	set := ingress.Settings{Name: "web", Address: "127.0.0.1:0"}
	var tr ingress.Transport
	if engine == "gnet" {
		tr = ingress.NewGnet(set, res, nil)
	} else {
		tr = ingress.NewFast(set, res, nil)
	}
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tr.Drain(ctx)
	})
	return tr
}

func TestStageRunsOnBothEngines(t *testing.T) {
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"tenant":%q}`, r.Header.Get("X-Served-Tenant"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })

	toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://%s\" }]\n[admin]\naddress = \"\"\n", ln.Addr())
	cfg, err := config.LoadBytes("stage.toml", []byte(toml))
	require.NoError(t, err)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { snap.Retire(nil) })
	chain, err := pipeline.NewChain(tenantStage{})
	require.NoError(t, err)
	res := withStages{snap, chain}

	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			tr := startStageTransport(t, engine, res)
			c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
			require.NoError(t, err)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(c)

			_, err = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.NoError(t, err)
			resp, err := http.ReadResponse(r, nil)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			require.Equal(t, 401, resp.StatusCode, "the stage answers itself")
			require.Contains(t, string(body), "no_tenant")
			require.NotEmpty(t, resp.Header.Get("X-Request-Id"))

			_, err = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\nX-Tenant: acme\r\n\r\n")
			require.NoError(t, err)
			resp, err = http.ReadResponse(r, nil)
			require.NoError(t, err)
			body, _ = io.ReadAll(resp.Body)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, `{"tenant":"acme"}`, strings.TrimSpace(string(body)), "the upstream saw the stage's field")
			require.Equal(t, "tenant", resp.Header.Get("X-Stage"), "the response stage ran")
		})
	}
}

// holdStage stands for a stage that holds something for its request (an admission slot, a
// reservation) from OnRequest to OnComplete; held counts what is held.
type holdStage struct{ held *atomic.Int64 }

func (s holdStage) OnRequest(*pipeline.RequestCtx) error { s.held.Add(1); return nil }
func (s holdStage) OnComplete(*pipeline.RequestCtx)      { s.held.Add(-1) }

// panicStage panics on every response head: a bug in a stage.
type panicStage struct{}

func (panicStage) OnResponse(*pipeline.RequestCtx) error { panic("a stage's bug") }

// bodyPanicStage panics on the response body, which fasthttp writes on a goroutine of its own.
type bodyPanicStage struct{}

func (bodyPanicStage) OnBody(*pipeline.RequestCtx, []byte) { panic("a body stage's bug") }

// streamingUpstreamConfig starts an upstream that streams three SSE events (the gateway relays
// them as they come, after the head) and returns a configuration that routes everything to it.
func streamingUpstreamConfig(t *testing.T) *config.Config {
	t.Helper()
	return upstreamConfig(t, func(w http.ResponseWriter, _ *http.Request) { streamThreeEvents(w) })
}

// streamThreeEvents answers with an event stream of three events, each flushed as it is
// written.
func streamThreeEvents(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range 3 {
		_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
		w.(http.Flusher).Flush()
	}
}

// upstreamConfig starts an upstream served by h and returns a configuration that routes
// everything to it.
func upstreamConfig(t *testing.T, h http.HandlerFunc) *config.Config {
	t.Helper()
	up := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://%s\" }]\n[admin]\naddress = \"\"\n", ln.Addr())
	cfg, err := config.LoadBytes("stage.toml", []byte(toml))
	require.NoError(t, err)
	return cfg
}

// A stage that panics costs its request, not what the request held: the engine recovers the
// panic, answers 500 when no byte of the response went out, the completion stages run (a
// slot taken in OnRequest is given back), and the connection closes.
func TestPanicInAStageGivesBackWhatTheRequestHeld(t *testing.T) {
	cfg := streamingUpstreamConfig(t)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { snap.Retire(nil) })
	var held atomic.Int64
	for _, tc := range []struct {
		name, engine string
		stage        any
		head         bool // the panic comes before the response head
	}{
		{"gnet-head", "gnet", panicStage{}, true},
		{"gnet-body", "gnet", bodyPanicStage{}, false},
		{"gnet-complete", "gnet", workerCompletePanicStage{}, false},
		{"fasthttp-head", "fasthttp", panicStage{}, true},
		{"fasthttp-body", "fasthttp", bodyPanicStage{}, false},
		{"fasthttp-complete", "fasthttp", workerCompletePanicStage{}, false},
	} {
		engine := tc.engine
		chain, err := pipeline.NewChain(holdStage{&held}, tc.stage, holdStage{&held})
		require.NoError(t, err)
		res := withStages{snap, chain}
		t.Run(tc.name, func(t *testing.T) {
			tr := startStageTransport(t, engine, res)
			for range 3 {
				c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
				require.NoError(t, err)
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
				require.NoError(t, err)
				got, err := io.ReadAll(c) // the connection closes after the panic
				require.NoError(t, err)
				switch {
				case tc.head:
					// No byte of the response went out: the client learns that the gateway failed.
					require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 500 "), "a 500 for a request whose handling failed: %q", got)
					require.Contains(t, string(got), `"type":"server_error"`)
					require.NotContains(t, string(got), "200 OK", "no success for a request whose handling failed")
				case strings.HasSuffix(tc.name, "-body"):
					require.NotContains(t, string(got), "0\r\n\r\n", "a body cut short does not end like a complete one")
				}
				_ = c.Close()
			}
			waitReleased(t, snap, &held)
		})
	}
}

// The loop-safe versions of the stages above: the route runs on an event loop.
type loopHoldStage struct{ holdStage }

func (loopHoldStage) LoopSafe() bool { return true }

type loopPanicStage struct{ panicStage }

func (loopPanicStage) LoopSafe() bool { return true }

type loopBodyPanicStage struct{ bodyPanicStage }

func (loopBodyPanicStage) LoopSafe() bool { return true }

// requestPanicStage panics when the request arrives, before any upstream is chosen.
type requestPanicStage struct{}

func (requestPanicStage) OnRequest(*pipeline.RequestCtx) error { panic("a request stage's bug") }
func (requestPanicStage) LoopSafe() bool                       { return true }

// workerCompletePanicStage panics when its request completes, after the response went out.
type workerCompletePanicStage struct{}

func (workerCompletePanicStage) OnComplete(*pipeline.RequestCtx) { panic("a completion stage's bug") }

// waitReleased waits until the requests gave back what they held: the hold stages' count and
// every backend's count of requests in flight.
func waitReleased(t *testing.T, snap *snapshot.Snapshot, held *atomic.Int64) {
	t.Helper()
	rt, _ := snap.Resolve("web", &http1.Request{Method: []byte("GET"), URI: []byte("/x"), Path: []byte("/x"), Host: []byte("gw")})
	require.NotNil(t, rt)
	inFlight := func() int64 {
		var n int64
		for _, b := range rt.Service.Backends {
			n += b.LB.Active()
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for held.Load() != 0 || inFlight() != 0 {
		require.True(t, time.Now().Before(deadline), "the requests still hold %d, %d in flight at the backends", held.Load(), inFlight())
		time.Sleep(time.Millisecond) // polling for the completion stages, not asserting on time
	}
}

// completePanicStage panics when its request completes, after the response went out.
type completePanicStage struct{}

func (completePanicStage) OnComplete(*pipeline.RequestCtx) { panic("a completion stage's bug") }
func (completePanicStage) LoopSafe() bool                  { return true }

// A stage that panics on an event loop costs its request, not the loop: the loop recovers,
// answers 500 when no byte of the response went out, gives back what the request held
// (its completion stages run) and closes the connection; the gateway goes on serving.
func TestPanicOnTheEventLoopCostsOnlyItsRequest(t *testing.T) {
	cfg := streamingUpstreamConfig(t)
	var held atomic.Int64
	for _, tc := range []struct {
		name  string
		stage any
		head  bool // the panic comes before the response head
	}{
		{"request", requestPanicStage{}, true},
		{"head", loopPanicStage{}, true},
		{"body", loopBodyPanicStage{}, false},
		{"complete", completePanicStage{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := snapshot.Compile(cfg, nil, 1)
			require.NoError(t, err)
			t.Cleanup(func() { snap.Retire(nil) })
			// Stages on both sides of the one that panics, where the one after it entered the
			// request: its completion runs all the same.
			stages := []any{loopHoldStage{holdStage{&held}}, tc.stage, loopHoldStage{holdStage{&held}}}
			if tc.name == "request" {
				stages = stages[:2]
			}
			chain, err := pipeline.NewChain(stages...)
			require.NoError(t, err)
			set := ingress.Settings{Name: "web", Address: "127.0.0.1:0", UpstreamLoop: true}
			tr := ingress.NewGnet(set, withStages{snap, chain}, nil)
			require.NoError(t, tr.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = tr.Drain(ctx)
			})
			for range 3 {
				c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
				require.NoError(t, err)
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
				require.NoError(t, err)
				got, err := io.ReadAll(c) // the connection closes after the panic
				require.NoError(t, err)
				if tc.head {
					require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 500 "), "a 500 for a request whose handling failed: %q", got)
					require.Contains(t, string(got), `"type":"server_error"`)
				} else {
					require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 200 "), "%q", got)
				}
				if tc.name == "body" {
					require.NotContains(t, string(got), "0\r\n\r\n", "a body cut short does not end like a complete one")
				}
				_ = c.Close()
			}
			require.Equal(t, int64(3), ingress.LoopServed(tr), "the requests ran on the event loops")
			waitReleased(t, snap, &held)
		})
	}
}

// markEncoder wraps each piece of a body in marks; it counts its releases.
type markEncoder struct{ released *atomic.Int64 }

func (markEncoder) Encode(dst, p []byte) []byte { return append(append(append(dst, '<'), p...), '>') }
func (markEncoder) Close(dst []byte) []byte     { return dst }
func (e markEncoder) Release()                  { e.released.Add(1) }

// loopEncodeStage is a stage that codes bodies yet reports LoopSafe: a bug of its own.
type loopEncodeStage struct{ released *atomic.Int64 }

func (s loopEncodeStage) OnResponse(rc *pipeline.RequestCtx) error {
	rc.AddResponseHeader([]byte("Content-Encoding"), []byte("x-mark"))
	rc.SetEncoder(markEncoder(s))
	return nil
}
func (loopEncodeStage) LoopSafe() bool { return true }

// The event loop's relay does not code bodies: a loop-safe stage that sets an encoder gets its
// request a 500 (and the encoder back to its pool), never a body that is not what its
// Content-Encoding says.
func TestAnEncoderOnTheEventLoopIsRefused(t *testing.T) {
	cfg := streamingUpstreamConfig(t)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { snap.Retire(nil) })
	var released atomic.Int64
	chain, err := pipeline.NewChain(loopEncodeStage{&released})
	require.NoError(t, err)
	tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", UpstreamLoop: true}, withStages{snap, chain}, nil)
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tr.Drain(ctx)
	})
	c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.NoError(t, err)
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 500 "), "%q", got)
	require.NotContains(t, string(got), "x-mark")
	require.Equal(t, int64(1), ingress.LoopServed(tr), "the request ran on the event loop")
	require.Equal(t, int64(1), released.Load(), "the encoder went back to its pool")
}

// A completion stage that panics (a bug) does so after the response went out whole, and
// leaves the connection's state unknown: on every engine the client gets that response whole,
// then the close, and a request it pipelined behind it is not served (no engine may keep a
// connection a bug left in an unknown state open for the next request).
func TestPanicAtCompletionEndsTheConnection(t *testing.T) {
	var served atomic.Int64
	cfg := upstreamConfig(t, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path == "/json" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
			return
		}
		streamThreeEvents(w)
	})
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { snap.Retire(nil) })
	var held atomic.Int64
	for _, engine := range []string{"gnet", "gnet-loop", "fasthttp"} {
		stages := []any{holdStage{&held}, workerCompletePanicStage{}}
		if engine == "gnet-loop" {
			stages = []any{loopHoldStage{holdStage{&held}}, completePanicStage{}}
		}
		chain, err := pipeline.NewChain(stages...)
		require.NoError(t, err)
		res := withStages{snap, chain}
		for _, tc := range []struct {
			path, body string
			pipelined  bool
		}{
			{"/json", `{"ok":true}`, false},
			{"/json", `{"ok":true}`, true},
			{"/stream", "data: 0\n\ndata: 1\n\ndata: 2\n\n", false},
			{"/stream", "data: 0\n\ndata: 1\n\ndata: 2\n\n", true},
		} {
			t.Run(fmt.Sprintf("%s%s/pipelined=%v", engine, tc.path, tc.pipelined), func(t *testing.T) {
				var tr ingress.Transport
				if engine == "gnet-loop" {
					tr = ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", UpstreamLoop: true}, res, nil)
					require.NoError(t, tr.Start())
					t.Cleanup(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						_ = tr.Drain(ctx)
					})
				} else {
					tr = startStageTransport(t, engine, res)
				}
				served0 := served.Load()
				c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
				require.NoError(t, err)
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				req := "GET " + tc.path + " HTTP/1.1\r\nHost: gw\r\n\r\n"
				if tc.pipelined {
					req += req
				}
				_, err = io.WriteString(c, req)
				require.NoError(t, err)
				r := bufio.NewReader(c)
				resp, err := http.ReadResponse(r, nil)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err, "the response went out whole")
				require.Equal(t, 200, resp.StatusCode)
				require.Equal(t, tc.body, string(body))
				rest, err := io.ReadAll(r)
				require.Empty(t, string(rest), "no second response")
				require.NoError(t, err, "the connection closes after the response")
				require.Equal(t, served0+1, served.Load(), "the pipelined request never reached the upstream")
				waitReleased(t, snap, &held)
			})
		}
	}
}
