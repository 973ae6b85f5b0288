package snapshot_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// compileServers compiles a configuration whose services s and t have the given servers
// lines, with passive health ejecting after 3 failures; extra follows t's load_balancer table.
func compileServers(t *testing.T, s, tt, extra string, prev *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	t.Helper()
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"
[services.s.load_balancer]
strategy = "least-connections"
servers = [%s]
passive_health = { consecutive_failures = 3, error_rate = 0 }
[services.t.load_balancer]
servers = [%s]
%s
`, s, tt, extra)
	cfg, err := config.LoadBytes("t.toml", []byte(toml))
	require.NoError(t, err)
	return snapshot.Compile(cfg, prev, 1)
}

// A recompile shares each kept server's live state with the configuration it replaces: the
// requests in flight (released into the same count whichever snapshot sent them) and passive
// health's judgement and ejection. A server is kept when its service and address are, whatever
// its weight or the form of its URL; the same server listed twice keeps a state per listing; a
// server new to a service, moved there from another included, starts afresh. A recompile that
// is refused changes nothing.
func TestRecompileSharesTheStateOfKeptServers(t *testing.T) {
	const x, y, z, w = "http://127.0.0.1:1001", "http://127.0.0.1:1002", "http://127.0.0.1:1003", "http://127.0.0.1:1004"
	prev, err := compileServers(t, fmt.Sprintf("{ url = %q }, { url = %q }, { url = %q }", x, y, x), fmt.Sprintf("{ url = %q }", z), "", nil)
	require.NoError(t, err)
	t.Cleanup(func() { prev.Retire(nil) })
	ps := prev.Services["s"]
	for i, n := range []int{1, 2, 3} { // x, y, the second x
		for range n {
			ps.Backends[i].LB.Acquire()
		}
	}
	prev.Services["t"].Backends[0].LB.Acquire()
	ps.Health.Observe(1, true)
	ps.Health.Observe(1, true) // y: one failure short of its ejection

	_, err = compileServers(t, fmt.Sprintf("{ url = %q }", y), fmt.Sprintf("{ url = %q }", z),
		fmt.Sprintf("[log]\naccess_log = %q", t.TempDir()+"/missing/access.log"), prev)
	require.Error(t, err, "an access log that cannot be opened refuses the configuration")
	require.Equal(t, []int64{1, 2, 3}, []int64{ps.Backends[0].LB.Active(), ps.Backends[1].LB.Active(), ps.Backends[2].LB.Active()},
		"a refused configuration changes nothing")

	next, err := compileServers(t,
		fmt.Sprintf("{ url = %q }, { url = %q, weight = 5 }, { url = %q }, { url = %q }, { url = %q }", w, y, x+"/", x, z),
		fmt.Sprintf("{ url = %q }", w), "", prev)
	require.NoError(t, err)
	t.Cleanup(func() { next.Retire(nil) })
	ns := next.Services["s"]
	active := func() []int64 {
		var out []int64
		for _, b := range ns.Backends {
			out = append(out, b.LB.Active())
		}
		return out
	}
	require.Equal(t, []int64{0, 2, 1, 3, 0}, active(), "w new, y reweighted, x twice in its order, z moved from t")

	ps.Backends[1].LB.Release()
	ns.Backends[1].LB.Acquire()
	ns.Backends[1].LB.Acquire()
	require.Equal(t, int64(3), ps.Backends[1].LB.Active(), "one count, whichever snapshot counts")
	require.Equal(t, int64(3), ns.Backends[1].LB.Active())

	require.False(t, ns.Backends[1].LB.Down())
	ns.Health.Observe(1, true) // y's third failure in a row, across the recompile
	require.True(t, ns.Backends[1].LB.Down(), "the third failure ejects y")
	require.True(t, ps.Backends[1].LB.Down(), "in both configurations")
	require.False(t, ns.Backends[2].LB.Down(), "x is not y")

	ps.Backends[0].LB.ConnectFailed()
	require.True(t, ns.Backends[2].LB.Ejected(), "a connect failure under the old configuration ejects x under the new")
	require.False(t, ns.Backends[3].LB.Ejected(), "but not x's second listing")
	require.False(t, ns.Backends[0].LB.SharesState(next.Services["t"].Backends[0].LB), "w of s is not w of t")
}

// Once replaced, a configuration's passive health goes on counting the outcomes of the
// requests it sent but ejects nobody: a server it still had company for may be the only one
// of the configuration in force, which keeps its last server in rotation.
func TestReplacedConfigurationEjectsNobody(t *testing.T) {
	const x, y, z = "http://127.0.0.1:1001", "http://127.0.0.1:1002", "http://127.0.0.1:1003"
	prev, err := compileServers(t, fmt.Sprintf("{ url = %q }, { url = %q }", x, y), fmt.Sprintf("{ url = %q }", z), "", nil)
	require.NoError(t, err)
	next, err := compileServers(t, fmt.Sprintf("{ url = %q }", x), fmt.Sprintf("{ url = %q }", z), "", prev)
	require.NoError(t, err)
	t.Cleanup(func() { next.Retire(nil) })
	prev.Retire(next)

	ps, ns := prev.Services["s"], next.Services["s"]
	for range 3 {
		ps.Health.Observe(0, true) // streams sent to x before the reload fail
	}
	require.False(t, ns.Backends[0].LB.Down(), "x is the only server of the configuration in force")
	ns.Health.Observe(0, true)
	require.False(t, ns.Backends[0].LB.Down(), "nor does the configuration in force eject its last server")
}

// A server is the same across a reload whichever equivalent form its URL is written in (RFC
// 3986 §6.2.2, §6.2.3): the scheme's and the host name's letter case, the default port
// written or not, a port's leading zeros, a trailing slash, and the text of an IP address
// (RFC 5952; an IPv4-mapped IPv6 address is the IPv4 address connected to). It keeps its
// requests in flight, its passive health and its identity (pipeline.Backend.Key) then. URLs
// that may name other servers are other servers: another scheme or port, a name with a
// trailing dot, a name and the address it resolves to.
func TestAServersIdentityIgnoresTheFormOfItsURL(t *testing.T) {
	for _, c := range []struct {
		before, after string
		same          bool
	}{
		{"http://llm.example:8000", "http://LLM.Example:8000", true},
		{"http://llm.example:8000", "HTTP://llm.example:8000", true},
		{"https://llm.example:8443", "HtTpS://LLM.EXAMPLE:8443/", true},
		{"http://llm.example", "http://llm.example:80", true},
		{"https://llm.example", "https://llm.example:443/", true},
		{"http://llm.example:8000", "http://llm.example:8000/", true},
		{"http://llm.example:80", "http://llm.example:0080", true},
		{"http://[::1]:8000", "http://[0:0::1]:8000", true},
		{"http://[::1]:8000", "http://[0000:0000:0000:0000:0000:0000:0000:0001]:8000", true},
		{"http://[2001:db8::a]:8000", "http://[2001:DB8:0::A]:8000", true},
		{"http://127.0.0.1:8000", "http://[::ffff:127.0.0.1]:8000", true},
		{"http://[::ffff:7f00:1]:8000", "http://127.0.0.1:8000", true},

		{"http://llm.example:8000", "https://llm.example:8000", false},
		{"http://llm.example", "http://llm.example:8080", false},
		{"http://llm.example:8000", "http://llm.example.:8000", false},
		{"http://localhost:8000", "http://127.0.0.1:8000", false},
		{"http://[::1]:8000", "http://[::2]:8000", false},
	} {
		t.Run(c.before+" then "+c.after, func(t *testing.T) {
			prev, err := compileServers(t, fmt.Sprintf("{ url = %q }, { url = \"http://127.0.0.1:1009\" }", c.before), `{ url = "http://127.0.0.1:1003" }`, "", nil)
			require.NoError(t, err)
			t.Cleanup(func() { prev.Retire(nil) })
			pb := prev.Services["s"].Backends[0]
			pb.LB.Acquire()
			prev.Services["s"].Health.Observe(0, true)

			next, err := compileServers(t, fmt.Sprintf("{ url = %q }, { url = \"http://127.0.0.1:1009\" }", c.after), `{ url = "http://127.0.0.1:1003" }`, "", prev)
			require.NoError(t, err)
			t.Cleanup(func() { next.Retire(nil) })
			nb := next.Services["s"].Backends[0]
			require.Equal(t, c.after, nb.URL, "shown as written")
			require.Equal(t, c.same, nb.LB.SharesState(pb.LB), "one balancer state")
			require.Equal(t, c.same, nb.Key == pb.Key, "one identity: %q, %q", pb.Key, nb.Key)
			want := int64(0)
			if c.same {
				want = 1
			}
			require.Equal(t, want, nb.LB.Active(), "the request in flight")
			next.Services["s"].Health.Observe(0, true)
			next.Services["s"].Health.Observe(0, true)
			require.Equal(t, c.same, nb.LB.Down(), "the failure before the reload counts towards the ejection")
		})
	}
}

// compileWorkerServers compiles a configuration whose model m uses service s, whose servers
// (the given servers lines) are observed.
func compileWorkerServers(t *testing.T, servers string, prev *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
models = true
[services.s.load_balancer]
servers = [%s]
[services.s.workers]
observe_interval = "1h"
observation_ttl = "2h"
[models.m.targets.t]
service = "s"
`, servers)
	cfg, err := config.LoadBytes("t.toml", []byte(toml))
	require.NoError(t, err)
	s, err := snapshot.Compile(cfg, prev, 1)
	require.NoError(t, err)
	t.Cleanup(func() { s.Retire(nil) })
	return s
}

// A server's worker observation (and what the poller knows of it) follows the server's
// identity, as its balancer state does: a reload that writes its URL another way, or lists it
// twice in other forms, keeps each listing's observation; a server the reload adds starts
// without one.
func TestWorkerObservationsFollowTheServersIdentity(t *testing.T) {
	prev := compileWorkerServers(t, `{ url = "http://llm.example:8000" }, { url = "http://[::1]:8001" }, { url = "http://llm.example:8000" }`, nil)
	next := compileWorkerServers(t, `{ url = "HTTP://LLM.Example:8000/" }, { url = "http://[0:0::1]:08001" }, { url = "http://llm.example:8000/" }, { url = "http://llm.example:8002" }`, prev)
	pg, ng := prev.Workers["s"], next.Workers["s"]
	require.Equal(t, 4, ng.Len())
	for i := range pg.Len() {
		require.Same(t, pg.Member(i).Worker, ng.Member(i).Worker, "server %d keeps its observation", i)
	}
	require.NotSame(t, pg.Member(0).Worker, ng.Member(2).Worker, "the second listing has its own")
	for i := range pg.Len() {
		require.NotSame(t, pg.Member(i).Worker, ng.Member(3).Worker, "the server added starts afresh")
	}
}
