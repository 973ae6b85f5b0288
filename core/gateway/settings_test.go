package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
)

// An entrypoint's upstream_io and upstream_connect reach the engine's settings: the loop path,
// and the loop's own connects only when asked for.
func TestSettingsCarryTheUpstreamPath(t *testing.T) {
	for _, c := range []struct {
		keys                string
		loop, connectOnLoop bool
	}{
		{``, true, false},
		{`upstream_connect = "loop"`, true, true},
		{`upstream_connect = "worker"`, true, false},
		{`upstream_io = "worker"`, false, false},
	} {
		cfg, err := config.LoadBytes("s.toml", []byte("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n"+c.keys+
			"\n[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\n[services.s.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"))
		require.NoError(t, err, c.keys)
		s := Settings(cfg.Entrypoints["web"])
		require.Equal(t, c.loop, s.UpstreamLoop, c.keys)
		require.Equal(t, c.connectOnLoop, s.ConnectOnLoop, c.keys)
	}
}
