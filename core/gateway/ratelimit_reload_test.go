package gateway_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A reload that changes a rate limit's rate or burst keeps what each client spent: a client
// that used up its bucket gets only what the new burst adds, and one that spent more than a
// tightened burst finds its bucket empty, instead of every client starting again with a full
// bucket. A client that spent nothing still has a whole bucket, of the new size.
func TestRateLimitKeepsWhatEachClientSpentAcrossAReloadThatChangesTheLimit(t *testing.T) {
	up := serveCounting(t)
	conf := func(burst int) string {
		return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
trusted_ips = ["127.0.0.1/32"]
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["per-client"]
[middlewares.per-client]
type = "rate-limit"
rate = 0.01   # no token comes back during the test
burst = %d
[admin]
address = ""
`, up.addr(), burst)
	}
	g, path := startFromFile(t, conf(2))
	addr := g.Addr("web")
	do := func(client string) int { return forwardedFor(t, addr, "/v1/models", client, "") }

	require.Equal(t, 200, do("192.0.2.1"))
	require.Equal(t, 200, do("192.0.2.1"))
	require.Equal(t, 429, do("192.0.2.1"), "the bucket of two is spent")
	require.Equal(t, 200, do("192.0.2.2"), "a second client spent one of two")

	require.NoError(t, reloadWith(t, g, path, conf(3)))
	require.Equal(t, addr, g.Addr("web"))
	require.Equal(t, 200, do("192.0.2.1"), "the third token the new burst adds")
	require.Equal(t, 429, do("192.0.2.1"), "and no more: the reload gave no fresh bucket")

	require.NoError(t, reloadWith(t, g, path, conf(1)))
	require.Equal(t, 429, do("192.0.2.1"), "a tightened burst leaves a spent bucket spent")
	require.Equal(t, 429, do("192.0.2.2"), "a client that spent one token has spent a bucket of one")
	require.Equal(t, 200, do("192.0.2.3"), "a client that spent nothing has a whole bucket")
	require.Equal(t, 429, do("192.0.2.3"))
}
