package config

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// trusted_ips is parsed once, at load, into the networks the entrypoint matches peers
// against: an address is a network of one, host bits are cleared, and an IPv4-mapped
// network is the IPv4 network it maps (peers are matched in their IPv4 form).
func TestTrustedIPsParsedAtLoad(t *testing.T) {
	c := mustLoad(t, withMinimal(
		`[entrypoints.api]`,
		`address = ":9"`,
		`trusted_ips = ["10.0.0.0/8", "192.0.2.7", "10.1.2.3/16", "fd00::/8", "::1", "::ffff:172.16.0.0/108", "::ffff:192.0.2.9", "0.0.0.0/0"]`,
	))
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("fd00::/8"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.0.2.9/32"),
		netip.MustParsePrefix("0.0.0.0/0"),
	}
	require.Equal(t, want, c.Entrypoints["api"].TrustedNets)
	require.Equal(t, "10.1.2.3/16", c.Entrypoints["api"].TrustedIPs[2], "the list as written is kept")
	require.Nil(t, c.Entrypoints["web"].TrustedNets, "default: no peer is trusted")
	doc := c.Document()["entrypoints"].(map[string]any)["api"].(map[string]any)
	require.Equal(t, "10.1.2.3/16", doc["trusted_ips"].([]any)[2], "shown as written")
}
