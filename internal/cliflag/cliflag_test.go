package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// newSet is a command's flags: one of each kind the commands use, and --header, which
// repeats.
func newSet(headers *[]string) *flag.FlagSet {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.String("config", "", "the config")
	fs.Int("concurrency", 0, "connections")
	fs.Duration("duration", 10*time.Second, "window")
	fs.Bool("quick", false, "smoke run")
	Repeatable(fs, "header", "a request header, repeatable", func(v string) error {
		*headers = append(*headers, v)
		return nil
	})
	return fs
}

func TestParseTakesFlagsAmongTheArguments(t *testing.T) {
	var headers []string
	fs := newSet(&headers)
	rest, err := Parse(fs, []string{"a", "--config", "x.toml", "b", "-quick", "--header", "A: 1", "--concurrency=4", "--", "--header", "c"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "--header", "c"}, rest)
	require.Equal(t, "x.toml", fs.Lookup("config").Value.String())
	require.Equal(t, "4", fs.Lookup("concurrency").Value.String())
	require.Equal(t, "true", fs.Lookup("quick").Value.String())
	require.Equal(t, []string{"A: 1"}, headers)
}

// A single-valued flag given twice with different values is refused, however it is spelt
// and wherever the two are among the arguments; the error names the flag as it was typed
// first, and both values.
func TestParseRefusesASingleValuedFlagGivenTwice(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--config", "a.toml", "--config", "b.toml"}, `flag --config given twice ("a.toml" and "b.toml"); give it once`},
		{[]string{"-config=a.toml", "arg", "--config", "b.toml"}, `flag -config given twice ("a.toml" and "b.toml"); give it once`},
		{[]string{"--concurrency", "4", "--concurrency=8"}, `flag --concurrency given twice ("4" and "8"); give it once`},
		{[]string{"--duration", "1s", "--duration", "2000ms"}, `flag --duration given twice ("1s" and "2000ms"); give it once`},
		{[]string{"--quick", "--quick=false"}, `flag --quick given twice ("true" and "false"); give it once`},
		{[]string{"--config", "a", "--config", "a", "--config", "b"}, `flag --config given twice ("a" and "b"); give it once`},
	} {
		var headers []string
		_, err := Parse(newSet(&headers), c.args)
		require.EqualError(t, err, c.msg, "%v", c.args)
	}
}

// The same value twice leaves nothing in doubt, and a Repeatable flag takes every value.
func TestParseAcceptsTheSameValueAgainAndRepeatableFlags(t *testing.T) {
	var headers []string
	fs := newSet(&headers)
	_, err := Parse(fs, []string{"--config", "a.toml", "--quick", "--header", "A: 1", "--config=a.toml", "--quick", "--header", "B: 2", "--header", "A: 1",
		"--duration", "1s", "--duration=1000ms", "--concurrency", "8", "--concurrency", "+8", "--quick=true"})
	require.NoError(t, err, "1s and 1000ms, 8 and +8, --quick and --quick=true are one value each")
	require.Equal(t, "1s", fs.Lookup("duration").Value.String())
	require.Equal(t, "a.toml", fs.Lookup("config").Value.String())
	require.Equal(t, []string{"A: 1", "B: 2", "A: 1"}, headers)
}

func TestParseErrorsNameTheFlagAsTyped(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--confg", "x.toml"}, "unknown flag --confg (did you mean --config?)"},
		{[]string{"x.toml", "-Config=x.toml"}, "unknown flag -Config (did you mean -config?)"},
		{[]string{"--concurency", "4"}, "unknown flag --concurency (did you mean --concurrency?)"},
		{[]string{"--heder", "A: 1"}, "unknown flag --heder (did you mean --header?)"},
		{[]string{"--hepl"}, "unknown flag --hepl (did you mean --help?)"},
		{[]string{"--c"}, "unknown flag --c"},
		{[]string{"--frob=1"}, "unknown flag --frob"},
		{[]string{"x.toml", "--config"}, "flag --config needs a value"},
		{[]string{"-duration"}, "flag -duration needs a value"},
	} {
		var headers []string
		_, err := Parse(newSet(&headers), c.args)
		require.EqualError(t, err, c.msg, "%v", c.args)
	}
	// A value the flag refuses: what the flag takes (the flag package says only "parse
	// error"), or the flag package's own reason, with the flag as typed.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--concurrency", "many"}, `invalid value "many" for flag --concurrency: want an integer`},
		{[]string{"-duration=soon"}, `invalid value "soon" for flag -duration: want a duration such as 500ms, 2s or 1m30s`},
		{[]string{"--quick=perhaps"}, `invalid boolean value "perhaps" for flag --quick: want true or false`},
		{[]string{"--concurrency", `1 for flag -config: x`}, `invalid value "1 for flag -config: x" for flag --concurrency: want an integer`},
		{[]string{"--concurrency", "99999999999999999999"}, `invalid value "99999999999999999999" for flag --concurrency: value out of range`},
	} {
		var headers []string
		_, err := Parse(newSet(&headers), c.args)
		require.EqualError(t, err, c.msg, "%v", c.args)
	}
}

// A value the command refuses after parsing reads as one the flag's type refuses, the flag
// named as it was typed.
func TestInvalidValueReadsAsParseDoes(t *testing.T) {
	args := []string{"-concurrency=-3", "--duration", "1s"}
	require.EqualError(t, InvalidValue(args, "concurrency", "-3", "want 1 or more"),
		`invalid value "-3" for flag -concurrency: want 1 or more`)
	require.EqualError(t, InvalidValue(args, "duration", "1s", "want 2s or more"),
		`invalid value "1s" for flag --duration: want 2s or more`)
	require.EqualError(t, InvalidValue(nil, "target", "x", "want a URL"),
		`invalid value "x" for flag --target: want a URL`, "a flag not among args is spelt --name")
}

// PrintDefaults spells each flag with two dashes, as the errors do, and changes nothing else.
func TestPrintDefaultsSpellsFlagsWithTwoDashes(t *testing.T) {
	var headers []string
	fs := newSet(&headers)
	var goStyle, ours bytes.Buffer
	fs.SetOutput(&goStyle)
	fs.PrintDefaults()
	PrintDefaults(&ours, fs)
	require.Contains(t, ours.String(), "  --concurrency int\n")
	require.Contains(t, ours.String(), "  --duration duration\n    \twindow (default 10s)\n")
	require.NotContains(t, ours.String(), "\n  -c")
	require.Equal(t, goStyle.String(), strings.ReplaceAll(ours.String(), "  --", "  -"))
	require.Same(t, &goStyle, fs.Output(), "fs's own output is left as it was")
}

// Parse prints nothing, help included, and leaves fs as it found it: its help still names
// each flag's type and leaves out zero defaults.
func TestParsePrintsNothingAndLeavesTheHelpAlone(t *testing.T) {
	var headers []string
	fs := newSet(&headers)
	var before bytes.Buffer
	fs.SetOutput(&before)
	fs.PrintDefaults()
	for _, args := range [][]string{{"--help"}, {"x", "-h"}, {"--frob"}, {"--config", "a", "--config", "b"}} {
		var out bytes.Buffer
		fs.SetOutput(&out)
		_, err := Parse(fs, args)
		require.Error(t, err, "%v", args)
		if args[len(args)-1] == "--help" || args[len(args)-1] == "-h" {
			require.True(t, errors.Is(err, flag.ErrHelp), "%v: %v", args, err)
		}
		require.Empty(t, out.String(), "%v", args)
		fs.PrintDefaults()
		require.Equal(t, before.String(), out.String(), "%v", args)
	}
	require.Contains(t, before.String(), "-concurrency int")
	require.Contains(t, before.String(), "-header value")
	require.NotContains(t, before.String(), "(default 0)")
}
