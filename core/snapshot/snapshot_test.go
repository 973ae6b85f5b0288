package snapshot_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// max_idle_conns = 0 keeps no idle connection, as documented, rather than the pool's default.
func TestMaxIdleConnsZeroKeepsNone(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int
	}{
		{"max_idle_conns = 0", 0},
		{"max_idle_conns = 7", 7},
		{"", config.DefaultMaxIdleConns},
	} {
		toml := fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\n[services.s.load_balancer]\nservers = [{ url = \"http://127.0.0.1:1\" }]\n%s\n", tc.line)
		cfg, err := config.LoadBytes("t.toml", []byte(toml))
		require.NoError(t, err)
		s, err := snapshot.Compile(cfg, nil, 1)
		require.NoError(t, err)
		require.Equal(t, tc.want, s.Services["s"].Backends[0].Pool.Options().MaxIdleConns, tc.line)
		s.Retire(nil)
	}
}
