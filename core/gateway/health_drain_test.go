package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// healthEntry is one entrypoint of GET /api/gateway/health.
type healthEntry struct {
	Name        string `json:"name"`
	Engine      string `json:"engine"`
	Connections int64  `json:"connections"`
	Active      int64  `json:"active_requests"`
}

// healthEntries reads GET /api/gateway/health at admin and returns its entrypoints by name.
// t may be an assert.CollectT, for a check that is retried.
func healthEntries(t require.TestingT, admin string) map[string]healthEntry {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	code, body := adminGet(t, "http://"+admin+"/api/gateway/health")
	require.Equal(t, 200, code, body)
	var h struct {
		Entrypoints []healthEntry `json:"entrypoints"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &h), body)
	out := map[string]healthEntry{}
	for _, e := range h.Entrypoints {
		out[e.Name] = e
	}
	return out
}

// The health answer counts what an entrypoint serves, whichever listener serves it: a stream
// on a listener that a reload replaced (another engine) or removed is still a connection and a
// request in progress until it ends, as sluice_open_connections counts it.
func TestHealthCountsListenersThatDrain(t *testing.T) {
	ws, js := wsEchoUpstream(t), watchUpstream(t).addr()
	withAdmin := func(doc string) string {
		return strings.Replace(doc, "[admin]\naddress = \"\"", "[admin]\naddress = \"127.0.0.1:0\"", 1)
	}
	for _, engine := range engines {
		other := "fasthttp"
		if engine == "fasthttp" {
			other = "gnet"
		}
		t.Run(engine+"-to-"+other, func(t *testing.T) {
			next := make(chan int)
			u := upstreams{sseUpstream(t, next).addr(), ws, js}
			t.Cleanup(func() { close(next) })
			ep := func(name, engine string) string {
				return fmt.Sprintf("[entrypoints.%s]\naddress = \"127.0.0.1:0\"\nengine = %s\n", name, engineTOML(engine))
			}
			shown := func(engine string) string { return strings.TrimSuffix(engine, "-worker") }
			g, path := startFromFile(t, withAdmin(epReloadConfig(ep("web", engine), u, 1)))
			admin := g.AdminAddr()
			c, r := openStream(t, g.Addr("web"), next)
			defer c.Close()
			require.Equal(t, healthEntry{Name: "web", Engine: shown(engine), Connections: 1, Active: 1}, healthEntries(t, admin)["web"])

			require.NoError(t, reloadWith(t, g, path, withAdmin(epReloadConfig(ep("web", other), u, 2))))
			require.Equal(t, healthEntry{Name: "web", Engine: shown(other), Connections: 1, Active: 1}, healthEntries(t, admin)["web"],
				"the stream on the replaced listener is still served")

			require.NoError(t, reloadWith(t, g, path, withAdmin(epReloadConfig(ep("api", other), u, 3))))
			eps := healthEntries(t, admin)
			require.Equal(t, int64(1), eps["web"].Active, "the stream on the removed entrypoint is still served: %+v", eps)
			require.Contains(t, eps, "api")

			finishStream(t, r, next)
			require.NoError(t, c.Close())
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				_, listed := healthEntries(c, admin)["web"]
				assert.False(c, listed)
			}, 5*time.Second, 10*time.Millisecond, "the drained entrypoint is still listed")
		})
	}
}
