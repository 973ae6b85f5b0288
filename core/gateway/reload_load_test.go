package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// The reloads of TestReloadsUnderMixedTrafficLoseNothing, spread over the span; -short runs
// fewer in less time.
const (
	loadReloads      = 200
	loadSpan         = 20 * time.Second
	loadReloadsShort = 60
	loadSpanShort    = 6 * time.Second
	// wsMessages is how many messages one WebSocket session echoes, wsPause apart, so that a
	// session spans reloads.
	wsMessages = 40
	wsPause    = 5 * time.Millisecond
	// heldFor bounds how long a held stream waits for a reload before its end is released.
	heldFor = 250 * time.Millisecond
)

// loadState is what a configuration of the load test sets.
type loadState struct {
	engine   string // of web and extra
	webIdle  string // web's idle_timeout: a change replaces web on its socket
	extra    bool   // the entrypoint extra exists
	pair     string // the certificate files of secure: "a" or "b"
	gen      int    // shown in X-Gen
	bad      int    // 1: a syntax error, 2: a router naming no service
	sim, js  string
	ws, cert string
	held     string // the heldUpstream
}

func (s loadState) toml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %s\nidle_timeout = %q\n", engineTOML(s.engine), s.webIdle)
	fmt.Fprintf(&b, "[entrypoints.secure]\naddress = \"127.0.0.1:0\"\nengine = \"fasthttp\"\ntls = { cert_file = %q, key_file = %q }\n",
		filepath.Join(s.cert, s.pair+".crt"), filepath.Join(s.cert, s.pair+".key"))
	if s.extra {
		fmt.Fprintf(&b, "[entrypoints.extra]\naddress = \"127.0.0.1:0\"\nengine = %s\n", engineTOML(s.engine))
	}
	plain := "js"
	if s.bad == 2 {
		plain = "missing"
	}
	fmt.Fprintf(&b, `[admin]
address = ""
[providers.file]
watch = true
debounce = "10ms"
[services.llm.load_balancer]
servers = [{ url = "http://%s" }]
[services.js.load_balancer]
servers = [{ url = "http://%s" }]
[services.ws.load_balancer]
servers = [{ url = "http://%s" }]
[services.held.load_balancer]
servers = [{ url = "http://%s" }]
[routers.chat]
rule = "PathPrefix(`+"`/v1`"+`)"
service = "llm"
middlewares = ["gen"]
[routers.plain]
rule = "PathPrefix(`+"`/json`"+`)"
service = %q
middlewares = ["gen"]
[routers.socket]
rule = "PathPrefix(`+"`/ws`"+`)"
service = "ws"
[routers.held]
rule = "PathPrefix(`+"`/held`"+`)"
service = "held"
[middlewares.gen]
type = "headers"
response_set = { "X-Gen" = "%d" }
`, s.sim, s.js, s.ws, s.held, plain, s.gen)
	if s.bad == 1 {
		b.WriteString("[routers.broken\n")
	}
	return b.String()
}

// tally counts one kind of traffic on one entrypoint: exchanges begun, completed whole, and
// refused before anything was sent (a connection refused: allowed only where the test
// removes the entrypoint).
type tally struct {
	name                  string
	begun, whole, refused atomic.Int64
	messages              atomic.Int64 // WebSocket messages echoed
}

// failures collects what went wrong, for the report.
type failures struct {
	mu   sync.Mutex
	list []string
}

func (f *failures) add(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, fmt.Sprintf(format, a...))
}

// streamOnce streams one chat completion from the simulator and checks it arrived whole:
// every token event and the final [DONE].
func streamOnce(c *http.Client, base string) error {
	body := `{"model":"sim","stream":true,"messages":[{"role":"user","content":"reload"}]}`
	resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("stream cut after %d bytes: %w", len(b), err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Gen") == "" {
		return fmt.Errorf("status %d gen %q: %.200s", resp.StatusCode, resp.Header.Get("X-Gen"), b)
	}
	if !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		return fmt.Errorf("stream without [DONE]: %.300q", b)
	}
	if n := bytes.Count(b, []byte(`"content":`)); n < 16 {
		return fmt.Errorf("stream with %d content events of 16", n)
	}
	return nil
}

// jsonOnce requests a plain JSON answer.
func jsonOnce(c *http.Client, base string) error {
	resp, err := c.Get(base + "/json")
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(b) != `{"ok":true}` || resp.Header.Get("X-Gen") == "" {
		return fmt.Errorf("status %d body %q gen %q err %v", resp.StatusCode, b, resp.Header.Get("X-Gen"), err)
	}
	return nil
}

// wsSession echoes wsMessages messages through one WebSocket; the count of echoed messages
// goes to tl.
func wsSession(ctx context.Context, tl *tally, url string, opts *websocket.DialOptions, id int64) (dialed bool, err error) {
	c, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return false, err
	}
	defer c.CloseNow()
	for k := range wsMessages {
		m := fmt.Sprintf("session %d message %d", id, k)
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			return true, fmt.Errorf("message %d: %w", k, err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			return true, fmt.Errorf("message %d: %w", k, err)
		}
		if string(got) != m {
			return true, fmt.Errorf("message %d: got %q", k, got)
		}
		tl.messages.Add(1)
		time.Sleep(wsPause) // pacing: a session spans reloads
	}
	return true, c.Close(websocket.StatusNormalClosure, "")
}

// The events of a heldUpstream stream: the first at once, the last once the stream is released.
const (
	heldFirst = "data: held\n\n"
	heldLast  = "data: [DONE]\n\n"
)

// heldUpstream answers POST /held?id=N with an event stream whose head and first event go at
// once and whose last event waits until release(N): the client decides when its stream ends.
type heldUpstream struct {
	addr string
	ids  atomic.Int64
	mu   sync.Mutex
	ends map[string]chan struct{}
}

func startHeldUpstream(t *testing.T) *heldUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &heldUpstream{addr: ln.Addr().String(), ends: map[string]chan struct{}{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		end := h.ends[r.URL.Query().Get("id")]
		h.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, heldFirst)
		w.(http.Flusher).Flush()
		if end != nil {
			select {
			case <-end:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, heldLast)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		h.mu.Lock()
		for id, end := range h.ends {
			close(end)
			delete(h.ends, id)
		}
		h.mu.Unlock()
		_ = srv.Close()
	})
	return h
}

// hold makes a stream to be held and returns its id.
func (h *heldUpstream) hold() string {
	id := fmt.Sprint(h.ids.Add(1))
	h.mu.Lock()
	h.ends[id] = make(chan struct{})
	h.mu.Unlock()
	return id
}

// release lets the stream id end.
func (h *heldUpstream) release(id string) {
	h.mu.Lock()
	if end := h.ends[id]; end != nil {
		close(end)
		delete(h.ends, id)
	}
	h.mu.Unlock()
}

// reloadSignal tells its waiters that a reload is done.
type reloadSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns a channel closed when the next reload is done.
func (s *reloadSignal) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *reloadSignal) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// heldClient streams from a heldUpstream through one entrypoint on one keep-alive connection,
// as a client in a loop does: its next request goes on the same connection the moment a stream
// ends. Each stream is held open until a reload is done (or heldFor has passed), so that a
// drain of the entrypoint begins while it is in flight: its head, sent before, promised
// keep-alive, and the request after it must still be served.
//
// The end of one stream and the head of the next are read under gate's read lock, which a
// reload holds until it is done: a drain never begins while the connection waits between two
// requests. It would close the connection then, and the request sent an instant later would be
// lost: the race of every drain, which only a client that sends requests again can ride out.
//
// The next request goes on the connection kept alive also when a reload removed the entrypoint
// while the stream was in flight: the connection is open and was promised keep-alive, and the
// drain serves that request (with Connection: close, routed by the entrypoint's last
// configuration). Only a new connection needs the entrypoint. A client that waited for the
// entrypoint to return before it sent would leave the connection idle for as long as that took,
// under load longer than the second a drain spares a connection whose response ended under
// such a head; the drain then closes it as the idle connection it is, which a server may do at
// any time (RFC 9112 §9.6), and the POST sent on it after the close is lost: a client does not
// send a non-idempotent request again (RFC 9112 §9.3.1).
type heldClient struct {
	h    *heldUpstream
	addr func() string // the entrypoint's address; "" while it is absent
	tls  *tls.Config   // nil: plaintext
	c    net.Conn
	r    *bufio.Reader
	// The stream in flight on c, if any: its id and the rest of its body.
	id     string
	body   *bufio.Reader
	closes bool // its response said Connection: close
}

// run streams until stop is closed, counting in tl.
func (hc *heldClient) run(tl *tally, fails *failures, mayRefuse bool, stop <-chan struct{}, gate *sync.RWMutex, reloaded *reloadSignal) {
	defer hc.closeConn()
	for {
		gate.RLock()
		if hc.id != "" {
			if err := hc.finish(); err != nil {
				fails.add("%s: %v", tl.name, err)
			} else {
				tl.whole.Add(1)
			}
		}
		select {
		case <-stop:
			gate.RUnlock()
			return
		default:
		}
		var addr string
		if hc.c == nil {
			if addr = hc.addr(); addr == "" {
				// The entrypoint is absent: it returns with a reload. The signal is taken
				// before the read lock goes, so that no reload done after the look is missed.
				back := reloaded.next()
				gate.RUnlock()
				select {
				case <-back:
				case <-stop:
				}
				continue
			}
		}
		tl.begun.Add(1)
		sent, err := hc.start(addr)
		var wait <-chan struct{}
		switch {
		case err == nil:
			wait = reloaded.next()
		case mayRefuse && !sent && refused(err):
			tl.refused.Add(1)
		default:
			fails.add("%s: %v", tl.name, err)
		}
		gate.RUnlock()
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-stop:
		case <-time.After(heldFor):
		}
	}
}

// start sends a request for a held stream, on a new connection to addr if there is none, and
// reads its head and first event; sent reports whether a connection was there to send it on.
func (hc *heldClient) start(addr string) (sent bool, err error) {
	reused := hc.c != nil
	if !reused {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return false, err
		}
		if hc.tls != nil {
			c = tls.Client(c, hc.tls)
		}
		hc.c, hc.r = c, bufio.NewReader(c)
	}
	id := hc.h.hold()
	err = hc.request(id)
	if err != nil {
		hc.h.release(id)
		hc.closeConn()
		if reused {
			err = fmt.Errorf("the request after a stream on its connection, which was kept alive: %w", err)
		}
	}
	return true, err
}

func (hc *heldClient) request(id string) error {
	_ = hc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(hc.c, "POST /held?id=%s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", id); err != nil {
		return err
	}
	resp, err := http.ReadResponse(hc.r, nil)
	if err != nil {
		return err
	}
	body := bufio.NewReader(resp.Body)
	first := make([]byte, len(heldFirst))
	if _, err := io.ReadFull(body, first); err != nil || resp.StatusCode != 200 || string(first) != heldFirst {
		return fmt.Errorf("status %d first event %q: %v", resp.StatusCode, first, err)
	}
	hc.id, hc.body, hc.closes = id, body, resp.Close
	return nil
}

// finish releases the stream in flight and reads the rest of it.
func (hc *heldClient) finish() error {
	id := hc.id
	hc.id = ""
	hc.h.release(id)
	rest, err := io.ReadAll(hc.body)
	hc.body = nil
	if err != nil || string(rest) != heldLast {
		hc.closeConn()
		return fmt.Errorf("stream %s cut: %q: %v", id, rest, err)
	}
	if hc.closes {
		hc.closeConn()
	}
	return nil
}

func (hc *heldClient) closeConn() {
	if hc.c != nil {
		_ = hc.c.Close()
		hc.c, hc.r = nil, nil
	}
}

// genInForce is the X-Gen value of the configuration in force in g (-1 if none).
func genInForce(g *gateway.Gateway) int {
	mw := g.Snapshot().Config.Middlewares["gen"]
	if mw == nil || mw.Headers == nil || len(mw.Headers.ResponseSet) == 0 {
		return -1
	}
	var n int
	if _, err := fmt.Sscan(mw.Headers.ResponseSet[0].Value, &n); err != nil {
		return -1
	}
	return n
}

// refused reports whether err is a connection refused, before anything was sent: refused
// outright, or any failure of the connect itself (a connection still in the kernel's accept
// queue when its listener closes is reset there, and the client's connect fails with it).
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) && op.Op == "dial"
}

// The reload acceptance test. For each engine: reloads from file changes at an even pace while
// clients stream chat completions through the simulator, fetch JSON and echo WebSocket
// messages on a plaintext entrypoint of the engine, on a TLS entrypoint (fasthttp) and on an
// entrypoint that reloads add and remove. Among the reloads: every fifth is invalid (refused,
// the running configuration stays), some switch the TLS entrypoint to other certificate files
// (its listener is replaced on the same socket), some renew the certificate files in use, some
// add or remove the entrypoint extra, some change web's idle_timeout (web is replaced on its
// socket). Every exchange begun is counted and must end whole: no response lost, no stream or
// WebSocket cut, no connection refused except a new one to extra after its removal.
//
// The chat streams use a connection each: a request sent on an idle keep-alive connection at
// the moment a drain closes it is lost unless the client sends it again, which HTTP allows for
// idempotent requests only (RFC 9112 §9.3.1); Go's client does so for the GETs, which share
// connections. So no request of theirs follows a stream on its connection; that case is the
// held clients' (heldClient): whenever a reload runs, a held stream is in flight on each
// entrypoint, and the next request follows it on the same connection the moment it ends.
func TestReloadsUnderMixedTrafficLoseNothing(t *testing.T) {
	reloads, span := loadReloads, loadSpan
	if testing.Short() {
		reloads, span = loadReloadsShort, loadSpanShort
	}
	sim := startSimulator(t)
	ws := wsEchoUpstream(t)
	js := watchUpstream(t).addr()
	held := startHeldUpstream(t)
	ca := newTestCA(t)
	certDir := t.TempDir()
	cns := map[string]string{}
	renew := func(pair string, n int) {
		cns[pair] = fmt.Sprintf("%s-%d", pair, n)
		ca.issue(t, certDir, pair, cns[pair], "127.0.0.1")
	}
	renew("a", 0)
	renew("b", 0)
	tlsConf := &tls.Config{RootCAs: ca.pool}

	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sluice.toml")
			st := loadState{engine: engine, webIdle: "60s", pair: "a", sim: sim, js: js, ws: ws, cert: certDir, held: held.addr}
			require.NoError(t, os.WriteFile(path, []byte(st.toml()), 0o644))
			cfg, err := config.Load(path)
			require.NoError(t, err)
			g, err := gateway.New(cfg, path, nil)
			require.NoError(t, err)
			require.NoError(t, g.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = g.Drain(ctx)
			})
			web, secure := "http://"+g.Addr("web"), "https://"+g.Addr("secure")

			keepAlive := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf, MaxIdleConnsPerHost: 8}}
			perStream := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true}}
			wsOpts := &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}}
			defer keepAlive.CloseIdleConnections()

			var fails failures
			// gate and reloaded pace the held clients (heldClient) with the reloads.
			var gate sync.RWMutex
			var reloaded reloadSignal
			stop := make(chan struct{})
			stopClients := sync.OnceFunc(func() { close(stop) })
			defer stopClients() // also when the test fails before the end
			var wg sync.WaitGroup
			var tallies []*tally
			var sessions atomic.Int64
			// run starts a client loop on entrypoint ep (base "" while it is absent) doing one
			// exchange per turn.
			run := func(name string, base func() string, mayRefuse bool, once func(base string) (sent bool, err error)) {
				tl := &tally{name: name}
				tallies = append(tallies, tl)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						b := base()
						if b == "" {
							time.Sleep(time.Millisecond) // extra is absent: look again
							continue
						}
						tl.begun.Add(1)
						sent, err := once(b)
						switch {
						case err == nil:
							tl.whole.Add(1)
						case mayRefuse && !sent && refused(err):
							tl.refused.Add(1)
						default:
							fails.add("%s: %v", name, err)
						}
					}
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), span+30*time.Second)
			defer cancel()
			stream := func(b string) (bool, error) { return false, streamOnce(perStream, b) }
			plain := func(b string) (bool, error) { return false, jsonOnce(keepAlive, b) }
			fixed := func(b string) func() string { return func() string { return b } }
			extra := func() string {
				if a := g.Addr("extra"); a != "" {
					return "http://" + a
				}
				return ""
			}
			for _, ep := range []struct {
				name      string
				base      func() string
				mayRefuse bool
			}{{"web", fixed(web), false}, {"secure", fixed(secure), false}, {"extra", extra, true}} {
				run(ep.name+" streams", ep.base, ep.mayRefuse, stream)
				run(ep.name+" json", ep.base, ep.mayRefuse, plain)
				hc := &heldClient{h: held, addr: func() string { _, a, _ := strings.Cut(ep.base(), "://"); return a }}
				if strings.HasPrefix(ep.base(), "https://") {
					hc.tls = &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1"}
				}
				heldTally := &tally{name: ep.name + " held streams"}
				tallies = append(tallies, heldTally)
				wg.Add(1)
				go func() {
					defer wg.Done()
					hc.run(heldTally, &fails, ep.mayRefuse, stop, &gate, &reloaded)
				}()
				tl := &tally{name: ep.name + " websockets"}
				tallies = append(tallies, tl)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						b := ep.base()
						if b == "" {
							time.Sleep(time.Millisecond)
							continue
						}
						tl.begun.Add(1)
						dialed, err := wsSession(ctx, tl, "ws"+strings.TrimPrefix(b, "http")+"/ws", wsOpts, sessions.Add(1))
						switch {
						case err == nil:
							tl.whole.Add(1)
						case ep.mayRefuse && !dialed && refused(err):
							tl.refused.Add(1)
						default:
							fails.add("%s: %v", tl.name, err)
						}
					}
				}()
			}

			invalid := 0
			lastGood := st
			start := time.Now()
			for i := 1; i <= reloads; i++ {
				next := lastGood
				next.gen, next.bad = i, 0
				switch {
				case i%5 == 0:
					next.bad = 1 + i/5%2
				case i%4 == 1:
					next.pair = map[string]string{"a": "b", "b": "a"}[next.pair]
				case i%4 == 3:
					renew(next.pair, i)
				case i%6 == 2:
					next.extra = !next.extra
				case i%10 == 6:
					next.webIdle = map[string]string{"60s": "59s", "59s": "60s"}[next.webIdle]
				}
				// While a reload runs, no held client is between two requests (heldClient).
				func() {
					gate.Lock()
					defer gate.Unlock()
					okBefore, failedBefore := g.Reloads()
					body := []byte(next.toml())
					if i%2 == 0 {
						require.NoError(t, os.WriteFile(path, body, 0o644))
					} else { // as editors and deployments do: a new file renamed over the old
						tmp := filepath.Join(dir, ".sluice.toml.tmp")
						require.NoError(t, os.WriteFile(tmp, body, 0o644))
						require.NoError(t, os.Rename(tmp, path))
					}
					// Wait for this reload: a valid file's generation in force and the reload
					// returned (so the drain of an entrypoint it replaced or removed has begun),
					// an invalid file's refusal counted. (A write in place may be seen as two
					// changes when the test is descheduled between truncating and writing: a
					// second reload of the same file, which changes nothing; so the test does not
					// count reloads exactly.)
					if next.bad == 0 {
						lastGood = next
						require.Eventually(t, func() bool { ok, _ := g.Reloads(); return genInForce(g) == i && ok > okBefore }, 10*time.Second, time.Millisecond, "reload %d after its file change", i)
					} else {
						require.Eventually(t, func() bool { _, f := g.Reloads(); return f > failedBefore }, 10*time.Second, time.Millisecond, "refusal of reload %d", i)
						invalid++
					}
				}()
				reloaded.done()
				if d := time.Until(start.Add(time.Duration(i) * span / time.Duration(reloads))); d > 0 {
					time.Sleep(d) // pacing: the reloads spread over the span
				}
			}
			stopClients()
			wg.Wait()

			fails.mu.Lock()
			for i, f := range fails.list {
				if i == 20 {
					t.Errorf("… and %d more", len(fails.list)-20)
					break
				}
				t.Error(f)
			}
			fails.mu.Unlock()
			for _, tl := range tallies {
				t.Logf("%-18s begun %5d whole %5d refused %3d messages %6d", tl.name, tl.begun.Load(), tl.whole.Load(), tl.refused.Load(), tl.messages.Load())
				require.Equal(t, tl.begun.Load(), tl.whole.Load()+tl.refused.Load(), "%s: every exchange ends whole", tl.name)
				require.Positive(t, tl.whole.Load(), "%s: traffic ran", tl.name)
			}
			require.Equal(t, reloads/5, invalid)
			okN, failedN := g.Reloads()
			require.GreaterOrEqual(t, okN, uint64(reloads-invalid))
			require.GreaterOrEqual(t, failedN, uint64(invalid))
			require.Equal(t, fmt.Sprint(lastGood.gen), genOf(t, web+"/json"), "the last valid file is in force")
			require.Equal(t, cns[lastGood.pair], servedCN(t, g.Addr("secure"), "", ca.pool), "the certificate in force is the last one")
		})
	}
}
