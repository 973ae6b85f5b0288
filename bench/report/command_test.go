package report

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Command line of a report, pasted into a shell, runs the same argv, whatever its
// arguments hold: separators, spaces, quotes, expansions, globs, comments, backticks.
func TestCommandLineRoundTripsThroughAShell(t *testing.T) {
	argv := []string{
		"sluice-bench", "compare", "--adversary", "noread=16;segment=8", "--sim-args", "--seed 3 --tokens 8",
		"--workload", "json,sse", "--md", "it's.md", "--out", `a"b.json`, "--sluice-extra", "$HOME/x.toml",
		"--bin", "~/bin", "--peers", "", "--engines", "gnet@/tmp/o ld", "#not-a-comment", "a\\b", "*", "[x]",
		"{a,b}", "`date`", "$(date)", "a&b|c<d>e", "tab\there", "new\nline", "é", "'", "''", "!x", "-x=1,2:3/4.5_6%7+8@9",
	}
	line := CommandLine(argv...)
	for _, sh := range []string{"sh", "bash"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		// The shell splits the line into its positional parameters and writes each back,
		// NUL-terminated: set -f keeps globs from matching the working directory's files,
		// which a pasted line would not see either.
		var out bytes.Buffer
		cmd := exec.Command(path, "-c", "set -- "+line+"\nprintf '%s\\0' \"$@\"")
		cmd.Dir = t.TempDir()
		cmd.Stdout = &out
		require.NoError(t, cmd.Run(), "%s: %s", sh, line)
		got := strings.Split(strings.TrimSuffix(out.String(), "\x00"), "\x00")
		require.Equal(t, argv, got, "%s: %s", sh, line)
	}
	// Plain arguments stay as they are, so that the usual line reads as typed.
	require.Equal(t, "sluice-bench compare --quick --engines gnet@bin --workload json,sse --rate 0.5",
		CommandLine("sluice-bench", "compare", "--quick", "--engines", "gnet@bin", "--workload", "json,sse", "--rate", "0.5"))
	require.Equal(t, `sluice-bench compare --adversary 'noread=16;segment=8' --md 'it'\''s.md' --peers ''`,
		CommandLine("sluice-bench", "compare", "--adversary", "noread=16;segment=8", "--md", "it's.md", "--peers", ""))
}

// The Markdown report shows the Command line whole in its code span, backticks included.
func TestMarkdownCommandSpanHoldsTheLine(t *testing.T) {
	for _, line := range []string{"sluice-bench compare --quick", "sluice-bench compare --md '`x`'", "`a`` b`"} {
		var b strings.Builder
		require.NoError(t, (&Comparison{Command: line}).Markdown(&b))
		first, _, _ := strings.Cut(b.String(), "\n")
		span := strings.TrimSuffix(strings.TrimPrefix(first, "Command: "), "  ")
		// CommonMark 6.1: the opening and closing backtick strings are equally long and the
		// content holds no run of that length; one space each side is stripped when both are
		// there.
		n := len(span) - len(strings.TrimLeft(span, "`"))
		require.Equal(t, n, len(span)-len(strings.TrimRight(span, "`")), "%q", span)
		content := span[n : len(span)-n]
		for _, run := range strings.FieldsFunc(content, func(r rune) bool { return r != '`' }) {
			require.NotEqual(t, n, len(run), "%q: a run as long as the fence ends the span", span)
		}
		if strings.HasPrefix(content, " ") && strings.HasSuffix(content, " ") && strings.Trim(content, " ") != "" {
			content = content[1 : len(content)-1]
		}
		require.Equal(t, line, content)
	}
}
