package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// A WebSocket opened before a reload goes on on the configuration it started with, though the
// reload replaced its service's connection pool; a new one after the reload works too.
func TestWebSocketSurvivesReload(t *testing.T) {
	ln := startWSEcho(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.toml")
			write := func(idleConns int) {
				require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.ws]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
max_idle_conns = %d
[admin]
address = ""
`, engineTOML(engine), ln.Addr(), idleConns)), 0o600))
			}
			write(8)
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
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			echo := func(c *websocket.Conn, m string) {
				t.Helper()
				require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(m)))
				_, got, err := c.Read(ctx)
				require.NoError(t, err)
				require.Equal(t, m, string(got))
			}
			before, _, err := websocket.Dial(ctx, "ws://"+g.Addr("web")+"/socket", nil)
			require.NoError(t, err)
			defer before.CloseNow()
			echo(before, "before")
			write(9) // a new pool for the service; the old one is closed
			require.NoError(t, g.Reload())
			echo(before, "across the reload")
			after, _, err := websocket.Dial(ctx, "ws://"+g.Addr("web")+"/socket", nil)
			require.NoError(t, err)
			defer after.CloseNow()
			echo(after, "after")
			echo(before, "still")
		})
	}
}

// startWSEcho starts a WebSocket server on loopback that echoes every message back, until the
// test ends.
func startWSEcho(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln
}
