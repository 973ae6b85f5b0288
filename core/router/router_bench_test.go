package router

import (
	"fmt"
	"testing"
)

// benchRoutes is a 20-route table shaped like a gateway config: hosts,
// OpenAI path prefixes, methods, a header canary and a query switch.
func benchRoutes() []Route {
	var rs []Route
	for i := 0; i < 8; i++ {
		rule := fmt.Sprintf("Host(`tenant%d.example.com`) && PathPrefix(`/v1`)", i)
		rs = append(rs, Route{Name: fmt.Sprintf("tenant%d", i), Rule: MustParse(rule), RuleText: rule, ID: i})
	}
	more := []string{
		"PathPrefix(`/v1/embeddings`) && Method(`POST`)",
		"Path(`/v1/models`) && Method(`GET`, `HEAD`)",
		"PathPrefix(`/v1`) && Header(`X-Canary`, `true`)",
		"PathPrefix(`/v1`) && HeaderRegexp(`User-Agent`, `^curl/`)",
		"PathPrefix(`/admin`) && !Header(`X-Internal`, `1`)",
		"Path(`/health`) || Path(`/ready`)",
		"PathPrefix(`/api/v2`) && Query(`beta`)",
		"Host(`legacy.example.com`) || Host(`old.example.com`)",
		"PathPrefix(`/static`) && Method(`GET`)",
		"PathPrefix(`/ws`) && Header(`Upgrade`, `websocket`)",
		"PathPrefix(`/v1/completions`) && Method(`POST`)",
		"PathPrefix(`/v1/chat/completions`) && Method(`POST`)",
	}
	for i, rule := range more {
		rs = append(rs, Route{Name: fmt.Sprintf("r%02d", i), Rule: MustParse(rule), RuleText: rule, ID: 100 + i})
	}
	return rs
}

func BenchmarkRuleMatch(b *testing.B) {
	r := MustParse("Host(`api.example.com`) && PathPrefix(`/v1`) && Method(`POST`)")
	req := newReq("POST", "api.example.com:8080", "/v1/chat/completions")
	b.ReportAllocs()
	for b.Loop() {
		if !r.Match(req) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkTableMatch20(b *testing.B) {
	tbl := NewTable(benchRoutes())
	if tbl.Len() != 20 {
		b.Fatalf("table has %d routes", tbl.Len())
	}
	cases := []struct {
		name string
		req  *testRequest
		want int
	}{
		// The chat route sits behind the tenant routes and the other
		// long rules, so most of the table is evaluated.
		{"chat", newReq("POST", "api.example.com", "/v1/chat/completions", "User-Agent", "OpenAI/Python 1.40.0", "Content-Type", "application/json"), 111},
		{"tenant", newReq("GET", "tenant5.example.com", "/v1/models"), 5},
		{"miss", newReq("GET", "nowhere.example.com", "/nothing", "User-Agent", "x"), -1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			id, ok := tbl.Match(c.req)
			if !ok {
				id = -1
			}
			if id != c.want {
				b.Fatalf("matched %d, want %d", id, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				tbl.Match(c.req)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	const rule = "Host(`api.example.com`) && (PathPrefix(`/v1`) || Header(`X-Canary`, `1`)) && !Method(`DELETE`)"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(rule); err != nil {
			b.Fatal(err)
		}
	}
}

// hostPathRoutes returns n routes with distinct Host && PathPrefix rules,
// shaped like a multi-tenant gateway. Route n-1 has the lowest priority, so
// a linear scan tries every other route before it.
func hostPathRoutes(n int) []Route {
	rs := make([]Route, n)
	for i := range rs {
		rule := fmt.Sprintf("Host(`tenant%05d.example.com`) && PathPrefix(`/v1/t%05d/`)", i, i)
		rs[i] = Route{Name: fmt.Sprintf("tenant%05d", i), Rule: MustParse(rule), RuleText: rule, Priority: n - i, ID: i}
	}
	return rs
}

// BenchmarkTableMatchScale matches the lowest-priority route of tables of
// growing size; the cost per match should not depend on the table size.
func BenchmarkTableMatchScale(b *testing.B) {
	for _, n := range []int{10, 1000, 5000, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			tbl := NewTable(hostPathRoutes(n))
			last := n - 1
			req := newReq("POST", fmt.Sprintf("tenant%05d.example.com:443", last), fmt.Sprintf("/v1/t%05d/chat/completions", last))
			if id, ok := tbl.Match(req); !ok || id != last {
				b.Fatalf("matched %d (ok=%v), want %d", id, ok, last)
			}
			b.ReportAllocs()
			for b.Loop() {
				tbl.Match(req)
			}
		})
	}
}
