package linkpath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Resolve names every link on the way, in any element of the path, and ends on a loop of
// links or a missing element without failing.
func TestResolve(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	mk := func(p string) { require.NoError(t, os.MkdirAll(filepath.Join(root, p), 0o755)) }
	ln := func(target, name string) { require.NoError(t, os.Symlink(target, filepath.Join(root, name))) }
	mk("releases/v1")
	require.NoError(t, os.WriteFile(filepath.Join(root, "releases/v1/real.toml"), nil, 0o644))
	ln("releases/v1", "current")
	ln("real.toml", "releases/v1/sluice.toml")
	ln(filepath.Join(root, "current"), "abs")
	ln("loop-b", "loop-a")
	ln("loop-a", "loop-b")

	for _, c := range []struct {
		path  string
		links []string
		final string
	}{
		{"current/sluice.toml", []string{"current", "releases/v1/sluice.toml"}, "releases/v1/real.toml"},
		{"abs/sluice.toml", []string{"abs", "current", "releases/v1/sluice.toml"}, "releases/v1/real.toml"},
		{"current/missing/x.toml", []string{"current"}, "releases/v1/missing/x.toml"},
		{"releases/v1", nil, "releases/v1"},
		{"loop-a", nil, ""},
	} {
		links, final := Resolve(filepath.Join(root, c.path))
		if c.path == "loop-a" {
			require.Len(t, links, MaxHops, "a loop ends after MaxHops links")
			continue
		}
		var want []string
		for _, l := range c.links {
			want = append(want, filepath.Join(root, l))
		}
		require.Equal(t, want, links, c.path)
		require.Equal(t, filepath.Join(root, c.final), final, c.path)
	}
}
