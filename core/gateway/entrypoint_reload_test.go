package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// upstreams are the addresses of the upstreams of epReloadConfig: up streams (sseUpstream),
// ws echoes WebSocket messages (wsEchoUpstream), js answers JSON (watchUpstream).
type upstreams struct{ up, ws, js string }

// wsEchoUpstream serves WebSocket echo sessions (every message sent back as it came).
func wsEchoUpstream(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// epReloadConfig is a configuration with the given entrypoint tables (TOML, each starting
// with its [entrypoints.<name>] header) routing /ws to a WebSocket echo upstream, /json to js
// and everything else to up; gen shows in the X-Gen response field.
func epReloadConfig(entrypoints string, u upstreams, gen int) string {
	return entrypoints + fmt.Sprintf(`
[services.js.load_balancer]
servers = [{ url = "http://%s" }]
[routers.plain]
rule = "PathPrefix(`+"`/json`"+`)"
service = "js"
middlewares = ["gen"]`, u.js) + fmt.Sprintf(`
[admin]
address = ""
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[services.ws.load_balancer]
servers = [{ url = "http://%s" }]
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["gen"]
[routers.socket]
rule = "PathPrefix(`+"`/ws`"+`)"
service = "ws"
[middlewares.gen]
type = "headers"
response_set = { "X-Gen" = "%d" }
`, u.up, u.ws, gen)
}

// startFromFile writes doc to a configuration file and starts a gateway on it.
func startFromFile(t *testing.T, doc string) (*gateway.Gateway, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	return g, path
}

// reloadWith writes doc over path and reloads.
func reloadWith(t *testing.T, g *gateway.Gateway, path, doc string) error {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	return g.Reload()
}

// openStream sends a streamed request on a new connection to addr and reads up to its first
// event, which the test releases with next.
func openStream(t *testing.T, addr string, next chan<- int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dial(t, addr)
	return c, startStream(t, c, next)
}

// startStream is openStream on the connection c (plain or TLS).
func startStream(t *testing.T, c net.Conn, next chan<- int) *bufio.Reader {
	t.Helper()
	send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
	r := bufio.NewReader(c)
	next <- 0
	resp := readResponse(t, r, true)
	require.Equal(t, 200, resp.status)
	require.Equal(t, `data: {"i":0}`, strings.TrimSpace(readChunk(t, r)))
	return r
}

// finishStream releases the rest of a stream opened by openStream and checks that it arrives
// whole.
func finishStream(t *testing.T, r *bufio.Reader, next chan<- int) {
	t.Helper()
	next <- 1
	require.Equal(t, `data: {"i":1}`, strings.TrimSpace(readChunk(t, r)), "the stream was cut")
	next <- -1
	require.Equal(t, `data: [DONE]`, strings.TrimSpace(readChunk(t, r)), "the stream was cut")
}

// wsEcho sends m on c and requires it back.
func wsEcho(t *testing.T, c *websocket.Conn, m string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(m)))
	_, got, err := c.Read(ctx)
	require.NoError(t, err, "the WebSocket was cut")
	require.Equal(t, m, string(got))
}

// requireRefused requires that a new connection to addr is refused.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
	}
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "a connection to %s was not refused: %v", addr, err)
}

// genOf requests url and returns its X-Gen field, requiring a 200.
func genOf(t *testing.T, url string) string {
	t.Helper()
	resp := get(t, url)
	require.Equal(t, 200, resp.StatusCode)
	return resp.Header.Get("X-Gen")
}

// A reload that adds an entrypoint opens it; one that removes it closes its listener at once
// (new connections are refused) while the stream and the WebSocket in flight on it go on to
// their end, routed as before.
func TestReloadAddsAndDrainsEntrypoints(t *testing.T) {
	ws, js := wsEchoUpstream(t), watchUpstream(t).addr()
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int)
			u := upstreams{sseUpstream(t, next).addr(), ws, js}
			t.Cleanup(func() { close(next) }) // a stream left open by a failure ends
			web := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %s\n", engineTOML(engine))
			extra := fmt.Sprintf("[entrypoints.extra]\naddress = \"127.0.0.1:0\"\nengine = %s\n", engineTOML(engine))
			g, path := startFromFile(t, epReloadConfig(web, u, 1))
			require.Empty(t, g.Addr("extra"))

			require.NoError(t, reloadWith(t, g, path, epReloadConfig(web+extra, u, 2)))
			addr := g.Addr("extra")
			require.NotEmpty(t, addr, "the added entrypoint listens")
			c, r := openStream(t, addr, next)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sock, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", nil)
			require.NoError(t, err)
			defer sock.CloseNow()
			wsEcho(t, sock, "before")

			require.NoError(t, reloadWith(t, g, path, epReloadConfig(web, u, 3)))
			require.Empty(t, g.Addr("extra"))
			requireRefused(t, addr)
			wsEcho(t, sock, "while draining")
			finishStream(t, r, next)
			require.NoError(t, sock.Close(websocket.StatusNormalClosure, ""))
			require.Equal(t, "3", genOf(t, "http://"+g.Addr("web")+"/json"), "the kept entrypoint serves the new configuration")
		})
	}
}

// A reload that changes an entrypoint's keys replaces it. With its address unchanged the new
// transport takes over the socket: connections opened during the reload are all served (none
// refused), and the stream in flight on the old transport finishes; the new engine serves
// from then on. With another address, the old one refuses new connections.
func TestReloadReplacesChangedEntrypoint(t *testing.T) {
	ws, js := wsEchoUpstream(t), watchUpstream(t).addr()
	for _, engine := range engines {
		other := "fasthttp"
		if engine == "fasthttp" {
			other = "gnet"
		}
		t.Run(engine+"-to-"+other, func(t *testing.T) {
			next := make(chan int)
			u := upstreams{sseUpstream(t, next).addr(), ws, js}
			t.Cleanup(func() { close(next) }) // a stream left open by a failure ends
			ep := func(engine, addr string) string {
				return fmt.Sprintf("[entrypoints.web]\naddress = %q\nengine = %s\n", addr, engineTOML(engine))
			}
			g, path := startFromFile(t, epReloadConfig(ep(engine, "127.0.0.1:0"), u, 1))
			addr := g.Addr("web")
			c, r := openStream(t, addr, next)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sock, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", nil)
			require.NoError(t, err)
			defer sock.CloseNow()

			// New connections, one after another, through the reload: none is refused.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failures []string
			served := 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := client.Get("http://" + addr + "/json")
					mu.Lock()
					if err != nil {
						failures = append(failures, err.Error())
					} else {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						served++
					}
					mu.Unlock()
				}
			}()
			for i := 2; i <= 5; i++ { // back and forth between the engines
				e := other
				if i%2 == 1 {
					e = engine
				}
				require.NoError(t, reloadWith(t, g, path, epReloadConfig(ep(e, "127.0.0.1:0"), u, i)))
				require.Equal(t, addr, g.Addr("web"), "the replaced entrypoint keeps its bound address")
				wsEcho(t, sock, fmt.Sprint("after reload ", i))
			}
			close(stop)
			wg.Wait()
			require.Empty(t, failures, "connections lost while the entrypoint was replaced")
			require.Positive(t, served)
			finishStream(t, r, next)
			require.Equal(t, "5", genOf(t, "http://"+addr+"/json"))

			// Another address: the old one refuses new connections once the reload returns.
			free, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			moved := free.Addr().String()
			require.NoError(t, free.Close())
			require.NoError(t, reloadWith(t, g, path, epReloadConfig(ep(other, moved), u, 7)))
			require.Equal(t, moved, g.Addr("web"))
			requireRefused(t, addr)
			require.Equal(t, "7", genOf(t, "http://"+moved+"/json"))
			wsEcho(t, sock, "after the move")
		})
	}
}

// A reload whose new listener cannot bind (the port is taken) is refused whole, at the
// address's position, and changes nothing: the running entrypoints and configuration stay,
// and a replacement bound for another entrypoint in the same reload is let go.
func TestReloadWithTakenPortIsRefused(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	u := upstreams{watchUpstream(t).addr(), wsEchoUpstream(t), watchUpstream(t).addr()}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			web := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %s\n", engineTOML(engine))
			g, path := startFromFile(t, epReloadConfig(web, u, 1))
			addr := g.Addr("web")
			changed := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %s\nidle_timeout = \"30s\"\n", engineTOML(engine))
			bad := fmt.Sprintf("[entrypoints.busy]\naddress = %q\n", taken.Addr())
			err := reloadWith(t, g, path, epReloadConfig(changed+bad, u, 2))
			require.Error(t, err)
			// The busy entrypoint's table starts on line 6, one further with gnet-worker's extra key.
			busyLine := 6 + strings.Count(engineTOML(engine), "\n")
			require.Contains(t, err.Error(), fmt.Sprintf("%s:%d:1: entrypoints.busy.address: listen tcp %s", path, busyLine, taken.Addr()))
			require.Contains(t, err.Error(), "address already in use")
			require.Empty(t, g.Addr("busy"))
			require.Equal(t, addr, g.Addr("web"))
			require.Equal(t, "1", genOf(t, "http://"+addr+"/json"), "the running configuration stays")
			_, failed := g.Reloads()
			require.Equal(t, uint64(1), failed)

			// Freed, the same file goes in force.
			require.NoError(t, reloadWith(t, g, path, epReloadConfig(changed, u, 3)))
			require.Equal(t, "3", genOf(t, "http://"+addr+"/json"))
		})
	}
}
