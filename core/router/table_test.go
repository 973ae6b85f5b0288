package router

import (
	"fmt"
	"testing"
)

func route(name, rule string, prio, id int) Route {
	return Route{Name: name, Rule: MustParse(rule), RuleText: rule, Priority: prio, ID: id}
}

func TestTableOrder(t *testing.T) {
	tbl := NewTable([]Route{
		route("catch-all", "PathPrefix(`/`)", 0, 1),
		route("api", "PathPrefix(`/v1`)", 0, 2),
		route("chat", "PathPrefix(`/v1`) && Method(`POST`)", 0, 3),
		route("pinned", "PathPrefix(`/`)", 1000, 4),
		route("low", "Path(`/v1/models`)", -1, 5),
		route("b-tie", "Path(`/tie`)", 7, 6),
		route("a-tie", "Path(`/tie`)", 7, 7),
		{Name: "nil-rule", Priority: 5000, ID: 8},
	})
	var order []string
	for _, r := range tbl.Routes() {
		order = append(order, r.Name)
	}
	want := "[nil-rule pinned chat api catch-all a-tie b-tie low]"
	if got := fmt.Sprint(order); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	if tbl.Len() != 8 {
		t.Fatalf("Len = %d", tbl.Len())
	}
	if id, ok := tbl.Match(newReq("GET", "a", "/x")); !ok || id != 4 {
		t.Fatalf("pinned route: id=%d ok=%v", id, ok)
	}

	tbl = NewTable([]Route{
		route("catch-all", "PathPrefix(`/`)", 0, 1),
		route("api", "PathPrefix(`/v1`)", 0, 2),
		route("chat", "PathPrefix(`/v1`) && Method(`POST`)", 0, 3),
		route("models", "Path(`/v1/models`)", -1, 5),
	})
	for _, c := range []struct {
		method, path string
		id           int
	}{
		{"POST", "/v1/chat/completions", 3},
		{"GET", "/v1/models", 2}, // negative priority loses to "api"
		{"GET", "/", 1},
	} {
		id, ok := tbl.Match(newReq(c.method, "a", c.path))
		if !ok || id != c.id {
			t.Errorf("%s %s: id=%d ok=%v, want %d", c.method, c.path, id, ok, c.id)
		}
	}
	empty := NewTable(nil)
	if _, ok := empty.Match(newReq("GET", "a", "/")); ok {
		t.Fatal("empty table matched")
	}
}

func TestTableDoesNotAliasInput(t *testing.T) {
	in := []Route{route("a", "Path(`/a`)", 0, 1), route("b", "Path(`/bb`)", 0, 2)}
	tbl := NewTable(in)
	in[0].ID = 99
	if id, _ := tbl.Match(newReq("GET", "h", "/a")); id != 1 {
		t.Fatalf("table aliased caller slice: id %d", id)
	}
}

// TestTableConcurrentMatch runs matches from many goroutines on one table
// (run with -race: a Table and its Rules are read-only after NewTable).
func TestTableConcurrentMatch(t *testing.T) {
	tbl := NewTable(benchRoutes())
	reqs := []*testRequest{
		newReq("POST", "api.example.com", "/v1/chat/completions", "User-Agent", "curl/8.0"),
		newReq("GET", "tenant3.example.com", "/v1/models"),
		newReq("GET", "x", "/health"),
		newReq("GET", "x", "/nothing"),
	}
	want := make([]int, len(reqs))
	for i, r := range reqs {
		id, ok := tbl.Match(r)
		if !ok {
			id = -1
		}
		want[i] = id
	}
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for n := 0; n < 2000; n++ {
				i := (n + g) % len(reqs)
				id, ok := tbl.Match(reqs[i])
				if !ok {
					id = -1
				}
				if id != want[i] {
					done <- fmt.Errorf("request %d matched %d, want %d", i, id, want[i])
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
