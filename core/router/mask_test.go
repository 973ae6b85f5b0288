package router

import (
	"strings"
	"testing"
)

func TestMaskValues(t *testing.T) {
	hide := func(name, _ string) bool { return strings.Contains(strings.ToLower(name), "key") }
	for _, tc := range []struct{ in, want string }{
		{"Header(`X-Api-Key`, `k-1`)", "Header(`X-Api-Key`, `<m>`)"},
		{`Header("X-Api-Key", "k\"1") && Path("/v1")`, "Header(\"X-Api-Key\", `<m>`) && Path(\"/v1\")"},
		{"!(HeaderRegexp(`Api-Key`,`^k-`) || Query(`key`, `v`)) && Query(`key`) && Header(`X-Tenant`, `a`)",
			"!(HeaderRegexp(`Api-Key`,`<m>`) || Query(`key`, `<m>`)) && Query(`key`) && Header(`X-Tenant`, `a`)"},
		{"Host(`key.example`) && PathPrefix(`/key`)", "Host(`key.example`) && PathPrefix(`/key`)"},
		{"Header(`X-Key`, `k-1`) && ${REST}", "Header(`X-Key`, `<m>`) && ${REST}"},
	} {
		if got := MaskValues(tc.in, hide, "<m>"); got != tc.want {
			t.Errorf("MaskValues(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
