package snapshot_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/middleware/breaker"
	"github.com/sluice-gw/sluice/core/middleware/ratelimit"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// max_idle_conns = 0 keeps no idle connection, as documented, rather than the pool's default.
func TestMaxIdleConnsZeroKeepsNone(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int
	}{
		{"max_idle_conns = 0", 0},
		{"max_idle_conns = 7", 7},
		{"", config.DefaultMaxIdleConns},
	} {
		toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\n[services.s.load_balancer]\nservers = [{ url = \"http://127.0.0.1:1\" }]\n%s\n", tc.line)
		cfg, err := config.LoadBytes("t.toml", []byte(toml))
		require.NoError(t, err)
		s, err := snapshot.Compile(cfg, nil, 1)
		require.NoError(t, err)
		require.Equal(t, tc.want, s.Services["s"].Backends[0].Pool.Options().MaxIdleConns, tc.line)
		s.Retire(nil)
	}
}

// The rate-limit and circuit-breaker middlewares are compiled once per configuration, shared
// by the routers that list them, and a recompile takes over their state: buckets while the
// options are unchanged, breakers by server always.
func TestMiddlewareStateSurvivesARecompile(t *testing.T) {
	compile := func(rate string, prev *snapshot.Snapshot) *snapshot.Snapshot {
		toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.a]
rule = "PathPrefix(`+"`/a`"+`)"
service = "s"
middlewares = ["rl", "cb"]
[routers.b]
rule = "PathPrefix(`+"`/b`"+`)"
service = "s"
middlewares = ["rl", "cb"]
[services.s.load_balancer]
servers = [{ url = "http://127.0.0.1:1" }]
[middlewares.rl]
type = "rate-limit"
rate = %s
[middlewares.cb]
type = "circuit-breaker"
`, rate)
		cfg, err := config.LoadBytes("t.toml", []byte(toml))
		require.NoError(t, err)
		s, err := snapshot.Compile(cfg, prev, 1)
		require.NoError(t, err)
		t.Cleanup(func() { s.Retire(nil) })
		return s
	}
	first := compile("60", nil)
	rl := first.Middleware("rl").(*ratelimit.Stage)
	cb := first.Middleware("cb").(*breaker.Stage)
	require.Len(t, cb.Breakers(), 1)

	same := compile("60", first)
	require.Same(t, rl.Limiter(), same.Middleware("rl").(*ratelimit.Stage).Limiter(), "unchanged options keep the buckets")
	require.Same(t, cb.Breakers()[0], same.Middleware("cb").(*breaker.Stage).Breakers()[0])

	changed := compile("120", same)
	require.NotSame(t, rl.Limiter(), changed.Middleware("rl").(*ratelimit.Stage).Limiter(), "a new rate makes new buckets (that hold what each key spent)")
	require.Same(t, cb.Breakers()[0], changed.Middleware("cb").(*breaker.Stage).Breakers()[0], "breakers are facts about backends")
}

// A jwt middleware's public key file is read when the configuration is compiled, and a bad
// one is reported at its key, as a certificate is.
func TestJWTPublicKeyFileIsCheckedAtCompile(t *testing.T) {
	toml := "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\nmiddlewares = [\"sso\"]\n[services.s.load_balancer]\nservers = [{ url = \"http://127.0.0.1:1\" }]\n[middlewares.sso]\ntype = \"jwt\"\npublic_key_file = \"/nonexistent/idp.pem\"\n"
	cfg, err := config.LoadBytes("t.toml", []byte(toml))
	require.NoError(t, err)
	_, err = snapshot.Compile(cfg, nil, 1)
	require.EqualError(t, err, "t.toml:11:19: middlewares.sso.public_key_file: open /nonexistent/idp.pem: no such file or directory")
}
