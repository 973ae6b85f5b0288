package snapshot_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// A recompile whose service mirrors as before takes its mirror over, the copies it queued and
// its senders with it, whatever became of the shadow service's servers; one that changes the
// mirror's settings makes a new mirror. A recompile that is refused leaves the mirror to the
// configuration in force, and the next one takes it over still.
func TestRecompileTakesOverAnUnchangedMirror(t *testing.T) {
	compile := func(percentage, shadowServer, extra string, prev *snapshot.Snapshot) (*snapshot.Snapshot, error) {
		toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "s"
[services.s.load_balancer]
servers = [{ url = "http://127.0.0.1:1001" }]
[services.s.mirror]
service = "shadow"
percentage = %s
[services.shadow.load_balancer]
servers = [{ url = %q }]
%s
`, percentage, shadowServer, extra)
		cfg, err := config.LoadBytes("t.toml", []byte(toml))
		require.NoError(t, err)
		s, err := snapshot.Compile(cfg, prev, 1)
		if err == nil {
			t.Cleanup(func() { s.Retire(nil) })
		}
		return s, err
	}
	first, err := compile("10", "http://127.0.0.1:2001", "", nil)
	require.NoError(t, err)
	m := first.Services["s"].Mirror
	require.NotNil(t, m)

	same, err := compile("10", "http://127.0.0.1:2001", "", first)
	require.NoError(t, err)
	require.Same(t, m, same.Services["s"].Mirror, "nothing changed")

	_, err = compile("10", "http://127.0.0.1:2001", fmt.Sprintf("[log]\naccess_log = %q", t.TempDir()+"/missing/access.log"), same)
	require.Error(t, err, "an access log that cannot be opened refuses the configuration")
	require.Same(t, m, same.Services["s"].Mirror, "a refused configuration changes nothing")

	moved, err := compile("10", "http://127.0.0.1:2002", "", same)
	require.NoError(t, err)
	require.Same(t, m, moved.Services["s"].Mirror, "the shadow service changed, not the mirror")

	changed, err := compile("20", "http://127.0.0.1:2002", "", moved)
	require.NoError(t, err)
	require.NotSame(t, m, changed.Services["s"].Mirror, "another share is another mirror")
}
