package ratelimit

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// Two addresses share a key exactly when they agree on the prefix: the last address inside
// the network and the first one past it, at each boundary.
func TestNetworkKeyAtPrefixBoundaries(t *testing.T) {
	for _, c := range []struct {
		a, b   string
		v4, v6 int
		same   bool
	}{
		{"2001:db8:1:2::", "2001:db8:1:2:ffff:ffff:ffff:ffff", 32, 64, true},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:3::", 32, 64, false},
		{"2001:db8:1:1:ffff:ffff:ffff:ffff", "2001:db8:1:2::", 32, 64, false},
		{"2001:db8:1:2::1", "2001:db8:1:2::1", 32, 128, true},
		{"2001:db8:1:2::1", "2001:db8:1:2::", 32, 128, false},
		{"2001:db8:1:2::", "2001:db8:1:2::1", 32, 127, true},
		{"2001:db8:1:2::1", "2001:db8:1:2::2", 32, 127, false},
		{"2001:db8:1::", "2001:db8:1:ffff:ffff:ffff:ffff:ffff", 32, 48, true},
		{"2001:db8:1:ffff::", "2001:db8:2::", 32, 48, false},
		{"2001:db8::1", "2002::1", 32, 1, true},
		{"7fff::1", "8000::", 32, 1, false},
		{"2001:db8:1:2:8000::", "2001:db8:1:2:ffff::", 32, 65, true},
		{"2001:db8:1:2:7fff::", "2001:db8:1:2:8000::", 32, 65, false},

		{"198.51.100.7", "198.51.100.7", 32, 64, true},
		{"198.51.100.7", "198.51.100.6", 32, 64, false},
		{"198.51.100.7", "198.51.100.6", 31, 64, true},
		{"198.51.100.0", "198.51.100.255", 24, 64, true},
		{"198.51.100.255", "198.51.101.0", 24, 64, false},
		{"1.2.3.4", "127.255.255.255", 1, 64, true},
		{"127.255.255.255", "128.0.0.0", 1, 64, false},

		// An IPv4-mapped address is its IPv4 client, cut by the IPv4 length.
		{"::ffff:198.51.100.7", "198.51.100.7", 32, 64, true},
		{"::ffff:198.51.100.7", "198.51.100.6", 32, 64, false},
		{"::ffff:198.51.100.7", "198.51.100.200", 24, 128, true},
		// The families never share a key, nor does a network whose bits are all zero.
		{"0.0.0.0", "::", 32, 128, false},
		{"198.51.100.7", "::c633:6407", 32, 96, false},
		{"10.0.0.1", "a00::", 8, 8, false},
	} {
		ka := appendNetworkKey(nil, netip.MustParseAddr(c.a), c.v4, c.v6)
		kb := appendNetworkKey(nil, netip.MustParseAddr(c.b), c.v4, c.v6)
		require.Equal(t, c.same, string(ka) == string(kb), "%s and %s with /%d and /%d: %x, %x", c.a, c.b, c.v4, c.v6, ka, kb)
	}
	require.Empty(t, appendNetworkKey(nil, netip.Addr{}, 32, 64), "no address, no key")
	require.Len(t, appendNetworkKey(nil, netip.MustParseAddr("2001:db8::1"), 32, 64), 16)
	require.Len(t, appendNetworkKey(nil, netip.MustParseAddr("::ffff:192.0.2.1"), 32, 64), 4)
	v6 := netip.MustParseAddr("2001:db8::1")
	require.Zero(t, testing.AllocsPerRun(100, func() {
		var buf [16]byte
		appendNetworkKey(buf[:0], v6, 32, 64)
	}))
}
