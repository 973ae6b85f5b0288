package suggest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNearest(t *testing.T) {
	names := []string{"serve", "validate", "version", "help"}
	for name, want := range map[string]string{
		"serv": "serve", "valdate": "validate", "vresion": "version", "hlp": "help",
		"frobnicate": "", "s": "", "he": "", "": "", "--serve": "serve",
	} {
		require.Equal(t, want, Nearest(name, names...), "%q", name)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"address", "adress", 1}, {"PathPrefx", "PathPrefix", 1}, {"kitten", "sitting", 3},
		{strings.Repeat("a", 65), "a", 99},
	} {
		require.Equal(t, c.want, Distance(c.a, c.b), "%q %q", c.a, c.b)
	}
}
