package gateway_test

import (
	"bufio"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// rateLimitBehindProxy runs a gateway whose entrypoint trusts its loopback peer as a proxy,
// with the given routers and middlewares, and returns its address: the tests speak as that
// proxy, forwarding requests of any client address in X-Forwarded-For.
func rateLimitBehindProxy(t *testing.T, engine, upstream, routes string) string {
	t.Helper()
	g := runGateway(t, "rl.toml", fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
trusted_ips = ["127.0.0.1/32"]
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = ""
%s`, engineTOML(engine), upstream, routes))
	return g.Addr("web")
}

// forwardedFor sends GET path to the gateway at addr on a new connection, as the trusted
// proxy forwarding client's request (X-Forwarded-For: client), with the field lines extra
// ("Name: value\r\n" each); it returns the answer's status.
func forwardedFor(t *testing.T, addr, path, client, extra string) int {
	t.Helper()
	c := dial(t, addr)
	defer c.Close()
	send(t, c, "GET "+path+" HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: "+client+"\r\n"+extra+"Connection: close\r\n\r\n")
	return readResponse(t, bufio.NewReader(c), false).status
}

// An IPv6 client holds a /64 at least and may take a new address of it for every request:
// key = "client_ip" counts it by its /64, so that the limit holds whichever addresses it
// uses, while another /64 has its own bucket. An IPv4 client is counted by its address, and
// an IPv4-mapped IPv6 address is the IPv4 client it maps.
func TestRateLimitCountsAnIPv6ClientByItsNetwork(t *testing.T) {
	up := serveCounting(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			addr := rateLimitBehindProxy(t, engine, up.addr(), `
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["per-client"]
[middlewares.per-client]
type = "rate-limit"
rate = 0.01   # no token comes back during the test
burst = 2
`)
			do := func(client string) int { return forwardedFor(t, addr, "/v1/models", client, "") }
			require.Equal(t, 200, do("2001:db8:1:2::1"))
			require.Equal(t, 200, do("2001:db8:1:2:aaaa:bbbb:cccc:dddd"))
			require.Equal(t, 429, do("2001:db8:1:2::99"), "a third address of the same /64 finds its bucket empty")
			require.Equal(t, 429, do("[2001:db8:1:2:ffff:ffff:ffff:ffff]:4711"), "the last address of the /64, with a port")
			require.Equal(t, 429, do("203.0.113.1, 2001:db8:1:2::7"), "what the client wrote left of the hop does not count")
			require.Equal(t, 200, do("2001:db8:1:3::1"), "the next /64 is another client")
			require.Equal(t, 200, do("2001:db8:1:1:ffff:ffff:ffff:ffff"), "and so is the one before")

			require.Equal(t, 200, do("198.51.100.7"))
			require.Equal(t, 200, do("::ffff:198.51.100.7"), "an IPv4-mapped address is the IPv4 client")
			require.Equal(t, 429, do("198.51.100.7"))
			require.Equal(t, 200, do("198.51.100.6"), "an IPv4 neighbour is another client")
		})
	}
}

// ipv6_prefix_len and ipv4_prefix_len set the networks clients are counted by: 128 counts
// each IPv6 address, 48 a site; 24 counts an IPv4 /24 as one client.
func TestRateLimitPrefixLengthsAreConfigurable(t *testing.T) {
	up := serveCounting(t)
	addr := rateLimitBehindProxy(t, "gnet", up.addr(), `
[routers.exact]
rule = "PathPrefix(`+"`/exact`"+`)"
service = "up"
middlewares = ["per-address"]
[routers.wide]
rule = "PathPrefix(`+"`/wide`"+`)"
service = "up"
middlewares = ["per-site"]
[middlewares.per-address]
type = "rate-limit"
rate = 0.01
burst = 1
ipv6_prefix_len = 128
[middlewares.per-site]
type = "rate-limit"
rate = 0.01
burst = 2
ipv6_prefix_len = 48
ipv4_prefix_len = 24
`)
	do := func(path, client string) int { return forwardedFor(t, addr, path, client, "") }
	require.Equal(t, 200, do("/exact", "2001:db8:9:9::1"))
	require.Equal(t, 429, do("/exact", "2001:db8:9:9::1"))
	require.Equal(t, 200, do("/exact", "2001:db8:9:9::2"), "each address is a client of its own")

	require.Equal(t, 200, do("/wide", "2001:db8:5:1::1"))
	require.Equal(t, 200, do("/wide", "2001:db8:5:2::1"))
	require.Equal(t, 429, do("/wide", "2001:db8:5:ffff::1"), "one /48")
	require.Equal(t, 200, do("/wide", "2001:db8:6::1"))
	require.Equal(t, 200, do("/wide", "198.51.100.1"))
	require.Equal(t, 200, do("/wide", "198.51.100.200"))
	require.Equal(t, 429, do("/wide", "::ffff:198.51.100.9"), "one /24, mapped or not")
	require.Equal(t, 200, do("/wide", "198.51.101.1"))
}

// key = "header:<Name>" counts a request whose field is empty as one without it, by its
// client: an empty value is no tenant, and sharing one bucket would let one client spend
// every other's.
func TestRateLimitByHeaderCountsAnEmptyFieldByClient(t *testing.T) {
	up := serveCounting(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			addr := rateLimitBehindProxy(t, engine, up.addr(), `
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["per-tenant"]
[middlewares.per-tenant]
type = "rate-limit"
rate = 0.01
burst = 1
key = "header:X-Tenant"
`)
			do := func(client, extra string) int { return forwardedFor(t, addr, "/v1/models", client, extra) }
			const empty, emptyOWS = "X-Tenant:\r\n", "X-Tenant:  \t \r\n"
			require.Equal(t, 200, do("192.0.2.1", empty))
			require.Equal(t, 429, do("192.0.2.1", emptyOWS), "the client's own bucket")
			require.Equal(t, 429, do("192.0.2.1", ""), "without the field: the same client's bucket")
			require.Equal(t, 200, do("192.0.2.2", empty), "another client with an empty field has its own bucket")
			require.Equal(t, 200, do("2001:db8:7:7::1", ""))
			require.Equal(t, 429, do("2001:db8:7:7::2", emptyOWS), "by network, as key = \"client_ip\" counts")

			require.Equal(t, 200, do("192.0.2.3", "X-Tenant: acme\r\n"))
			require.Equal(t, 429, do("192.0.2.4", "X-Tenant: acme\r\n"), "a tenant's bucket, whatever client")
		})
	}
}
