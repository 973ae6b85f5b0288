package gateway

import (
	"net"
	"net/url"
	"strings"
)

// hostPolicy decides which hosts a request to the admin API may name (its Host header, and
// the Origin of a state-changing request): a loopback name with any port, the listener's own
// address when it is not a wildcard (with its port or none), and [admin] allowed_hosts with
// any port. Names compare case-insensitively, IP addresses by value.
type hostPolicy struct {
	port    string          // the listener's port
	ownIPs  []net.IP        // the listener's IP and the configured one, unless wildcards
	ownName string          // the configured host when it is a name (lower case)
	names   map[string]bool // allowed_hosts names (lower case)
	ips     []net.IP        // allowed_hosts IP addresses
}

func newHostPolicy(configured string, bound net.Addr, allowed []string) *hostPolicy {
	p := &hostPolicy{names: map[string]bool{}}
	if ta, ok := bound.(*net.TCPAddr); ok {
		if !ta.IP.IsUnspecified() {
			p.ownIPs = append(p.ownIPs, ta.IP)
		}
		_, p.port, _ = net.SplitHostPort(ta.String())
	}
	if host, _, err := net.SplitHostPort(configured); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil {
			p.ownName = strings.ToLower(host)
		} else if !ip.IsUnspecified() {
			p.ownIPs = append(p.ownIPs, ip)
		}
	}
	for _, h := range allowed {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
		if ip := net.ParseIP(h); ip != nil {
			p.ips = append(p.ips, ip)
		} else {
			p.names[h] = true
		}
	}
	return p
}

// allows reports whether hostport, a Host header value, names the admin API.
func (p *hostPolicy) allows(hostport string) bool {
	host, port, ok := splitHostHeader(hostport)
	if !ok {
		return false
	}
	host = strings.ToLower(host)
	ip := net.ParseIP(host)
	switch {
	case host == "localhost" || ip != nil && ip.IsLoopback():
		return true
	case p.names[host] || ip != nil && containsIP(p.ips, ip):
		return true
	case port != "" && port != p.port:
		return false
	default:
		return host == p.ownName || ip != nil && containsIP(p.ownIPs, ip)
	}
}

// allowsOrigin reports whether origin, an Origin header value, is a page of the admin API's
// own hosts. "null" (a sandboxed or file: page) is not.
func (p *hostPolicy) allowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return false
	}
	return p.allows(u.Host)
}

// splitHostHeader splits a Host header value (RFC 9110 §7.2: uri-host [":" port]) into its
// host, without brackets, and port. An IPv6 address must be in brackets.
func splitHostHeader(hostport string) (host, port string, ok bool) {
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := hostport[1:end], hostport[end+1:]
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return "", "", false
		}
		if rest == "" {
			return host, "", true
		}
		if rest[0] != ':' || !isDigits(rest[1:]) {
			return "", "", false
		}
		return host, rest[1:], true
	}
	host, port, found := strings.Cut(hostport, ":")
	if host == "" || found && !isDigits(port) {
		return "", "", false
	}
	return host, port, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, x := range ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}
