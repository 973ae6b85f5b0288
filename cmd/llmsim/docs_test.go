package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// The flags table of docs/llmsim.md lists every flag llmsim takes, and no other, with the
// default the flag has.
func TestDocsListEveryFlag(t *testing.T) {
	data, err := os.ReadFile("../../docs/llmsim.md")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "| flag | default |") {
			start = i + 2
			break
		}
	}
	require.Positive(t, start, "docs/llmsim.md: no table of flags")
	name := regexp.MustCompile("`--([a-z][a-z-]*)")
	documented := map[string]string{} // flag -> its default as the table gives it
	for _, l := range lines[start:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		c := strings.Split(strings.Trim(l, "|"), "|")
		require.GreaterOrEqual(t, len(c), 3, "%q", l)
		names := name.FindAllStringSubmatch(c[0], -1)
		defs := strings.Split(strings.TrimSpace(c[1]), " / ") // `--a` / `--b` | 0 / 2s
		for i, n := range names {
			d := defs[0]
			if len(defs) == len(names) {
				d = defs[i]
			}
			require.NotContains(t, documented, n[1], "--%s listed twice", n[1])
			documented[n[1]] = strings.Trim(strings.TrimSpace(d), "`")
		}
	}
	cfg := llmsim.DefaultConfig()
	fs, _ := newFlagSet(&cfg)
	fs.VisitAll(func(f *flag.Flag) {
		d, ok := documented[f.Name]
		if !assert.True(t, ok, "docs/llmsim.md lists no flag --%s", f.Name) {
			return
		}
		delete(documented, f.Name)
		if f.DefValue == "" {
			return // the table says what an empty flag means: (any), (none), aggregated
		}
		want, errWant := time.ParseDuration(f.DefValue)
		got, errGot := time.ParseDuration(d)
		if errWant == nil && errGot == nil {
			assert.Equal(t, want, got, "docs/llmsim.md: the default of --%s", f.Name)
			return
		}
		assert.Equal(t, f.DefValue, d, "docs/llmsim.md: the default of --%s", f.Name)
	})
	assert.Empty(t, documented, "docs/llmsim.md lists flags llmsim does not take")
}
