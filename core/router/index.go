package router

import "strings"

// maxHostKey is the longest host the index keys routes by. DNS names are at
// most 253 bytes, so real hosts fit; a route that requires a longer host is
// indexed as if it had no host requirement, which lets Match skip the host
// map for longer request hosts instead of lower-casing them.
const maxHostKey = 255

// routeIndex narrows Table.Match to the routes that can match a request.
// Each route is filed under a necessary condition of its rule (required
// hosts and/or required paths, see requiredHosts and requiredPaths); routes
// with neither are filed under "any host, any path" and always tried. Every
// list holds table positions in ascending order, so the first route that
// matches in a list is the best of that list.
type routeIndex struct {
	byHost  map[string]*pathIndex // key: required host, lower case, no port or trailing "."
	anyHost pathIndex             // routes that require no particular host
}

// pathIndex files the routes of one host (or of any host) by required path.
type pathIndex struct {
	anyPath []int      // routes that require no particular path
	paths   prefixNode // radix tree root over required paths and path prefixes
}

// prefixNode is a node of a radix tree over path bytes. The key of a node
// is the concatenation of the labels from the root down to it.
type prefixNode struct {
	label    string        // bytes on the edge from the parent; "" for the root
	prefix   []int         // routes that require a path starting with the key
	exact    []int         // routes that require a path equal to the key
	keys     string        // first label byte of each child, same order as children
	children []*prefixNode // no two children's labels share a first byte
}

// buildIndex files the routes of a table, given in match order.
func buildIndex(routes []Route) routeIndex {
	ix := routeIndex{byHost: make(map[string]*pathIndex)}
	for pos := range routes {
		r := routes[pos].Rule
		if r == nil {
			continue // never matches
		}
		exact, prefixes := requiredPaths(r.root)
		hosts := requiredHosts(r.root)
		if !indexableHosts(hosts) {
			ix.anyHost.add(pos, exact, prefixes)
			continue
		}
		for _, h := range hosts {
			ix.host(string(h)).add(pos, exact, prefixes)
		}
	}
	return ix
}

// indexableHosts reports whether a route can be keyed by hosts: there is a
// host requirement and every host fits a lookup key.
func indexableHosts(hosts [][]byte) bool {
	if hosts == nil {
		return false
	}
	for _, h := range hosts {
		if len(h) > maxHostKey {
			return false
		}
	}
	return true
}

func (ix *routeIndex) host(h string) *pathIndex {
	pi := ix.byHost[h]
	if pi == nil {
		pi = &pathIndex{}
		ix.byHost[h] = pi
	}
	return pi
}

// add files the route at pos under each required exact path and prefix, or
// under anyPath when it has neither.
func (pi *pathIndex) add(pos int, exact, prefixes [][]byte) {
	if exact == nil && prefixes == nil {
		pi.anyPath = appendPos(pi.anyPath, pos)
		return
	}
	for _, p := range exact {
		n := pi.paths.insert(string(p))
		n.exact = appendPos(n.exact, pos)
	}
	for _, p := range prefixes {
		n := pi.paths.insert(string(p))
		n.prefix = appendPos(n.prefix, pos)
	}
}

// appendPos adds pos to a list built in ascending position order; a route
// that files the same key twice (Host(`a`, `A`)) is listed once.
func appendPos(list []int, pos int) []int {
	if n := len(list); n > 0 && list[n-1] == pos {
		return list
	}
	return append(list, pos)
}

// requiredHosts returns hosts (lower case, no trailing ".") one of which the
// request host must equal, by the Host matcher's comparison, for the rule
// rooted at n to match; nil when the rule does not confine the host. It is
// sound for any tree: a conjunction needs what any operand needs, a
// disjunction needs the union of what all operands need, and a negation or
// any other matcher confines nothing.
func requiredHosts(n *node) [][]byte {
	switch n.op {
	case opMatch:
		if n.m.kind == mHost {
			return n.m.values
		}
	case opAnd:
		for _, k := range n.kids {
			if hs := requiredHosts(k); hs != nil {
				return hs
			}
		}
	case opOr:
		var all [][]byte
		for _, k := range n.kids {
			hs := requiredHosts(k)
			if hs == nil {
				return nil
			}
			all = append(all, hs...)
		}
		return all
	}
	return nil
}

// requiredPaths is requiredHosts for the request path: the rule rooted at n
// matches only a path equal to one of exact or starting with one of
// prefixes. Both are nil when the rule does not confine the path.
func requiredPaths(n *node) (exact, prefixes [][]byte) {
	switch n.op {
	case opMatch:
		switch n.m.kind {
		case mPath:
			return n.m.values, nil
		case mPathPrefix:
			return nil, n.m.values
		}
	case opAnd:
		for _, k := range n.kids {
			if e, p := requiredPaths(k); e != nil || p != nil {
				return e, p
			}
		}
	case opOr:
		var allExact, allPrefixes [][]byte
		for _, k := range n.kids {
			e, p := requiredPaths(k)
			if e == nil && p == nil {
				return nil, nil
			}
			allExact = append(allExact, e...)
			allPrefixes = append(allPrefixes, p...)
		}
		return allExact, allPrefixes
	}
	return nil, nil
}

// insert returns the node whose key is key, creating and splitting nodes
// below n as needed.
func (n *prefixNode) insert(key string) *prefixNode {
	for key != "" {
		i := strings.IndexByte(n.keys, key[0])
		if i < 0 {
			c := &prefixNode{label: key}
			n.keys += key[:1]
			n.children = append(n.children, c)
			return c
		}
		c := n.children[i]
		common := commonPrefixLen(c.label, key)
		if common < len(c.label) {
			c = c.split(common)
			n.children[i] = c
		}
		n, key = c, key[common:]
	}
	return n
}

// split cuts n's label after k bytes (0 < k < len(label)) and returns the
// new node that takes n's place, holding the first k bytes.
func (n *prefixNode) split(k int) *prefixNode {
	parent := &prefixNode{label: n.label[:k], keys: n.label[k : k+1], children: []*prefixNode{n}}
	n.label = n.label[k:]
	return parent
}

// child returns the child whose label is a prefix of path, or nil.
func (n *prefixNode) child(path []byte) *prefixNode {
	i := indexByte(n.keys, path[0])
	if i < 0 {
		return nil
	}
	c := n.children[i]
	if len(path) < len(c.label) || string(path[:len(c.label)]) != c.label {
		return nil
	}
	return c
}

// indexByte is strings.IndexByte, with a plain loop for the few children
// most nodes have, where the loop costs less than the call.
func indexByte(s string, c byte) int {
	if len(s) > 16 {
		return strings.IndexByte(s, c)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func commonPrefixLen(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// hostKey returns the request host the way the index keys it: without port
// and trailing "." (exactly as the Host matcher compares it) and ASCII
// lower-cased into buf. ok is false when the host is longer than any key.
func hostKey(buf *[maxHostKey]byte, host []byte) (key []byte, ok bool) {
	h := hostWithoutPort(host)
	if len(h) > len(buf) {
		return nil, false
	}
	for i, c := range h {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(h)], true
}

// matchIndexed returns the lowest table position whose rule matches req, or
// len(t.routes) when none does. Only filed routes are evaluated.
func (t *Table) matchIndexed(req Request) int {
	best := len(t.routes)
	path := req.PathBytes()
	var buf [maxHostKey]byte
	if key, ok := hostKey(&buf, req.HostBytes()); ok {
		if pi := t.index.byHost[string(key)]; pi != nil {
			best = t.matchPaths(pi, req, path, best)
		}
	}
	return t.matchPaths(&t.index.anyHost, req, path, best)
}

// matchPaths returns the lowest position below best among the routes of pi
// that match req, or best. It walks the radix tree along path, trying the
// routes of every prefix of path that is a key, and the exact routes of path
// itself.
func (t *Table) matchPaths(pi *pathIndex, req Request, path []byte, best int) int {
	if len(pi.anyPath) > 0 {
		best = t.firstMatch(pi.anyPath, req, best)
	}
	n := &pi.paths
	for {
		if len(n.prefix) > 0 { // most nodes only join path segments
			best = t.firstMatch(n.prefix, req, best)
		}
		if len(path) == 0 {
			return t.firstMatch(n.exact, req, best)
		}
		if n = n.child(path); n == nil {
			return best
		}
		path = path[len(n.label):]
	}
}

// firstMatch returns the first position in list (ascending) below best whose
// rule matches req, or best.
func (t *Table) firstMatch(list []int, req Request, best int) int {
	for _, pos := range list {
		if pos >= best {
			break
		}
		if eval(t.routes[pos].Rule.root, req) {
			return pos
		}
	}
	return best
}
