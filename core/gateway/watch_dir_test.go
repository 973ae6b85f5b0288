package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// routerTOML is one router of the configuration watchedTOML starts.
func routerTOML(name string) string {
	return fmt.Sprintf("[routers.%s]\nrule = \"PathPrefix(`/%s`)\"\nservice = \"up\"\n", name, name)
}

// A watched directory that a deployment replaces (the old one renamed away, a new one made in
// its place) is watched anew: the replacement reloads, and so do the changes made in the new
// directory after it. Both directories a configuration may name are replaced: the one
// --config names and providers.file.directory.
func TestWatchFollowsAReplacedDirectory(t *testing.T) {
	for _, c := range []struct {
		name string
		// setup writes the configuration into root, with routers.a in the directory dir, and
		// returns the path to start the gateway on.
		setup func(t *testing.T, root, dir string) string
	}{
		{"config directory", func(t *testing.T, root, dir string) string {
			require.NoError(t, os.Mkdir(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "00-main.toml"), []byte(watchedTOML()), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "10-a.toml"), []byte(routerTOML("a")), 0o644))
			return dir
		}},
		{"providers.file.directory", func(t *testing.T, root, dir string) string {
			main := filepath.Join(root, "sluice.toml")
			toml := strings.Replace(watchedTOML(), "[providers.file]\n", "[providers.file]\ndirectory = \"conf.d/\"\n", 1)
			require.NoError(t, os.WriteFile(main, []byte(toml), 0o644))
			require.NoError(t, os.Mkdir(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "10-a.toml"), []byte(routerTOML("a")), 0o644))
			return main
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "conf.d")
			g := startWatched(t, c.setup(t, root, dir))
			require.NotNil(t, g.Snapshot().Config.Routers["a"])

			// The deployment: a new directory, with the old files and one more, takes the
			// old one's name.
			next := filepath.Join(root, "conf.d.next")
			require.NoError(t, os.Mkdir(next, 0o755))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries {
				data, err := os.ReadFile(filepath.Join(dir, e.Name()))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(next, e.Name()), data, 0o644))
			}
			require.NoError(t, os.WriteFile(filepath.Join(next, "20-b.toml"), []byte(routerTOML("b")), 0o644))
			require.NoError(t, os.Rename(dir, filepath.Join(root, "conf.d.old")))
			require.NoError(t, os.Rename(next, dir))
			// A reload between the two renames, which finds no directory, may be refused.
			waitInForce := func(name string) {
				require.Eventually(t, func() bool {
					return g.Snapshot().Config.Routers[name] != nil
				}, 10*time.Second, 5*time.Millisecond, "no reload put routers.%s in force", name)
			}
			waitInForce("b")

			// An edit in the new directory.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "30-c.toml"), []byte(routerTOML("c")), 0o644))
			waitInForce("c")
		})
	}
}

// A configuration file whose directory a deployment replaces (the old one renamed away, a new
// one holding the new file renamed into its place) reloads, and so does an edit of the file
// in the new directory.
func TestWatchFollowsAReplacedFileDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "sluice.toml")
	require.NoError(t, os.WriteFile(path, []byte(watchedTOML("a")), 0o644))
	g := startWatched(t, path)
	require.NotNil(t, g.Snapshot().Config.Routers["a"])
	waitInForce := func(name string) {
		require.Eventually(t, func() bool {
			return g.Snapshot().Config.Routers[name] != nil
		}, 10*time.Second, 5*time.Millisecond, "no reload put routers.%s in force", name)
	}

	next := filepath.Join(root, "conf.next")
	require.NoError(t, os.Mkdir(next, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(next, "sluice.toml"), []byte(watchedTOML("a", "b")), 0o644))
	require.NoError(t, os.Rename(dir, filepath.Join(root, "conf.old")))
	require.NoError(t, os.Rename(next, dir))
	waitInForce("b")

	// An edit of the new file, written as an editor does: a new file renamed over it.
	tmp := filepath.Join(dir, ".sluice.toml.swp")
	require.NoError(t, os.WriteFile(tmp, []byte(watchedTOML("a", "b", "c")), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	waitInForce("c")
}
