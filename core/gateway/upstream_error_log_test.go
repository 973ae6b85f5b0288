package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// The warning for a backend that refuses connections names the upstream, the failure and its
// cause once each, on every engine.
func TestUpstreamRefusedLogLineSaysEachThingOnce(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			cfg, err := config.LoadBytes("test.toml", []byte(fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s

[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://%s" }]

[admin]
address = ""
`, engineTOML(engine), deadUpstream)))
			require.NoError(t, err)
			var logs syncBuffer
			g, err := gateway.New(cfg, "", slog.New(slog.NewTextHandler(&logs, nil)))
			require.NoError(t, err)
			require.NoError(t, g.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = g.Drain(ctx)
			})

			c := dial(t, g.Addr("web"))
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
			require.Equal(t, 502, readResponse(t, bufio.NewReader(c), false).status)
			// The line is written before the 502 is.
			require.Contains(t, logs.String(), `msg="upstream failed" router=api backend=http://`+deadUpstream+` stage=connect `+
				`error="sluice: upstream `+deadUpstream+`: dial failed: connect: connection refused"`)
		})
	}
}
