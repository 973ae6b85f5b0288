package gateway

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The table of docs/admin-api.md lists every endpoint of the admin API, and no other.
func TestAdminDocsListEveryEndpoint(t *testing.T) {
	data, err := os.ReadFile("../../docs/admin-api.md")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "| method and path |") {
			start = i + 2
			break
		}
	}
	require.Positive(t, start, "docs/admin-api.md: no table of method and path")
	endpoint := regexp.MustCompile("`((?:GET|HEAD|POST|PUT|PATCH|DELETE) /[^`]*)`")
	var documented []string
	for _, l := range lines[start:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(l, "|"), "|")
		for _, m := range endpoint.FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	var served []string
	// Every route the admin listener may serve: those SLUICE_PPROF=1 adds included.
	for _, r := range (&Gateway{}).adminAPI(true) {
		served = append(served, r.pattern)
	}
	sort.Strings(documented)
	sort.Strings(served)
	require.Equal(t, served, documented, "docs/admin-api.md's endpoints, and those the admin API serves")
}
