package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// breakerConfig is a gateway whose service "up" lists servers (URLs as written) behind the
// circuit-breaker middleware "cb" with the given failure_threshold and cooldown_secs.
func breakerConfig(threshold int, cooldown string, servers ...string) string {
	var list []string
	for _, s := range servers {
		list = append(list, fmt.Sprintf("{ url = %q }", s))
	}
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = "gnet"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["cb"]
[services.up.load_balancer]
servers = [%s]
[middlewares.cb]
type = "circuit-breaker"
failure_threshold = %d
cooldown_secs = %s
`, strings.Join(list, ", "), threshold, cooldown)
}

// refusedOpen asserts that a request to base is answered by the gateway's breaker (503
// circuit_open) and returns its Retry-After in seconds.
func refusedOpen(t *testing.T, base, why string) int {
	t.Helper()
	resp, err := mwClient.Get(base + "/v1/models")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", why, body)
	require.Contains(t, string(body), "circuit_open", why)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, why)
	return ra
}

// A breaker is the server's, not its URL's: one opened under http://127.0.0.1:PORT is still
// open after a reload that writes the server http://127.0.0.1:PORT/ (and back), the request
// that follows goes nowhere near the failing upstream, and the cooldown the reload set is
// the one the open breaker runs on.
func TestBreakerStaysOpenAcrossAReloadThatRewritesTheServerURL(t *testing.T) {
	up := serveCounting(t)
	up.fail.Store(500)
	plain := "http://" + up.addr()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, base := startHealthGateway(t, path, breakerConfig(2, "600", plain))
	for range 2 {
		require.Equal(t, 500, get(t, base+"/v1/models").StatusCode, "the upstream's own answer")
	}
	waitFor(t, func() bool { return breakerState(t, "cb", plain) == 1 })
	ra := refusedOpen(t, base, "open before the reload")
	require.True(t, ra > 590 && ra <= 600, "Retry-After %d: the rest of the 600 s cooldown", ra)

	for _, step := range []struct{ name, url, cooldown string }{
		{"a trailing slash", plain + "/", "300"},
		{"the form it opened under", plain, "120"},
	} {
		require.NoError(t, os.WriteFile(path, []byte(breakerConfig(3, step.cooldown, step.url)), 0o644))
		require.NoError(t, g.Reload(), step.name)
		ra := refusedOpen(t, base, step.name)
		require.Equal(t, 1, breakerState(t, "cb", step.url), "%s: the gauge shows the breaker open", step.name)
		cooldown, _ := strconv.Atoi(step.cooldown)
		require.True(t, ra > cooldown-10 && ra <= cooldown, "%s: Retry-After %d: the rest of the new %d s cooldown", step.name, ra, cooldown)
	}
	require.Equal(t, int32(2), up.hits.Load(), "no request reached the failing upstream after its breaker opened")
}

// A breaker is the server's whatever letter case its URL's scheme and host are written in
// (they are case-insensitive, RFC 3986 §6.2.2.1) and however many leading zeros its port
// has: one opened under http://localhost:PORT is still open after reloads that write the
// server http://LocalHost:PORT and HTTP://LOCALHOST:0PORT/, and no request reaches the
// failing upstream.
func TestBreakerStaysOpenAcrossAReloadThatChangesTheHostsLetterCase(t *testing.T) {
	up := serveCounting(t)
	up.fail.Store(500)
	_, port, err := net.SplitHostPort(up.addr())
	require.NoError(t, err)
	lower := "http://localhost:" + port
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, base := startHealthGateway(t, path, breakerConfig(2, "600", lower))
	for range 2 {
		require.Equal(t, 500, get(t, base+"/v1/models").StatusCode, "the upstream's own answer")
	}
	waitFor(t, func() bool { return breakerState(t, "cb", lower) == 1 })
	refusedOpen(t, base, "open before the reload")

	for _, u := range []string{"http://LocalHost:" + port, "HTTP://LOCALHOST:0" + port + "/", lower} {
		require.NoError(t, os.WriteFile(path, []byte(breakerConfig(2, "600", u)), 0o644))
		require.NoError(t, g.Reload(), u)
		refusedOpen(t, base, u)
		require.Equal(t, 1, breakerState(t, "cb", u), "%s: the gauge shows the breaker open", u)
	}
	require.Equal(t, int32(2), up.hits.Load(), "no request reached the failing upstream after its breaker opened")
}

// A server listed twice in a service, in two equivalent forms, is two backends with a
// breaker each, as it has a balancer state each: the listing that fails opens while the other
// still takes requests. Across a reload each listing keeps its breaker, matched in the order
// they are listed whatever form each is written in.
func TestBreakerOfAServerListedTwice(t *testing.T) {
	up := serveCounting(t)
	up.fail.Store(500)
	plain := "http://" + up.addr()
	slashed := plain + "/"
	path := filepath.Join(t.TempDir(), "sluice.toml")
	g, base := startHealthGateway(t, path, breakerConfig(2, "600", plain, slashed))

	// Round-robin alternates the listings: the third failure is the first listing's second.
	for range 3 {
		require.Equal(t, 500, get(t, base+"/v1/models").StatusCode)
	}
	waitFor(t, func() bool { return breakerState(t, "cb", plain) == 1 })
	require.Equal(t, 0, breakerState(t, "cb", slashed), "the other listing has one failure")

	// Their forms swapped: the first listing, open, is now written with the slash, and the
	// second, one failure down, without.
	require.NoError(t, os.WriteFile(path, []byte(breakerConfig(2, "600", slashed, plain)), 0o644))
	require.NoError(t, g.Reload())
	require.Equal(t, 1, breakerState(t, "cb", slashed), "the first listing's breaker is still open")
	require.Equal(t, 0, breakerState(t, "cb", plain), "the second listing's is closed")
	require.Equal(t, 500, get(t, base+"/v1/models").StatusCode, "the second listing still takes requests")
	waitFor(t, func() bool { return breakerState(t, "cb", plain) == 1 })
	hits := up.hits.Load()
	require.Equal(t, int32(4), hits, "its failure before the reload counted: a second one opened it")
	refusedOpen(t, base, "both listings open")
	require.Equal(t, hits, up.hits.Load())
}
