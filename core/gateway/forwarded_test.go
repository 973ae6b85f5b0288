package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// headFields returns the fields of a request head by lower-case name, values in order.
func headFields(head string) map[string][]string {
	fields := map[string][]string{}
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		k = strings.ToLower(k)
		fields[k] = append(fields[k], strings.TrimSpace(v))
	}
	return fields
}

// recordHeads is an upstream that answers every request with 200 and reports its head.
func recordHeads(t *testing.T) (*upstream, chan string) {
	heads := make(chan string, 8)
	up := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		heads <- head
		return echo(c, r, head, body)
	})
	return up, heads
}

// An untrusted client that claims another address (X-Forwarded-For, X-Real-IP, Forwarded,
// and the spellings an upstream may read the same way) must not get the claim to the
// upstream: an allow-list or rate limit keyed by client IP would believe it. The upstream
// sees the peer, 127.0.0.1, and the scheme, host and port sluice served. Both engines, with
// no trusted_ips and with trusted_ips that do not hold the peer.
func TestUntrustedClientSpoofedForwardingHeadersNeverReachUpstream(t *testing.T) {
	up, heads := recordHeads(t)
	const spoof = "GET /v1/models HTTP/1.1\r\nHost: api.example\r\n" +
		"X-Forwarded-For: 10.0.0.1\r\nX-Real-IP: 10.0.0.1\r\nForwarded: for=10.0.0.1;proto=https\r\n" +
		"X-Forwarded-Port: 443\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: admin.internal\r\n" +
		"X-Forwarded-Prefix: /admin\r\nX_Forwarded_For: 10.0.0.1\r\nTrue-Client-IP: 10.0.0.1\r\n\r\n"
	for _, engine := range engines {
		for name, extra := range map[string]string{
			"no trusted_ips":          "",
			"peer not in trusted_ips": `trusted_ips = ["10.0.0.0/8", "::1"]`,
		} {
			t.Run(engine+"/"+name, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), extra)
				_, port, err := net.SplitHostPort(addr)
				require.NoError(t, err)
				c := dial(t, addr)
				send(t, c, spoof)
				require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
				head := <-heads
				require.NotContains(t, head, "10.0.0.1", "a spoofed address reached the upstream")
				require.NotContains(t, head, "admin", "a spoofed host or prefix reached the upstream")
				f := headFields(head)
				require.Equal(t, []string{"127.0.0.1"}, f["x-forwarded-for"])
				require.Equal(t, []string{"127.0.0.1"}, f["x-real-ip"])
				require.Equal(t, []string{"http"}, f["x-forwarded-proto"])
				require.Equal(t, []string{"api.example"}, f["x-forwarded-host"])
				require.Equal(t, []string{port}, f["x-forwarded-port"])
				for _, gone := range []string{"forwarded", "x_forwarded_for", "true-client-ip", "x-forwarded-prefix"} {
					require.NotContains(t, f, gone)
				}
			})
		}
	}
}

// A load balancer in trusted_ips passes its chain on: X-Forwarded-For and Forwarded get the
// peer appended (one field line each), and its X-Forwarded-Proto, -Host, -Port and X-Real-IP
// are kept. What it leaves out is set from what sluice saw. Both engines.
func TestTrustedProxyForwardingChainExtended(t *testing.T) {
	up, heads := recordHeads(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), `trusted_ips = ["127.0.0.1/32"]`)
			_, port, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			c := dial(t, addr)
			r := bufio.NewReader(c)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: sluice.internal\r\n"+
				"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.2\r\nX-Real-IP: 203.0.113.9\r\n"+
				"Forwarded: for=203.0.113.9;proto=https\r\nX-Forwarded-Proto: https\r\n"+
				"X-Forwarded-Host: api.example\r\nX-Forwarded-Port: 443\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status)
			f := headFields(<-heads)
			require.Equal(t, []string{"203.0.113.9, 198.51.100.2, 127.0.0.1"}, f["x-forwarded-for"])
			require.Equal(t, []string{"for=203.0.113.9;proto=https, for=127.0.0.1;proto=http"}, f["forwarded"])
			require.Equal(t, []string{"203.0.113.9"}, f["x-real-ip"])
			require.Equal(t, []string{"https"}, f["x-forwarded-proto"])
			require.Equal(t, []string{"api.example"}, f["x-forwarded-host"])
			require.Equal(t, []string{"443"}, f["x-forwarded-port"])

			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: sluice.internal\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status)
			f = headFields(<-heads)
			require.Equal(t, []string{"127.0.0.1"}, f["x-forwarded-for"])
			require.Equal(t, []string{"127.0.0.1"}, f["x-real-ip"])
			require.Equal(t, []string{"http"}, f["x-forwarded-proto"])
			require.Equal(t, []string{"sluice.internal"}, f["x-forwarded-host"])
			require.Equal(t, []string{port}, f["x-forwarded-port"])
			require.NotContains(t, f, "forwarded", "sluice extends a Forwarded chain, never starts one")
		})
	}
}

// The client's address is the one the engine accepted the connection from, over IPv6 as over
// IPv4 (the gnet engine's loops accept with accept4 and convert the address the kernel filled
// in themselves): a gateway listening on [::1] tells the upstream its client is ::1. All
// engines; skipped on a machine without an IPv6 loopback.
func TestClientAddressOverIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	_ = ln.Close()
	up, heads := recordHeads(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			toml := gatewayTOML(engine, "PathPrefix(`/`)", "", fmt.Sprintf(`servers = [{ url = "http://%s" }]`, up.addr()))
			toml = strings.Replace(toml, `address = "127.0.0.1:0"`, `address = "[::1]:0"`, 1)
			c := dial(t, runGateway(t, "test.toml", toml).Addr("web"))
			local := c.LocalAddr().(*net.TCPAddr)
			require.Equal(t, "::1", local.IP.String(), "the client's own address")
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: api.example\r\n\r\n")
			require.Equal(t, 200, readResponse(t, bufio.NewReader(c), false).status)
			f := headFields(<-heads)
			require.Equal(t, []string{"::1"}, f["x-forwarded-for"])
			require.Equal(t, []string{"::1"}, f["x-real-ip"])
		})
	}
}
