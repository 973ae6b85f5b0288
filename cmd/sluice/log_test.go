package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// Every log line follows [log]: also those of parts that are handed no logger of their own
// (passive health, scaling, mirror summaries) and so write through slog's default.
func TestEveryLogLineFollowsTheLogSettings(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() { // an upstream that fails every request: passive health warns that it keeps
		// the service's only backend
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				fmt.Fprint(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	port := testenv.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = ""
[log]
format = "json"
`, port, ln.Addr())), 0o644))
	p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d/x", port)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Output(), "not ejected") {
		require.True(t, time.Now().Before(deadline), "no passive-health warning: %s", p.Output())
		if resp, err := http.Get(base); err == nil {
			resp.Body.Close()
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(p.Output()), "\n") {
		require.True(t, json.Valid([]byte(line)), "a log line not in JSON: %q", line)
	}
}
