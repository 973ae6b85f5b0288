package snapshot

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/health"
)

// serverState is what the gateway knows of one server of a service beyond one configuration:
// the balancer's state (requests in flight, ejection) and passive health's judgement. A
// snapshot shares it with the one it replaces for every server both have, rather than copying
// it: a request sent before a reload is released into the count the new snapshot balances on,
// and a failure it meets counts towards the server's ejection in both.
type serverState struct {
	lb      *balancer.State
	passive *health.PassiveState
	// key is the server's identity (serverState), its backends' pipeline.Backend.Key: what
	// active health checks, circuit breakers and worker observations carry over by.
	key string
}

// serverState returns the state of the server id (serverAddr's scheme://host:port) of
// service, the one prev has for it when prev has that server, or a new one. The same server
// listed more than once in the service keeps a state per listing, matched in the order they
// are listed.
//
// A server is the same when its service and id are: its weight, its URL as written (a host
// from the environment, another form of the same address) and its upstream settings may
// change. A server moved to another service starts afresh there, as a server listed in two
// services has a state in each: the requests of a service and its passive health are the
// service's own.
func (s *Snapshot) serverState(service, id string, prev *Snapshot) *serverState {
	base := service + "\x00" + id
	key := base
	for n := 1; s.servers[key] != nil; n++ {
		key = base + "\x00" + strconv.Itoa(n)
	}
	st := prev.serverStateOf(key)
	if st == nil {
		st = &serverState{lb: new(balancer.State), passive: new(health.PassiveState), key: key}
	}
	s.servers[key] = st
	return st
}

// serverStateOf returns s's state under key (nil when s is nil or has no such server).
func (s *Snapshot) serverStateOf(key string) *serverState {
	if s == nil {
		return nil
	}
	return s.servers[key]
}

// serverAddr returns the scheme, host and port of the server that u names, in the one form
// every way of writing that server's URL shares: the server's identity across reloads
// (serverState) and the address its connections are made to. u is a server URL as
// configuration validation admits it: http or https, a host, an optional port in 1..65535,
// no path but "/".
//
// Two URLs name the same server when they are equivalent by RFC 3986 §6.2.2 and §6.2.3:
//   - the scheme and a host name are case-insensitive (§6.2.2.1): both in lower case, ASCII
//     letters only (the host's other characters are compared as written);
//   - percent-encoded octets of the host are decoded (§6.2.2.2, as url.Parse does);
//   - an empty path is "/" (§6.2.3), and the path names no other server;
//   - an absent port is the scheme's default, 80 or 443 (§6.2.3), and a port is its decimal
//     value: "080" is 80;
//   - an IP literal is its address (RFC 3986 §3.2.2 leaves the text to RFC 4291), written as
//     RFC 5952 §4 has it ("[0:0::1]" and "[::0001]" are "::1", hex digits in lower case), and
//     an IPv4-mapped IPv6 address (RFC 4291 §2.5.5.2) as the IPv4 address the gateway
//     connects to for it; a zone is kept as written.
//
// Names are not resolved: "localhost" and "127.0.0.1" are two servers, and so are a name with
// and without a trailing dot, which a resolver with search domains tells apart.
func serverAddr(u *url.URL) (scheme, host, port string) {
	scheme = lowerASCII(u.Scheme)
	host = u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	} else {
		host = lowerASCII(host)
	}
	port = u.Port()
	switch n, err := strconv.ParseUint(port, 10, 16); {
	case err == nil:
		port = strconv.FormatUint(n, 10)
	case port != "":
		// Not a port validation admits: kept as written, for the dial to report.
	case scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	return scheme, host, port
}

// lowerASCII returns s with its ASCII upper-case letters in lower case.
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}
