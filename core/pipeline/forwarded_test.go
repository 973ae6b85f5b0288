package pipeline

import (
	"time"

	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// upstreamHead returns the head sent upstream for a request head from peer on an entrypoint
// that trusts the given networks and listens on port 8080, with its lines lower-cased.
func upstreamHead(t *testing.T, tls bool, trusted []string, peer, head string) []string {
	t.Helper()
	rt := &Route{Name: "fwd", Service: &Service{Name: "up"}, M: metrics.ForRoute("fwd", "up")}
	ep := NewEntrypoint("fwd", tls, oneRoute{rt}, metrics.ForEntrypoint("fwd"), nil)
	ep.Port = "8080"
	for _, s := range trusted {
		ep.TrustedIPs = append(ep.TrustedIPs, netip.MustParsePrefix(s))
	}
	var rc RequestCtx
	rc.SetClientAddr(netip.MustParseAddr(peer))
	require.NoError(t, rc.Req.ParseRequestHead([]byte(head), nil))
	require.NoError(t, ep.route(&rc, time.Now()))
	up := string(appendUpstreamHead(nil, &rc, &Backend{Host: []byte("backend:8000")}))
	return strings.Split(strings.ToLower(strings.TrimSuffix(up, "\r\n\r\n")), "\r\n")
}

// fieldValues returns the values of the fields named name (lower case) in lines, in order.
func fieldValues(lines []string, name string) []string {
	var vs []string
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ": "); ok && k == name {
			vs = append(vs, v)
		}
	}
	return vs
}

// Every forwarding field an untrusted peer sends is dropped, spellings with '_' included
// (CGI-style servers read X_Forwarded_For as X-Forwarded-For), and the ones sluice vouches
// for are set from what it saw.
func TestUntrustedPeerForwardingFieldsReplaced(t *testing.T) {
	const spoof = "GET /v1/models HTTP/1.1\r\nHost: api.example\r\n" +
		"X-Forwarded-For: 10.0.0.1\r\nx-forwarded-for: 10.0.0.2\r\nX_Forwarded_For: 10.0.0.3\r\n" +
		"X-Real-IP: 10.0.0.4\r\nX_Real_Ip: 10.0.0.5\r\nForwarded: for=10.0.0.6;proto=https\r\n" +
		"X-Forwarded-Proto: https\r\nX-Forwarded-Host: admin.internal\r\nX-Forwarded-Port: 443\r\n" +
		"X-Forwarded-Server: lb\r\nX-Forwarded-Prefix: /admin\r\nX-Forwarded-Uri: /admin\r\n" +
		"X-Forwarded-Ssl: on\r\nX-Forwarded-Tls-Client-Cert: MII\r\nX-Forwarded-User: root\r\n" +
		"True-Client-IP: 10.0.0.7\r\nX-Client-IP: 10.0.0.8\r\nClient-IP: 10.0.0.9\r\n" +
		"X-Cluster-Client-IP: 10.0.0.10\r\nX-Original-Forwarded-For: 10.0.0.11\r\n" +
		"Forwarded-For: 10.0.0.12\r\nX-Forwarded: for=10.0.0.13\r\nX-Keep: yes\r\n\r\n"
	for _, trusted := range [][]string{nil, {"10.0.0.0/8", "::1/128"}} {
		lines := upstreamHead(t, false, trusted, "192.0.2.1", spoof)
		require.NotContains(t, strings.Join(lines, "\n"), "10.0.0.", "%v", trusted)
		for _, l := range lines[1:] {
			k, _, _ := strings.Cut(l, ": ")
			require.NotContains(t, k, "_", "%v", trusted)
		}
		require.Equal(t, []string{"192.0.2.1"}, fieldValues(lines, "x-forwarded-for"))
		require.Equal(t, []string{"192.0.2.1"}, fieldValues(lines, "x-real-ip"))
		require.Equal(t, []string{"http"}, fieldValues(lines, "x-forwarded-proto"))
		require.Equal(t, []string{"api.example"}, fieldValues(lines, "x-forwarded-host"))
		require.Equal(t, []string{"8080"}, fieldValues(lines, "x-forwarded-port"))
		for _, gone := range []string{"forwarded", "x-forwarded-server", "x-forwarded-prefix", "x-forwarded-uri", "x-forwarded-ssl", "x-forwarded-tls-client-cert", "x-forwarded-user", "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "x-original-forwarded-for", "forwarded-for", "x-forwarded"} {
			require.Empty(t, fieldValues(lines, gone), gone)
		}
		require.Equal(t, []string{"yes"}, fieldValues(lines, "x-keep"))
	}
}

// A trusted peer's chains are extended with the peer, in one field line each; its other
// forwarding fields are kept as sent; an IPv6 peer is a quoted, bracketed Forwarded node.
func TestTrustedPeerChainsExtended(t *testing.T) {
	const head = "GET / HTTP/1.1\r\nHost: sluice.internal\r\n" +
		"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.2\r\nX_Forwarded_For: 10.0.0.3\r\n" +
		"Forwarded: for=203.0.113.9;proto=https\r\nForwarded: for=\"[2001:db8::9]\"\r\n" +
		"X-Forwarded-Proto: https\r\nX-Forwarded-Host: api.example\r\nX-Forwarded-Port: 443\r\n" +
		"X-Real-IP: 203.0.113.9\r\nX-Forwarded-Prefix: /v1\r\n\r\n"
	lines := upstreamHead(t, true, []string{"2001:db8:1::/48"}, "2001:db8:1::7", head)
	require.Equal(t, []string{"203.0.113.9, 198.51.100.2, 2001:db8:1::7"}, fieldValues(lines, "x-forwarded-for"))
	require.Equal(t, []string{`for=203.0.113.9;proto=https, for="[2001:db8::9]", for="[2001:db8:1::7]";proto=https`}, fieldValues(lines, "forwarded"))
	require.Equal(t, []string{"https"}, fieldValues(lines, "x-forwarded-proto"))
	require.Equal(t, []string{"api.example"}, fieldValues(lines, "x-forwarded-host"))
	require.Equal(t, []string{"443"}, fieldValues(lines, "x-forwarded-port"))
	require.Equal(t, []string{"203.0.113.9"}, fieldValues(lines, "x-real-ip"))
	require.Equal(t, []string{"/v1"}, fieldValues(lines, "x-forwarded-prefix"))
	require.NotContains(t, strings.Join(lines, "\n"), "10.0.0.3", "an '_' spelling is dropped from every peer")

	// Fields the trusted peer did not send are set from what sluice saw; no Forwarded is
	// started.
	lines = upstreamHead(t, false, []string{"192.0.2.0/24"}, "192.0.2.1", "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	require.Equal(t, []string{"192.0.2.1"}, fieldValues(lines, "x-forwarded-for"))
	require.Equal(t, []string{"192.0.2.1"}, fieldValues(lines, "x-real-ip"))
	require.Equal(t, []string{"http"}, fieldValues(lines, "x-forwarded-proto"))
	require.Equal(t, []string{"h"}, fieldValues(lines, "x-forwarded-host"))
	require.Equal(t, []string{"8080"}, fieldValues(lines, "x-forwarded-port"))
	require.Empty(t, fieldValues(lines, "forwarded"))
}

// A dual-stack listener reports an IPv4 peer as an IPv4-mapped IPv6 address, and a
// link-local one with a zone: both match the networks as configured, and the upstream sees
// the plain address.
func TestPeerAddressNormalised(t *testing.T) {
	lines := upstreamHead(t, false, []string{"192.0.2.0/24"}, "::ffff:192.0.2.1", "GET / HTTP/1.1\r\nHost: h\r\nX-Real-IP: 203.0.113.9\r\n\r\n")
	require.Equal(t, []string{"192.0.2.1"}, fieldValues(lines, "x-forwarded-for"))
	require.Equal(t, []string{"203.0.113.9"}, fieldValues(lines, "x-real-ip"), "trusted")
	lines = upstreamHead(t, false, []string{"fe80::/10"}, "fe80::1%eth0", "GET / HTTP/1.1\r\nHost: h\r\nX-Real-IP: 203.0.113.9\r\n\r\n")
	require.Equal(t, []string{"fe80::1"}, fieldValues(lines, "x-forwarded-for"))
	require.Equal(t, []string{"203.0.113.9"}, fieldValues(lines, "x-real-ip"), "trusted")
}

func TestForwardingKind(t *testing.T) {
	for k, want := range map[string]fwdKind{
		"X-Forwarded-For": fwdFor, "x-forwarded-for": fwdFor, "X_FORWARDED_FOR": fwdAlias, "X-Forwarded_For": fwdAlias,
		"Forwarded": fwdForwarded, "forwarded": fwdForwarded, "X-Forwarded-Proto": fwdProto, "X-Forwarded-Host": fwdHost,
		"X-Forwarded-Port": fwdPort, "X-Real-Ip": fwdRealIP, "X_Real_IP": fwdAlias, "X-Forwarded-Anything": fwdOther,
		"X_Forwarded_Anything": fwdAlias, "X-Forwarded-": fwdNone, "X-Forwarded": fwdOther, "X-Forwarder": fwdNone,
		"Content-Type": fwdNone, "Client-IP": fwdOther, "Via": fwdNone, "X-Request-Id": fwdNone, "Forwarded-Fo": fwdNone,
	} {
		require.Equal(t, want, forwardingKind([]byte(k)), k)
	}
}
