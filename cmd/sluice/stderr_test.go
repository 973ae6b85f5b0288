package main_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// A standard error nobody reads (a log pipe whose reader hangs) fills once its pipe buffer
// is full; the gateway's own log must not then hold up what logs: SIGTERM still drains and
// the process exits, losing log lines rather than waiting for the reader.
func TestDrainWithAStandardErrorNobodyReads(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	up, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer up.Close()
	go func() { // answers 200 "ok" to every request, keep-alive
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	port, admin := testenv.FreePort(t), testenv.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
[routers.all]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = "127.0.0.1:%d"
[log]
level = "debug"
access_log = "stderr"
`, port, up.Addr(), admin)), 0o644))

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Stderr = w
	require.NoError(t, cmd.Start())
	w.Close() // only the child holds the writing end; nobody reads r
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	// Requests until the access log lines have filled the pipe (64 KiB on Linux) many times.
	base := fmt.Sprintf("http://127.0.0.1:%d/x", port)
	deadline := time.Now().Add(10 * time.Second)
	served := 0
	for served < 800 && time.Now().Before(deadline) {
		resp, err := http.Get(base)
		if err != nil {
			continue // not listening yet
		}
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		served++
	}
	require.Equal(t, 800, served, "requests answered while standard error was full")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
	case <-time.After(15 * time.Second):
		t.Fatal("sluice did not exit after SIGTERM while its standard error was full")
	}
}
