package router

import "sort"

// Route is one router entry of an entrypoint's route table.
type Route struct {
	// Name is the router name from the config ([routers.<name>]); it breaks
	// priority ties (ascending byte order).
	Name string
	// Rule is the compiled rule. A route with a nil Rule never matches.
	Rule *Rule
	// RuleText is the rule source; its length in bytes is the default
	// priority.
	RuleText string
	// Priority orders routes, higher first. 0 means unset: the route then
	// uses len(RuleText), so longer (more specific) rules are tried first,
	// as in Traefik. Negative priorities sort after every default one.
	Priority int
	// ID is the caller's handle for the route, returned by Table.Match.
	ID int
}

// EffectivePriority returns Priority, or len(RuleText) when Priority is 0.
func (r *Route) EffectivePriority() int {
	if r.Priority != 0 {
		return r.Priority
	}
	return len(r.RuleText)
}

// Table is an ordered, immutable route table. It is safe for concurrent
// use; a config reload builds a new Table and swaps it in.
type Table struct {
	routes []Route
	index  routeIndex // positions in routes, filed by required host and path
}

// NewTable copies routes and orders them: higher EffectivePriority first,
// ties by ascending Name, then by ascending ID.
func NewTable(routes []Route) *Table {
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
	return &Table{routes: rs, index: buildIndex(rs)}
}

// Match returns the ID of the first route in table order whose rule matches
// req, and ok=false when none does. It evaluates only the routes the index
// cannot rule out, so its cost follows the number of routes that share the
// request's host or path, not the table size. It does not allocate.
func (t *Table) Match(req Request) (id int, ok bool) {
	pos := t.matchIndexed(req)
	if pos == len(t.routes) {
		return 0, false
	}
	return t.routes[pos].ID, true
}

// Len returns the number of routes in the table.
func (t *Table) Len() int { return len(t.routes) }

// Routes returns a copy of the routes in match order (for the admin API).
func (t *Table) Routes() []Route { return append([]Route(nil), t.routes...) }
