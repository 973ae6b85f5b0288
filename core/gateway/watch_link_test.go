package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// watchedTOML is a configuration that watches its files, with one router per name.
func watchedTOML(routers ...string) string {
	s := "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"\"\n" +
		"[providers.file]\nwatch = true\ndebounce = \"10ms\"\n" +
		"[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"
	for _, r := range routers {
		s += fmt.Sprintf("[routers.%s]\nrule = \"PathPrefix(`/%s`)\"\nservice = \"up\"\n", r, r)
	}
	return s
}

// startWatched starts a gateway on the configuration at path, drained when the test ends.
func startWatched(t *testing.T, path string) *gateway.Gateway {
	t.Helper()
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	return g
}

// waitRouter waits for the file watch to put in force a configuration with router name.
func waitRouter(t *testing.T, g *gateway.Gateway, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return g.Snapshot().Config.Routers[name] != nil
	}, 10*time.Second, 5*time.Millisecond, "no reload put routers.%s in force", name)
	_, failed := g.Reloads()
	require.Zero(t, failed)
}

// A Kubernetes ConfigMap mounts each key as a link to ..data/<key>, ..data a link to a
// directory of the current version; an update writes a new version's directory and renames a
// new ..data link over the old one. The watch sees each update, also after the first.
func TestWatchFollowsAConfigMapUpdate(t *testing.T) {
	for _, viaDir := range []bool{true, false} {
		t.Run(fmt.Sprintf("dir=%v", viaDir), func(t *testing.T) {
			cm := t.TempDir()
			version := func(n int, routers ...string) {
				d := filepath.Join(cm, fmt.Sprintf("..v%d", n))
				require.NoError(t, os.Mkdir(d, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(d, "sluice.toml"), []byte(watchedTOML(routers...)), 0o644))
				tmp := filepath.Join(cm, "..data_tmp")
				require.NoError(t, os.Symlink(filepath.Base(d), tmp))
				require.NoError(t, os.Rename(tmp, filepath.Join(cm, "..data")))
			}
			version(1, "a")
			require.NoError(t, os.Symlink("..data/sluice.toml", filepath.Join(cm, "sluice.toml")))
			path := filepath.Join(cm, "sluice.toml")
			if viaDir {
				path = cm
			}
			g := startWatched(t, path)
			version(2, "a", "b")
			waitRouter(t, g, "b")
			version(3, "a", "b", "c")
			waitRouter(t, g, "c")
		})
	}
}

// A configuration file that is a link to a file elsewhere reloads when that file is edited,
// in place or by renaming a new file over it.
func TestWatchFollowsALinkedFile(t *testing.T) {
	root := t.TempDir()
	real, etc := filepath.Join(root, "real"), filepath.Join(root, "etc")
	require.NoError(t, os.Mkdir(real, 0o755))
	require.NoError(t, os.Mkdir(etc, 0o755))
	target := filepath.Join(real, "sluice.toml")
	require.NoError(t, os.WriteFile(target, []byte(watchedTOML("a")), 0o644))
	path := filepath.Join(etc, "sluice.toml")
	require.NoError(t, os.Symlink("../real/sluice.toml", path))
	g := startWatched(t, path)

	require.NoError(t, os.WriteFile(target, []byte(watchedTOML("a", "b")), 0o644)) // in place
	waitRouter(t, g, "b")
	tmp := filepath.Join(real, ".sluice.toml.new")
	require.NoError(t, os.WriteFile(tmp, []byte(watchedTOML("a", "b", "c")), 0o644))
	require.NoError(t, os.Rename(tmp, target)) // as sed -i and editors do
	waitRouter(t, g, "c")
}

// A release deployed as a directory behind a link (current -> releases/v1), switched by
// renaming a new link over the old one: the watch follows the switch whether the
// configuration path is the linked directory or a file under it, also after the first.
func TestWatchFollowsALinkedDirectorySwitch(t *testing.T) {
	for _, viaDir := range []bool{true, false} {
		t.Run(fmt.Sprintf("dir=%v", viaDir), func(t *testing.T) {
			root := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(root, "releases"), 0o755))
			release := func(n int, routers ...string) {
				d := filepath.Join(root, "releases", fmt.Sprintf("v%d", n))
				require.NoError(t, os.Mkdir(d, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(d, "sluice.toml"), []byte(watchedTOML(routers...)), 0o644))
				tmp := filepath.Join(root, "current.new")
				require.NoError(t, os.Symlink(filepath.Join("releases", filepath.Base(d)), tmp))
				require.NoError(t, os.Rename(tmp, filepath.Join(root, "current")))
			}
			release(1, "a")
			path := filepath.Join(root, "current")
			if !viaDir {
				path = filepath.Join(path, "sluice.toml")
			}
			g := startWatched(t, path)
			release(2, "a", "b")
			waitRouter(t, g, "b")
			release(3, "a", "b", "c")
			waitRouter(t, g, "c")
		})
	}
}
