package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

const seed003 = "../../configs/seed-003-ollama.toml"

// The seed document's gateway.hcl, in TOML, loads as written; pointed at a simulator, certificates
// and free ports, it serves: a JWT-authenticated stream over TLS arrives event by event, a
// request without a token gets 401, and the Ollama health check keeps the backend in rotation.
func TestSeed003ConfigRunsAgainstTheSimulator(t *testing.T) {
	const secret = "a-seed-003-secret-of-at-least-32-bytes!"
	t.Setenv("JWT_SECRET", secret)
	_, err := config.Load(seed003)
	require.NoError(t, err, "the example validates as written")

	sim := startSimulator(t)
	dir := t.TempDir()
	certFile, keyFile, roots := selfSigned(t, dir)
	raw, err := os.ReadFile(seed003)
	require.NoError(t, err)
	doc := strings.NewReplacer(
		`"0.0.0.0:8080"`, `"127.0.0.1:0"`,
		`"0.0.0.0:443"`, `"127.0.0.1:0"`,
		`http://127.0.0.1:11434`, "http://"+sim,
		`http://127.0.0.1:11435`, "http://"+sim,
		`/etc/certs/fullchain.pem`, certFile,
		`/etc/certs/privkey.pem`, keyFile,
	).Replace(string(raw)) + "\n[admin]\naddress = \"\"\n"
	path := filepath.Join(dir, "seed-003.toml")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
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
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	base := "https://" + g.Addr("websecure")
	token := hs256(t, []byte(secret), time.Now().Add(time.Hour))

	chat := func(auth string) *http.Response {
		req, err := http.NewRequest("POST", base+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"Hello"}]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		return resp
	}

	resp := chat(token)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
	require.NotEmpty(t, resp.Header.Get("RateLimit-Limit"), "the rate limit counted it")
	r := bufio.NewReader(resp.Body)
	events, done := 0, false
	for !done {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		switch {
		case line == "data: [DONE]\n":
			done = true
		case strings.HasPrefix(line, "data: {"):
			events++
		}
	}
	require.GreaterOrEqual(t, events, 16, "one event per token")

	resp = chat("")
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")

	// The Ollama health check probes the simulator's /api/version, which answers: the backend
	// stays in rotation.
	probes := `sluice_health_checks_total{service="ollama",backend="http://` + sim + `",result="ok"}`
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, processSeries(c, probes)) }, 10*time.Second, time.Millisecond)
	require.False(t, g.Snapshot().Services["ollama"].Backends[0].LB.Down())
}
