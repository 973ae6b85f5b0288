package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/config"
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

// The first log line says what runs, before anything compiling the configuration logs: a
// rollout's start, here.
func TestStartLineComesFirst(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	port := testenv.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm]
revisions = [
  { name = "v1", traffic_percent = 90, servers = [{ url = "http://127.0.0.1:1" }] },
  { name = "v2", traffic_percent = 10, servers = [{ url = "http://127.0.0.1:2" }] },
]
[services.llm.rollout]
from = "v1"
to = "v2"
[admin]
address = ""
`, port)), 0o644))
	p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
	p.WaitOutput(t, "entrypoint listening", 10*time.Second)
	require.Contains(t, p.Output(), "msg=rollout", "the rollout's start is logged")
	first, _, _ := strings.Cut(p.Output(), "\n")
	require.Contains(t, first, `msg="sluice starting"`, "the first line:\n%s", p.Output())
}

// A reload that changes log.level or log.format applies them to the lines that follow, those
// of the gateway and those written through slog's default alike.
func TestReloadAppliesTheLogSettings(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	port := testenv.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(prefix, log string) {
		require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
[routers.api]
rule = "PathPrefix(`+"`%s`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "%s" }]
[admin]
address = ""
%s`, port, prefix, up.URL, log)), 0o644))
	}
	write("/v1", "")
	p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
	p.WaitHTTP(t, base+"/v1", 10*time.Second)

	before := len(p.Output())
	write("/v2", "[log]\nlevel = \"warn\"\nformat = \"json\"\n")
	require.NoError(t, p.Signal(syscall.SIGHUP))
	p.WaitHTTP(t, base+"/v2", 10*time.Second)
	// The reload line is INFO: the new level drops it. A refused reload's line is ERROR.
	require.NoError(t, os.WriteFile(cfg, []byte("[routers.api\n"), 0o644))
	require.NoError(t, p.Signal(syscall.SIGHUP))
	out := p.WaitOutput(t, "reload refused", 10*time.Second)
	for _, line := range strings.Split(strings.TrimSpace(out[before:]), "\n") {
		require.True(t, json.Valid([]byte(line)), "a log line not in JSON after the reload: %q", line)
		require.NotContains(t, line, `"level":"INFO"`, "an INFO line at level warn")
	}

	before = len(p.Output())
	write("/v3", "[log]\nlevel = \"info\"\n")
	require.NoError(t, p.Signal(syscall.SIGHUP))
	out = p.WaitOutput(t, "configuration reloaded", 10*time.Second)
	require.Regexp(t, `level=INFO msg="configuration reloaded" generation=3 changed="routers.api, log"\n`, out[before:])
}

// A logger derived before the switch, with attributes and a group, follows the handler put in
// force after it, and keeps its attributes.
func TestDerivedLoggersFollowTheSwitch(t *testing.T) {
	var out strings.Builder
	sw := newSwitchHandler(logHandler(config.Log{Level: "info"}, &out))
	derived := slog.New(sw).With("part", "health").WithGroup("g")
	derived.Debug("dropped")
	derived.Info("one", "k", 1)
	sw.set(logHandler(config.Log{Level: "debug", Format: "json"}, &out))
	derived.Debug("two", "k", 2)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	require.Contains(t, lines[0], `level=INFO msg=one part=health g.k=1`)
	require.Contains(t, lines[1], `"level":"DEBUG","msg":"two","part":"health","g":{"k":2}}`)
}
