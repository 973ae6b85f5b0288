package router

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// linearMatch is the reference Table.Match: order the routes as NewTable
// documents, then return the first whose rule matches.
func linearMatch(routes []Route, req Request) (int, bool) {
	rs := append([]Route(nil), routes...)
	sort.SliceStable(rs, func(i, j int) bool {
		pi, pj := rs[i].EffectivePriority(), rs[j].EffectivePriority()
		if pi != pj {
			return pi > pj
		}
		if rs[i].Name != rs[j].Name {
			return rs[i].Name < rs[j].Name
		}
		return rs[i].ID < rs[j].ID
	})
	for _, r := range rs {
		if r.Rule != nil && r.Rule.Match(req) {
			return r.ID, true
		}
	}
	return 0, false
}

// edgeHost is the longest host the index keys; longHost is longer, so
// routes requiring it are not keyed by host.
var (
	edgeHost = strings.Repeat("e", maxHostKey-len(".com")) + ".com"
	longHost = strings.Repeat("l", maxHostKey+1-len(".com")) + ".com"
)

// ruleGen generates random rules over a small vocabulary, so that routes
// and requests overlap often.
type ruleGen struct{ rnd *rand.Rand }

var (
	genHosts    = []string{"a.com", "A.com", "b.example.com", "API.Example.COM", "x.", "[::1]", "localhost", "Ä.com", "ä.com", edgeHost, longHost}
	genPaths    = []string{"/", "/a", "/a/", "/a/b", "/ab", "/v1", "/v1/chat", "/v10", "/b", "/A"}
	genMethods  = []string{"GET", "POST"}
	genReqHosts = []string{"", "c.com", "[::1]:9000", "[::1", "a.com:", ":80", "a.com..", "."}
	genReqPaths = []string{"", "/a/b/c", "/v1/chat/completions", "/v", "*", "/abc", "/b/"}
)

func (g ruleGen) pick(vocab []string) string { return vocab[g.rnd.IntN(len(vocab))] }

// args renders one to three distinct-or-not arguments from vocab.
func (g ruleGen) args(vocab []string) string {
	n := 1 + g.rnd.IntN(3)
	as := make([]string, n)
	for i := range as {
		as[i] = "`" + g.pick(vocab) + "`"
	}
	return strings.Join(as, ", ")
}

func (g ruleGen) atom() string {
	switch g.rnd.IntN(10) {
	case 0, 1:
		return "Host(" + g.args(genHosts) + ")"
	case 2:
		return "Path(" + g.args(genPaths) + ")"
	case 3, 4:
		return "PathPrefix(" + g.args(genPaths) + ")"
	case 5:
		return "Method(`" + g.pick(genMethods) + "`)"
	case 6:
		return "Header(`X-A`, `1`)"
	case 7:
		return "HostRegexp(`^a\\.`)"
	case 8:
		return "PathRegexp(`^/a`)"
	default:
		return "Query(`q`)"
	}
}

// expr renders a random expression; compound operands are parenthesised so
// the text parses to the generated shape.
func (g ruleGen) expr(depth int) string {
	if depth == 0 || g.rnd.IntN(10) < 4 {
		return g.atom()
	}
	switch g.rnd.IntN(3) {
	case 0:
		return "!(" + g.expr(depth-1) + ")"
	case 1:
		return "(" + g.expr(depth-1) + ") && (" + g.expr(depth-1) + ")"
	default:
		return "(" + g.expr(depth-1) + ") || (" + g.expr(depth-1) + ")"
	}
}

// rule favours the Host && PathPrefix shape of real configs, sometimes with
// more conditions or as one side of an Or.
func (g ruleGen) rule() string {
	switch g.rnd.IntN(6) {
	case 0, 1:
		return "Host(" + g.args(genHosts) + ") && PathPrefix(" + g.args(genPaths) + ")"
	case 2:
		return "Host(" + g.args(genHosts) + ") && " + g.atom() + " && " + g.atom()
	case 3:
		return g.atom() + " && " + g.expr(2)
	case 4:
		return g.expr(2) + " || " + g.atom()
	default:
		return g.expr(3)
	}
}

func (g ruleGen) routes() []Route {
	n := 1 + g.rnd.IntN(40)
	ids := g.rnd.Perm(n)
	rs := make([]Route, n)
	for i := range rs {
		rs[i] = Route{Name: g.pick([]string{"", "a", "b", "c"}), Priority: g.pick2(0, 0, 1, 5, 100, -1), ID: ids[i]}
		if g.rnd.IntN(30) == 0 {
			continue // nil rule
		}
		rs[i].RuleText = g.rule()
		rs[i].Rule = MustParse(rs[i].RuleText)
	}
	return rs
}

func (g ruleGen) pick2(vs ...int) int { return vs[g.rnd.IntN(len(vs))] }

// host renders a request host: a rule host or a stray one, with random
// letter case, port and trailing dot.
func (g ruleGen) host() string {
	if g.rnd.IntN(5) == 0 {
		return g.pick(genReqHosts)
	}
	b := []byte(g.pick(genHosts))
	for i, c := range b {
		if isLetter(c) && g.rnd.IntN(2) == 0 {
			b[i] = c ^ 0x20
		}
	}
	h := string(b)
	if g.rnd.IntN(4) == 0 {
		h += "."
	}
	if g.rnd.IntN(3) == 0 {
		h += ":8080"
	}
	return h
}

func (g ruleGen) request() *testRequest {
	path := g.pick(genPaths)
	if g.rnd.IntN(3) == 0 {
		path = g.pick(genReqPaths)
	}
	if g.rnd.IntN(3) == 0 {
		path += "?q=1"
	}
	var headers []string
	if g.rnd.IntN(2) == 0 {
		headers = []string{"X-A", "1"}
	}
	return newReq(g.pick(genMethods), g.host(), path, headers...)
}

// TestTableMatchEqualsLinearScan checks the indexed Match against a plain
// priority-ordered scan on random tables and requests.
func TestTableMatchEqualsLinearScan(t *testing.T) {
	for seed := uint64(0); seed < 400; seed++ {
		g := ruleGen{rand.New(rand.NewPCG(seed, 1))}
		routes := g.routes()
		tbl := NewTable(routes)
		for range 60 {
			req := g.request()
			wantID, wantOK := linearMatch(routes, req)
			id, ok := tbl.Match(req)
			if id != wantID || ok != wantOK {
				var b strings.Builder
				for _, r := range tbl.Routes() {
					fmt.Fprintf(&b, "\n  id=%d prio=%d name=%q %s", r.ID, r.EffectivePriority(), r.Name, r.RuleText)
				}
				t.Fatalf("seed %d: %s %q %q: Match = %d,%v; linear scan = %d,%v; table:%s",
					seed, req.method, req.host, req.path, id, ok, wantID, wantOK, b.String())
			}
		}
	}
}

// TestTableIndexPriority checks that routes found through the host index,
// the path index and the residual list keep their table order among each
// other.
func TestTableIndexPriority(t *testing.T) {
	routes := []Route{
		route("canary", "Header(`X-Canary`, `1`)", 100, 1),                         // residual, above all
		route("tenant-chat", "Host(`a.com`) && PathPrefix(`/v1/chat`)", 90, 2),     // host + prefix
		route("models", "Path(`/v1/models`)", 80, 3),                               // exact path only
		route("not-b", "!Host(`b.com`) && Method(`DELETE`)", 70, 4),                // residual (negation)
		route("tenant", "Host(`a.com`, `c.com`) && PathPrefix(`/v1`)", 60, 5),      // two hosts
		route("either", "Host(`d.com`) || Path(`/either`)", 55, 6),                 // residual (mixed Or)
		route("hosts", "Host(`e.com`) || (Host(`f.com`) && Method(`GET`))", 54, 7), // Or of hosts
		route("api", "PathPrefix(`/v1`)", 50, 8),                                   // prefix only
		route("host-only", "Host(`a.com`)", 40, 9),                                 // host, any path
		route("regexp", "HostRegexp(`^.+\\.com$`) && Path(`/re`)", 30, 10),         // path only
		route("tie-b", "Host(`t.com`) && Path(`/tie`)", 20, 12),                    // ties: name, then ID
		route("tie-a", "Path(`/tie`)", 20, 13),                                     // path only
		route("tie-a", "Host(`t.com`) && Path(`/tie`)", 20, 11),                    // host + exact path
		route("catch-all", "PathPrefix(`/`)", 10, 14),                              // prefix "/"
		route("last", "Method(`GET`)", -10, 16),                                    // residual, below all
		{Name: "nil", Priority: 1000, ID: 17},                                      // never matches
	}
	tbl := NewTable(routes)

	cases := []struct {
		name         string
		method, host string
		target       string
		headers      []string
		want         int
	}{
		{"residual above host route", "POST", "a.com", "/v1/chat/completions", []string{"X-Canary", "1"}, 1},
		{"host and prefix", "POST", "a.com", "/v1/chat/completions", nil, 2},
		{"host case, port, trailing dot", "POST", "A.CoM.:8443", "/v1/chat", nil, 2},
		{"exact path above second host", "POST", "c.com", "/v1/models", nil, 3},
		{"exact path is not a prefix", "POST", "c.com", "/v1/models/x", nil, 5},
		{"negated host residual", "DELETE", "x.com", "/v1/x", nil, 4},
		{"negated host excluded", "DELETE", "b.com", "/v1/x", nil, 8},
		{"mixed Or by host", "POST", "d.com", "/zzz", nil, 6},
		{"mixed Or by path", "POST", "zzz", "/either", nil, 6},
		{"Or of hosts, first", "POST", "e.com", "/", nil, 7},
		{"Or of hosts, second", "GET", "f.com", "/", nil, 7},
		{"Or of hosts, second fails", "POST", "f.com", "/", nil, 14},
		{"prefix for other host", "POST", "z.com", "/v1/chat", nil, 8},
		{"host without path", "POST", "a.com", "/other", nil, 9},
		{"regexp with path", "POST", "r.com", "/re", nil, 10},
		{"tie by name then ID", "POST", "t.com", "/tie", nil, 11},
		{"tie, other host: path-only route", "POST", "u.com", "/tie", nil, 13},
		{"catch-all", "POST", "", "/x", nil, 14},
		{"residual below all", "GET", "", "nothing", nil, 16},
		{"no match", "POST", "", "nothing", nil, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := newReq(c.method, c.host, c.target, c.headers...)
			id, ok := tbl.Match(req)
			if !ok {
				id = -1
			}
			require.Equal(t, c.want, id)
			wantID, wantOK := linearMatch(routes, req)
			require.Equal(t, wantOK, ok)
			if ok {
				require.Equal(t, wantID, id)
			}
		})
	}
}

// TestRequiredHostsAndPaths pins down which rules the index can file by
// host and by path; anything else is tried on every request.
func TestRequiredHostsAndPaths(t *testing.T) {
	cases := []struct {
		rule            string
		hosts           string
		exact, prefixes string
	}{
		{"Host(`A.com`, `b.com.`) && PathPrefix(`/v1`)", "[a.com b.com]", "[]", "[/v1]"},
		{"PathPrefix(`/v1`) && Host(`a.com`) && Path(`/v1/x`)", "[a.com]", "[]", "[/v1]"},
		{"Path(`/a`, `/b`) && Method(`GET`)", "[]", "[/a /b]", "[]"},
		{"Path(`/a`) || PathPrefix(`/b`)", "[]", "[/a]", "[/b]"},
		{"Host(`a`) || Host(`b`) && Header(`K`, `v`)", "[a b]", "[]", "[]"},
		{"(Host(`a`) && Path(`/x`)) || (Host(`b`) && PathPrefix(`/y`))", "[a b]", "[/x]", "[/y]"},
		{"Host(`a`) || Path(`/x`)", "[]", "[]", "[]"},
		{"!Host(`a`) && !Path(`/x`)", "[]", "[]", "[]"},
		{"!(Host(`a`) && Path(`/x`))", "[]", "[]", "[]"},
		{"HostRegexp(`^a$`) && PathRegexp(`^/x`)", "[]", "[]", "[]"},
		{"Header(`K`, `v`) || Query(`q`)", "[]", "[]", "[]"},
		{"Method(`GET`) && (Header(`K`, `v`) || Host(`a`))", "[]", "[]", "[]"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			root := MustParse(c.rule).root
			exact, prefixes := requiredPaths(root)
			require.Equal(t, c.hosts, fmt.Sprintf("%s", requiredHosts(root)))
			require.Equal(t, c.exact, fmt.Sprintf("%s", exact))
			require.Equal(t, c.prefixes, fmt.Sprintf("%s", prefixes))
		})
	}
}

// TestTableLongHost checks hosts longer than an index key: such routes are
// tried on every request, and long request hosts still reach them.
func TestTableLongHost(t *testing.T) {
	tbl := NewTable([]Route{
		route("long", "Host(`"+longHost+"`) && PathPrefix(`/`)", 10, 1),
		route("short", "Host(`a.com`)", 5, 2),
	})
	id, ok := tbl.Match(newReq("GET", strings.ToUpper(longHost)+":80", "/x"))
	require.True(t, ok)
	require.Equal(t, 1, id)
	id, ok = tbl.Match(newReq("GET", "a.com", "/x"))
	require.True(t, ok)
	require.Equal(t, 2, id)
	_, ok = tbl.Match(newReq("GET", longHost+"x", "/x"))
	require.False(t, ok)
}

// TestPrefixTree checks that walking the radix tree along a path reaches
// exactly the routes filed under a prefix of the path or under the path
// itself, across node splits.
func TestPrefixTree(t *testing.T) {
	var pi pathIndex
	for pos, p := range []string{"/v1/chat", "/v1/models", "/v1", "/v10", "/", "/v1/chat"} {
		pi.add(pos, nil, [][]byte{[]byte(p)})
	}
	pi.add(6, [][]byte{[]byte("/v1/chat")}, nil)
	pi.add(7, [][]byte{[]byte("/v1/chat/")}, nil)

	// With only the route at pos able to match, matchPaths returns pos
	// exactly when the walk reaches it.
	yes, no := MustParse("Method(`GET`)"), MustParse("Method(`NONE`)")
	tbl := &Table{routes: make([]Route, 8)}
	reached := func(path string) []int {
		var got []int
		for pos := range tbl.routes {
			for i := range tbl.routes {
				tbl.routes[i].Rule = no
			}
			tbl.routes[pos].Rule = yes
			if tbl.matchPaths(&pi, newReq("GET", "", "/"), []byte(path), len(tbl.routes)) == pos {
				got = append(got, pos)
			}
		}
		return got
	}
	cases := []struct {
		path string
		want []int
	}{
		{"/v1/chat", []int{0, 2, 4, 5, 6}},
		{"/v1/chat/", []int{0, 2, 4, 5, 7}},
		{"/v1/chat/x", []int{0, 2, 4, 5}},
		{"/v1/models", []int{1, 2, 4}},
		{"/v10", []int{2, 3, 4}},
		{"/v1/c", []int{2, 4}},
		{"/v", []int{4}},
		{"", nil},
		{"v1", nil},
	}
	for _, c := range cases {
		require.Equal(t, c.want, reached(c.path), "path %q", c.path)
	}
}

func TestTableMatchDoesNotAllocate(t *testing.T) {
	tbl := NewTable(append(hostPathRoutes(1000), benchRoutes()...))
	reqs := []*testRequest{
		newReq("POST", "TENANT00999.example.com:443", "/v1/t00999/chat/completions"),
		newReq("POST", "api.example.com", "/v1/chat/completions", "User-Agent", "curl/8"),
		newReq("GET", strings.Repeat("h", 400), "/nothing"),
	}
	for _, req := range reqs {
		tbl.Match(req)
		require.Zero(t, testing.AllocsPerRun(200, func() { tbl.Match(req) }))
	}
}
