package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/core/router"
	"github.com/sluice-gw/sluice/internal/steps"
)

// middlewareTypes are the middleware types, mapped to whether this version
// implements them: a router that references one not implemented is refused,
// so that authentication is never silently skipped.
var middlewareTypes = map[string]bool{
	MiddlewareJWT:            true,
	MiddlewareRateLimit:      true,
	MiddlewareCircuitBreaker: true,
	MiddlewareAPIKey:         true,
}

var (
	strategies      = []string{StrategyRoundRobin, StrategyWeighted, StrategyLeastConnections, StrategyRandom}
	engines         = []string{EngineGnet, EngineFasthttp}
	upstreamIO      = []string{UpstreamIOWorker, UpstreamIOLoop}
	upstreamConnect = []string{UpstreamConnectWorker, UpstreamConnectLoop}
	logLevels       = []string{"debug", "info", "warn", "error"}
	logFormats      = []string{"text", "json"}
)

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func quoteAll(set []string) string {
	q := make([]string, len(set))
	for i, s := range set {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func sortedNames[T any](m map[string]T) []string {
	steps.Add(len(m) + 1)
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// validName reports whether a table name is usable as a metric label and in
// logs: 1..128 bytes of [A-Za-z0-9._-], starting with a letter or digit.
func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// checkAddress checks host:port as accepted by net.Listen: an empty host
// means every interface; the port is 0..65535.
func checkAddress(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want host:port, e.g. \"127.0.0.1:8080\" or \":8080\""
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "port " + strconv.Quote(port) + " is not a number in 0..65535"
	}
	if strings.ContainsAny(host, " /?#@") {
		return "host " + strconv.Quote(host) + " is not a host name or IP address"
	}
	return ""
}

// checkHostName checks an admin.allowed_hosts entry: a host name or IP
// address as the host part of a Host header has it, without a port.
func checkHostName(h string) string {
	switch {
	case h == "":
		return "empty host name"
	case strings.ContainsAny(h, " \t/?#@*%,"):
		return "not a host name or IP address (write the bare host: no scheme, path or wildcard)"
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
		if ip := net.ParseIP(h[1 : len(h)-1]); ip == nil || ip.To4() != nil {
			return "not an IPv6 address"
		}
	case strings.Contains(h, ":") && net.ParseIP(h) == nil:
		return "write the host without a port (the port is not compared)"
	}
	return ""
}

// parseTrustedIP parses an entrypoints.<name>.trusted_ips entry: an IP address, which is a
// network of one, or a network in CIDR notation (RFC 4632 §3.1, RFC 4291 §2.3). A peer
// arriving on a dual-stack listener is matched in its IPv4 form, so an IPv4-mapped IPv6
// network (::ffff:10.0.0.0/104) is turned into the IPv4 network it maps. Host bits are
// cleared, as net.ParseCIDR and nginx's set_real_ip_from do. It returns a message when s is
// neither.
func parseTrustedIP(s string) (netip.Prefix, string) {
	const want = `want an IP address or a network in CIDR notation, e.g. "192.0.2.7", "10.0.0.0/8" or "fd00::/8"`
	addr, bits, isNet := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	switch {
	case s == "":
		return netip.Prefix{}, "empty: " + want
	case err != nil:
		return netip.Prefix{}, "not an IP address: " + want
	case a.Zone() != "":
		return netip.Prefix{}, "a zone (%" + a.Zone() + ") is never part of a peer's address: write the address without it"
	}
	n := a.BitLen()
	if isNet {
		b, err := strconv.Atoi(bits)
		if err != nil || bits == "" || strings.TrimLeft(bits, "0123456789") != "" || b > a.BitLen() {
			v := "4"
			if a.Is6() {
				v = "6"
			}
			return netip.Prefix{}, fmt.Sprintf("prefix length %q: want 0..%d for an IPv%s network", bits, a.BitLen(), v)
		}
		n = b
	}
	if a.Is4In6() && n >= 96 {
		a, n = a.Unmap(), n-96
	}
	return netip.PrefixFrom(a, n).Masked(), ""
}

// listenKey is an address normalised to decide whether two listeners clash:
// the same port on the same host, or on any host when one is a wildcard.
type listenKey struct {
	host string // "" for a wildcard (empty, 0.0.0.0, ::)
	port string
}

func listenKeyOf(addr string) (listenKey, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		return listenKey{}, false
	}
	if host == "0.0.0.0" || host == "::" {
		host = ""
	}
	return listenKey{host: strings.ToLower(host), port: port}, true
}

// maxClashesShown is how many of the listeners an address clashes with are named one by one;
// the rest are counted in one more error, so that a thousand entrypoints on one port do not
// make a million errors.
const maxClashesShown = 3

// listener is an address listened on, and the entrypoint's key path.
type listener struct {
	key  listenKey
	path []string
	seq  int // order of addition
}

// listenIndex holds the addresses listened on so far. Two listen on the same port on the same
// host, or on any host when one is a wildcard; the index finds the ones a new address clashes
// with without comparing it with every other.
type listenIndex struct {
	n      int
	byPort map[string][]listener    // every address, by port
	exact  map[listenKey][]listener // addresses with a host, by host and port
	wild   map[string][]listener    // wildcard addresses, by port
}

func (x *listenIndex) add(k listenKey, path []string) {
	if x.byPort == nil {
		x.byPort, x.exact, x.wild = map[string][]listener{}, map[listenKey][]listener{}, map[string][]listener{}
	}
	l := listener{key: k, path: path, seq: x.n}
	x.n++
	x.byPort[k.port] = append(x.byPort[k.port], l)
	if k.host == "" {
		x.wild[k.port] = append(x.wild[k.port], l)
	} else {
		x.exact[k] = append(x.exact[k], l)
	}
}

// clashes returns the first maxClashesShown addresses k clashes with, in the order they were
// added, and how many it clashes with in all.
func (x *listenIndex) clashes(k listenKey) (first []listener, all int) {
	steps.Add(maxClashesShown + 1)
	if k.host == "" {
		l := x.byPort[k.port]
		return l[:min(len(l), maxClashesShown)], len(l)
	}
	a, b := x.exact[k], x.wild[k.port]
	for len(first) < maxClashesShown && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || len(a) > 0 && a[0].seq < b[0].seq {
			first, a = append(first, a[0]), a[1:]
		} else {
			first, b = append(first, b[0]), b[1:]
		}
	}
	return first, len(x.exact[k]) + len(x.wild[k.port])
}

// checkServerURL checks an upstream URL: http or https, a host, an optional
// port, and nothing else. A URL that would pass once trimmed, or with "http://" before it,
// says so: url.Parse reads the host:port of nginx's and HAProxy's server lines as an error
// ("127.0.0.1:8000") or as a scheme ("localhost:8000"), which would name neither fault.
func checkServerURL(s string) string { return serverURL.check(s) }

// checkAPIServerURL checks a Kubernetes API server's URL: https or http, optional user info
// (basic authentication), a host, an optional port and an optional path (an API server
// reached through a proxy, such as Rancher's /k8s/clusters/<id>), and no query or fragment.
// One without its scheme says to write "https://" before it, the API server's scheme.
func checkAPIServerURL(s string) string { return apiServerURL.check(s) }

// urlShape is what a URL key takes: the scheme written before a host:port that has none
// (with "://"), an example quoted in the messages, and whether user info may come before the
// host and a path after it.
type urlShape struct {
	scheme, example string
	user, path      bool
}

var (
	serverURL    = urlShape{scheme: "http://", example: `"http://127.0.0.1:8000"`}
	apiServerURL = urlShape{scheme: "https://", example: `"https://10.96.0.1:443"`, user: true, path: true}
)

// check returns what is wrong with s as a URL of this shape, or "".
func (x urlShape) check(s string) string {
	if t := strings.TrimSpace(s); t != s {
		if x.check(t) == "" {
			return "URL has white space before or after it: write " + strconv.Quote(redactURL(t))
		}
		return "URL has white space before or after it"
	}
	u, err := url.Parse(s)
	if (err != nil || u.Scheme != "http" && u.Scheme != "https") && !strings.Contains(s, "://") {
		if x.check(x.scheme+s) == "" {
			return "URL has no scheme: write " + strconv.Quote(redactURL(x.scheme+s))
		}
		if v, err := url.Parse(x.scheme + s); err == nil && v.Hostname() != "" {
			return "URL has no scheme: write http:// or https:// before the host, e.g. " + x.example
		}
	}
	if err != nil {
		// The parser's error may quote a part of the user information (a password's start
		// read as a host, its end as a port): the URL is judged with a placeholder in its
		// place, so that the message quotes none of it.
		if i, at, ok := userinfoSpan(s); ok && s[i:at] != "user" {
			if msg := x.check(s[:i] + "user" + s[at:]); msg != "" {
				return msg
			}
			return "cannot parse URL: its user information is not valid (write a '/', '?', '#', '@' or '%' in it percent-encoded: %2F, %3F, %23, %40, %25)"
		}
		return "cannot parse URL: " + strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(s)+": ")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		if x.path {
			return "URL scheme must be https or http, e.g. " + x.example
		}
		return "URL scheme must be http or https, e.g. " + x.example
	case u.Host == "" || u.Hostname() == "":
		return "URL has no host"
	case u.User != nil && !x.user:
		return "URL must not carry user info (credentials do not belong in a server URL)"
	case x.path && (u.RawQuery != "" || u.Fragment != "" || u.ForceQuery):
		return "URL must be scheme://host[:port][/path] only (no query or fragment)"
	case !x.path && (u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != ""):
		return "URL must be scheme://host[:port] only (no path, query or fragment)"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "URL port " + strconv.Quote(p) + " is not a number in 1..65535"
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return "URL has an empty port"
	}
	return ""
}

// validate checks cross references and ranges, fills the computed defaults
// (entrypoint engine, router entrypoints) and reads the admin token.
func (c *Config) validate(e *errs, lookup func(string) (string, bool)) {
	top := Position{Line: 1, Col: 1}
	if len(c.files) > 0 {
		top.File = c.files[0]
	}
	if len(c.Entrypoints) == 0 {
		e.add(top, "no entrypoints: define at least one [entrypoints.<name>] with an address")
	}

	var listeners listenIndex
	for _, name := range sortedNames(c.Entrypoints) {
		ep := c.Entrypoints[name]
		path := []string{"entrypoints", name}
		if !validName(name) {
			e.add(c.Pos(path...), "entrypoint name %q: names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name)
		}
		if ep.Address == "" && c.missing(append(path, "address")...) {
			e.add(c.Pos(path...), "entrypoints.%s.address is required (host:port to listen on)", name)
		} else if ep.Address == "" {
			// written but invalid: already reported
		} else if msg := checkAddress(ep.Address); msg != "" {
			e.add(c.ValuePos(append(path, "address")...), "entrypoints.%s.address %q: %s", name, c.shown(ep.Address, append(path, "address")...), c.MaskEnv(msg, append(path, "address")...))
		} else if k, ok := listenKeyOf(ep.Address); ok {
			at := c.ValuePos(append(path, "address")...)
			clash, all := listeners.clashes(k)
			for _, l := range clash {
				e.add(at, "entrypoints.%s.address %q clashes with %s (%s)", name, c.shown(ep.Address, append(path, "address")...), dotted(l.path), c.ValuePos(append(l.path, "address")...))
			}
			if all > len(clash) {
				e.add(at, "entrypoints.%s.address %q clashes with %d more entrypoints", name, c.shown(ep.Address, append(path, "address")...), all-len(clash))
			}
			listeners.add(k, path)
		}
		switch {
		case ep.Engine == "" && ep.TLS != nil:
			ep.Engine = EngineFasthttp
		case ep.Engine == "":
			ep.Engine = DefaultEngine
		case !oneOf(ep.Engine, engines):
			e.add(c.ValuePos(append(path, "engine")...), "entrypoints.%s.engine %q: %s", name, c.shown(ep.Engine, append(path, "engine")...), wantOneOf(ep.Engine, engines))
		case ep.Engine == EngineGnet && ep.TLS != nil:
			e.add(c.Pos(append(path, "tls")...), "entrypoints.%s: engine \"gnet\" serves plaintext only and has no TLS; set engine = \"fasthttp\" to terminate TLS on this entrypoint", name)
		}
		if ep.TLS != nil {
			c.validateTLS(e, name, ep.TLS)
		}
		if ep.MaxHeaderBytes < MinMaxHeaderBytes || ep.MaxHeaderBytes > MaxMaxHeaderBytes {
			e.add(c.ValuePos(append(path, "max_header_bytes")...), "entrypoints.%s.max_header_bytes %d: want %d..%d bytes", name, ep.MaxHeaderBytes, MinMaxHeaderBytes, MaxMaxHeaderBytes)
		}
		if ep.MaxBodyBytes < 1 {
			e.add(c.ValuePos(append(path, "max_body_bytes")...), "entrypoints.%s.max_body_bytes %d: want at least 1 byte", name, ep.MaxBodyBytes)
		}
		switch {
		case ep.UpstreamIO == "" && ep.Engine == EngineGnet:
			ep.UpstreamIO = UpstreamIOLoop
		case ep.UpstreamIO == "":
			ep.UpstreamIO = UpstreamIOWorker
		case !oneOf(ep.UpstreamIO, upstreamIO):
			e.add(c.ValuePos(append(path, "upstream_io")...), "entrypoints.%s.upstream_io %q: %s", name, c.shown(ep.UpstreamIO, append(path, "upstream_io")...), wantOneOf(ep.UpstreamIO, upstreamIO))
		case ep.UpstreamIO == UpstreamIOLoop && ep.Engine != EngineGnet:
			e.add(c.ValuePos(append(path, "upstream_io")...), "entrypoints.%s.upstream_io \"loop\" needs engine \"gnet\" (event loops); engine %q does its upstream I/O on its own goroutines", name, ep.Engine)
		}
		switch {
		case ep.UpstreamConnect == "":
			ep.UpstreamConnect = UpstreamConnectWorker
		case !oneOf(ep.UpstreamConnect, upstreamConnect):
			e.add(c.ValuePos(append(path, "upstream_connect")...), "entrypoints.%s.upstream_connect %q: %s", name, c.shown(ep.UpstreamConnect, append(path, "upstream_connect")...), wantOneOf(ep.UpstreamConnect, upstreamConnect))
		case ep.UpstreamConnect == UpstreamConnectLoop && ep.UpstreamIO != UpstreamIOLoop:
			e.add(c.ValuePos(append(path, "upstream_connect")...), "entrypoints.%s.upstream_connect \"loop\" needs upstream_io \"loop\" (engine \"gnet\"): the event loops connect only for the exchanges they drive", name)
		}
		if ep.EventLoops < 0 || ep.EventLoops > 1024 {
			e.add(c.ValuePos(append(path, "event_loops")...), "entrypoints.%s.event_loops %d: want 0 (automatic) to 1024", name, ep.EventLoops)
		}
		if ep.MaxConnections < 0 {
			e.add(c.ValuePos(append(path, "max_connections")...), "entrypoints.%s.max_connections %d: want 0 (unlimited) or more", name, ep.MaxConnections)
		}
		if ep.SendBufferBytes < 0 || ep.SendBufferBytes > MaxSendBufferBytes {
			e.add(c.ValuePos(append(path, "send_buffer_bytes")...), "entrypoints.%s.send_buffer_bytes %d: want 0 (the kernel's default) to %d bytes", name, ep.SendBufferBytes, MaxSendBufferBytes)
		}
		for i, s := range ep.TrustedIPs {
			ip := append(path, "trusted_ips", strconv.Itoa(i))
			switch p, msg := parseTrustedIP(s); {
			case msg == "":
				ep.TrustedNets = append(ep.TrustedNets, p)
			case !e.reported(c.ValuePos(ip...)): // else not a string, reported already
				e.add(c.ValuePos(ip...), "entrypoints.%s.trusted_ips[%d] %q: %s", name, i, c.shown(s, ip...), c.MaskEnv(msg, ip...))
			}
		}
	}

	allEntrypoints := sortedNames(c.Entrypoints)
	for _, name := range sortedNames(c.Routers) {
		r := c.Routers[name]
		path := []string{"routers", name}
		if !validName(name) {
			e.add(c.Pos(path...), "router name %q: names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name)
		}
		if strings.TrimSpace(r.Rule) == "" && (r.Rule != "" || c.missing(append(path, "rule")...)) {
			e.add(c.Pos(append(path, "rule")...), "routers.%s.rule is required, e.g. rule = \"PathPrefix(`/v1`)\"", name)
		} else if _, err := router.Parse(r.Rule); err != nil && r.Rule != "" { // "": a type or ${VAR} error, reported already
			// Checked with the other keys, so that one run reports every problem.
			if se, ok := err.(*router.SyntaxError); ok {
				e.add(c.OffsetPos(se.Offset, append(path, "rule")...), "routers.%s.rule: %s", name, c.MaskEnv(se.Msg, append(path, "rule")...))
			} else {
				e.add(c.ValuePos(append(path, "rule")...), "routers.%s.rule: %s", name, c.MaskEnv(err.Error(), append(path, "rule")...))
			}
		}
		if r.Models && r.Service != "" {
			e.add(c.ValuePos(append(path, "models")...), "routers.%s: models = true and service are exclusive (a model router's targets name the services)", name)
		} else if r.Models {
			// The body's model picks the service.
		} else if r.Service == "" && c.missing(append(path, "service")...) &&
			!c.reportedAt(e, append(path, "models")...) {
			// A models key of the wrong type was reported where it stands: it may have meant
			// a model router, which needs no service.
			e.add(c.Pos(append(path, "service")...), "routers.%s.service is required (the name of a [services.<name>] table), or models = true for a model router", name)
		} else if _, ok := c.Services[r.Service]; !ok && r.Service != "" {
			e.add(c.ValuePos(append(path, "service")...), "routers.%s.service: no service named %q%s", name, c.shown(r.Service, append(path, "service")...), didYouMean(r.Service, sortedNames(c.Services)))
		}
		if r.Priority < 0 {
			e.add(c.ValuePos(append(path, "priority")...), "routers.%s.priority %d: want 0 (order by rule length) or more", name, r.Priority)
		}
		if r.Entrypoints == nil {
			r.Entrypoints = append([]string(nil), allEntrypoints...)
		} else if len(r.Entrypoints) == 0 {
			e.add(c.ValuePos(append(path, "entrypoints")...), "routers.%s.entrypoints is empty: list at least one entrypoint, or remove the key to serve on all", name)
		}
		seen := map[string]bool{}
		for i, ep := range r.Entrypoints {
			ip := append(path, "entrypoints", strconv.Itoa(i))
			at := c.ValuePos(ip...)
			if _, ok := c.Entrypoints[ep]; !ok {
				e.add(at, "routers.%s.entrypoints: no entrypoint named %q%s", name, c.shown(ep, ip...), didYouMean(ep, allEntrypoints))
			} else if seen[ep] {
				e.add(at, "routers.%s.entrypoints: %q is listed twice", name, c.shown(ep, ip...))
			}
			seen[ep] = true
		}
		seen = map[string]bool{}
		for i, mw := range r.Middlewares {
			ip := append(path, "middlewares", strconv.Itoa(i))
			at := c.ValuePos(ip...)
			m, ok := c.Middlewares[mw]
			switch {
			case !ok:
				e.add(at, "routers.%s.middlewares: no middleware named %q%s", name, c.shown(mw, ip...), didYouMean(mw, sortedNames(c.Middlewares)))
			case seen[mw]:
				e.add(at, "routers.%s.middlewares: %q is listed twice", name, c.shown(mw, ip...))
			case m.Type != "" && !middlewareTypes[m.Type]:
				if _, known := middlewareTypes[m.Type]; known {
					e.add(at, "routers.%s.middlewares: %q: middleware type %q is not implemented in this version (refusing to serve this router without it)", name, c.shown(mw, ip...), c.shown(m.Type, "middlewares", mw, "type"))
				}
			}
			seen[mw] = true
		}
	}

	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		path := []string{"services", name}
		if !validName(name) {
			e.add(c.Pos(path...), "service name %q: names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name)
		}
		c.validateLifecycle(e, name, s)
		lb := s.LoadBalancer
		if lb == nil && (len(s.Revisions) > 0 || s.Scaling != nil) {
			continue // the revisions hold the servers; the load balancer's keys keep their defaults
		}
		if lb == nil {
			e.add(c.Pos(path...), "services.%s has no load_balancer: add [services.%s.load_balancer] with servers = [{ url = \"http://host:port\" }]", name, name)
			continue
		}
		lp := append(path, "load_balancer")
		if !oneOf(lb.Strategy, strategies) {
			e.add(c.ValuePos(append(lp, "strategy")...), "services.%s.load_balancer.strategy %q: %s", name, c.shown(lb.Strategy, append(lp, "strategy")...), wantOneOf(lb.Strategy, strategies))
		}
		if len(lb.Servers) == 0 && len(s.Revisions) == 0 && s.Scaling == nil && !c.reportedAt(e, append(lp, "servers")...) {
			e.add(c.Pos(append(lp, "servers")...), "services.%s.load_balancer.servers: list at least one server, e.g. servers = [{ url = \"http://127.0.0.1:8000\" }]", name)
		}
		for i, srv := range lb.Servers {
			sp := append(lp, "servers", strconv.Itoa(i))
			if srv.URL == "" && c.missing(append(sp, "url")...) {
				e.add(c.Pos(sp...), "services.%s.load_balancer.servers[%d].url is required", name, i)
			} else if msg := checkServerURL(srv.URL); msg != "" && srv.URL != "" {
				e.add(c.ValuePos(append(sp, "url")...), "services.%s.load_balancer.servers[%d].url %q: %s", name, i, c.shownURL(srv.URL, append(sp, "url")...), c.MaskEnv(msg, append(sp, "url")...))
			}
			if srv.Weight < 1 || srv.Weight > MaxWeight {
				e.add(c.ValuePos(append(sp, "weight")...), "services.%s.load_balancer.servers[%d].weight %d: want 1..%d", name, i, srv.Weight, MaxWeight)
			}
		}
		if lb.MaxIdleConns < 0 {
			e.add(c.ValuePos(append(lp, "max_idle_conns")...), "services.%s.load_balancer.max_idle_conns %d: want 0 or more", name, lb.MaxIdleConns)
		}
		if lb.TLS != nil {
			https := false
			for _, srv := range lb.Servers {
				https = https || strings.HasPrefix(strings.ToLower(srv.URL), "https://")
			}
			if !https {
				e.add(c.Pos(append(lp, "tls")...), "services.%s.load_balancer.tls: no server is https://, so nothing would use it (write the servers' URLs with https://)", name)
			}
		}
		c.validateWorkers(e, name, &s.Workers, lookup)
		c.validateHealth(e, name, lb)
	}

	for _, name := range sortedNames(c.Middlewares) {
		m := c.Middlewares[name]
		path := []string{"middlewares", name}
		if !validName(name) {
			e.add(c.Pos(path...), "middleware name %q: names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name)
		}
		if m.Type == "" && c.missing(append(path, "type")...) {
			e.add(c.Pos(path...), "middlewares.%s.type is required (one of %s)", name, quoteAll(sortedNames(middlewareTypes)))
		} else if _, ok := middlewareTypes[m.Type]; !ok && m.Type != "" {
			e.add(c.ValuePos(append(path, "type")...), "middlewares.%s.type %q: unknown middleware type (%s)", name, c.shown(m.Type, append(path, "type")...), wantOneOf(m.Type, sortedNames(middlewareTypes)))
		}
		switch m.Type {
		case MiddlewareAPIKey:
			c.validateAPIKeyOptions(e, name, m)
		case MiddlewareRateLimit:
			c.validateRateLimitOptions(e, name, m)
		case MiddlewareCircuitBreaker:
			c.validateCircuitBreakerOptions(e, name, m)
		case MiddlewareJWT:
			c.validateJWTOptions(e, name, m)
		default:
			c.validateEdgeOptions(e, name, m)
		}
	}
	c.validateMiddlewareOrder(e)

	if a := c.Admin.Address; a != "" {
		if msg := checkAddress(a); msg != "" {
			e.add(c.ValuePos("admin", "address"), "admin.address %q: %s (or \"\" to disable the admin API)", c.shown(a, "admin", "address"), c.MaskEnv(msg, "admin", "address"))
		} else if k, ok := listenKeyOf(a); ok {
			clash, all := listeners.clashes(k)
			for _, l := range clash {
				e.add(c.ValuePos("admin", "address"), "admin.address %q clashes with %s (%s)", c.shown(a, "admin", "address"), dotted(l.path), c.ValuePos(append(l.path, "address")...))
			}
			if all > len(clash) {
				e.add(c.ValuePos("admin", "address"), "admin.address %q clashes with %d more entrypoints", c.shown(a, "admin", "address"), all-len(clash))
			}
		}
	}
	for i, h := range c.Admin.AllowedHosts {
		hp := []string{"admin", "allowed_hosts", strconv.Itoa(i)}
		if msg := checkHostName(h); msg != "" {
			e.add(c.ValuePos(hp...), "%s %q: %s", dotted(hp), c.shown(h, hp...), msg)
		}
	}
	if n := c.Admin.TokenEnv; n != "" {
		if !isEnvName(n) {
			e.add(c.ValuePos("admin", "token_env"), "admin.token_env %q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", c.shown(n, "admin", "token_env"))
		} else if v, ok := lookup(n); !ok || v == "" {
			e.add(c.ValuePos("admin", "token_env"), "admin.token_env: environment variable %s is not set or empty (it must hold the admin bearer token)", n)
		} else {
			c.Admin.Token = v
		}
	}
	c.validateModels(e, lookup)
	c.validateProviders(e)
	if !oneOf(c.Log.Level, logLevels) {
		e.add(c.ValuePos("log", "level"), "log.level %q: %s", c.shown(c.Log.Level, "log", "level"), wantOneOf(c.Log.Level, logLevels))
	}
	if !oneOf(c.Log.Format, logFormats) {
		e.add(c.ValuePos("log", "format"), "log.format %q: %s", c.shown(c.Log.Format, "log", "format"), wantOneOf(c.Log.Format, logFormats))
	}
	if s := c.Log.AccessLogSample; !(s >= 0 && s <= 1) {
		e.add(c.ValuePos("log", "access_log_sample"), "log.access_log_sample %v: want a fraction from 0 to 1", s)
	}
}

// wantOneOf says which values a key takes, and the closest one to s when s looks like a
// misspelling of it: `want one of "a", "b" (did you mean "a"?)`.
func wantOneOf(s string, names []string) string {
	return "want one of " + quoteAll(names) + meant(s, names)
}

// meant is the " (did you mean "x"?)" that follows a refused value s when it looks like x of
// names (nearestValue), or "".
func meant(s string, names []string) string {
	if m := nearestValue(s, names); m != "" {
		return " (did you mean " + strconv.Quote(m) + "?)"
	}
	return ""
}

// nearestValue returns the name of names that s most likely means: one s spells in other
// letter case ("JSON" for "json") or with its words joined or split otherwise ("RoundRobin",
// "client-ip"), a misspelling of one (nearestName), or one that s is a longer form of
// ("warning" for "warn"); or "".
func nearestValue(s string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(s, n) {
			return n
		}
	}
	for _, n := range names {
		if strings.EqualFold(withoutWordBreaks(s), withoutWordBreaks(n)) {
			return n
		}
	}
	if m := nearestName(s, names); m != "" {
		return m
	}
	for _, n := range names {
		if len(n) >= 3 && len(s) > len(n) && strings.EqualFold(s[:len(n)], n) {
			return n
		}
	}
	return ""
}

// withoutWordBreaks returns s without the characters that join or split its words ('-', '_',
// '.', ' ').
func withoutWordBreaks(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r == ' ' {
			return -1
		}
		return r
	}, s)
}

func didYouMean(s string, names []string) string {
	if m := nearestName(s, names); m != "" {
		return " (did you mean " + strconv.Quote(m) + "?)"
	}
	if len(names) == 0 {
		return " (none is defined)"
	}
	return " (defined: " + quoteAll(names) + ")"
}

// missing reports whether the key at path was not written in any file
// (as opposed to written with a value that failed to decode, which has
// been reported already).
func (c *Config) missing(path ...string) bool {
	_, ok := c.index[joinPath(path)]
	return !ok
}

// reportedAt reports whether the key at path was written and a problem was reported where
// its value stands (a value of the wrong type): it is not missing or empty too. A key that
// was not written has no position of its own (ValuePos falls back to its table's), so a
// problem reported at the table must not pass for one of the key's.
func (c *Config) reportedAt(e *errs, path ...string) bool {
	return !c.missing(path...) && e.reported(c.ValuePos(path...))
}

// validateTLS checks [entrypoints.<name>.tls]: a default certificate (cert_file and key_file,
// or a first element of certificates), both files of each certificate, and min_version.
func (c *Config) validateTLS(e *errs, name string, t *TLS) {
	path := []string{"entrypoints", name, "tls"}
	hasCert, hasKey := !c.missing(append(path, "cert_file")...), !c.missing(append(path, "key_file")...)
	switch {
	case !hasCert && !hasKey && len(t.Certificates) > 0:
		// the first of certificates is the default
	case !hasCert:
		e.add(c.Pos(path...), "entrypoints.%s.tls.cert_file is required (PEM certificate chain), or list certificates = [{ cert_file, key_file }]", name)
		if !hasKey {
			e.add(c.Pos(path...), "entrypoints.%s.tls.key_file is required (PEM private key)", name)
		}
	case !hasKey:
		e.add(c.Pos(path...), "entrypoints.%s.tls.key_file is required (PEM private key)", name)
	}
	for i, cf := range t.Certificates {
		cp := append(append([]string{}, path...), "certificates", strconv.Itoa(i))
		// A file name of the wrong type was reported where it stands; it is not missing too.
		if cf.CertFile == "" && !c.reportedAt(e, append(cp, "cert_file")...) {
			e.add(c.Pos(cp...), "entrypoints.%s.tls.certificates[%d].cert_file is required (PEM certificate chain)", name, i)
		}
		if cf.KeyFile == "" && !c.reportedAt(e, append(cp, "key_file")...) {
			e.add(c.Pos(cp...), "entrypoints.%s.tls.certificates[%d].key_file is required (PEM private key)", name, i)
		}
	}
	if t.MinVersion != TLSVersion12 && t.MinVersion != TLSVersion13 {
		e.add(c.ValuePos(append(path, "min_version")...), "entrypoints.%s.tls.min_version %q: want \"1.2\" or \"1.3\"%s", name, c.shown(t.MinVersion, append(path, "min_version")...), meant(t.MinVersion, []string{TLSVersion12, TLSVersion13}))
	}
}
