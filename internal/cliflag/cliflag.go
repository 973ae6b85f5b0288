// Package cliflag is what the sluice and sluice-bench command lines add to the flag package,
// so that both answer a mistyped command line the same way:
//
//   - flags may come before, between and after a command's arguments, and "--" ends them;
//   - an error names the flag as the user typed it (--config, where Go's messages say
//     -config), and an unknown flag that is a near miss of a defined one gets
//     "(did you mean --config?)";
//   - a single-valued flag given twice with different values is refused, where the flag
//     package would silently keep the last: whoever repeats one has almost always made a
//     mistake. A flag meant to repeat is defined with Repeatable.
//
// Parse prints nothing: each command prints the error, or its help, its own way.
package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/internal/suggest"
)

// Parse parses the flags of fs in args and returns the arguments among them, in order. It
// returns flag.ErrHelp for -h, -help or --help (when fs defines no such flag), and for a
// command line fs does not accept an error whose message is one line such as
//
//	unknown flag --confg (did you mean --config?)
//	flag --config needs a value
//	flag --config given twice ("a.toml" and "b.toml"); give it once
//
// Other errors (a value the flag refuses) are the flag package's. fs's output and Usage are
// not used, and fs must have been made with flag.ContinueOnError.
func Parse(fs *flag.FlagSet, args []string) (rest []string, err error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var twice *repeat
	// The flags' values are wrapped only while parsing: fs.PrintDefaults names a flag's type
	// and leaves out a zero default by looking at the value's own type.
	var wrapped []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*repeatable); !ok {
			f.Value = &once{Value: f.Value, twice: &twice, name: f.Name}
			wrapped = append(wrapped, f)
		}
	})
	defer func() {
		for _, f := range wrapped {
			f.Value = f.Value.(*once).Value
		}
		fs.SetOutput(out)
		fs.Usage = usage
	}()

	all := args
	for {
		err := fs.Parse(args)
		if twice != nil {
			return nil, fmt.Errorf("flag %s given twice (%q and %q); give it once", typed(twice.name, all), twice.first, twice.second)
		}
		if err != nil {
			return nil, describe(err, all, fs)
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		// Parse stops at the first argument, or just after a "--", which it consumes.
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// describe rewrites the flag package's error about an undefined flag, one missing its value,
// or a value it refuses, as the user typed the flag; an undefined flag within two edits of one
// fs defines (or of help) gets "did you mean" that one, spelt with the dashes the user typed.
func describe(err error, args []string, fs *flag.FlagSet) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("flag %s needs a value", typed(name, args))
	}
	if what, v, ok := refusedValue(msg); ok {
		// The value is quoted (%q), so " for " inside it cannot be taken for the flag's.
		if q, qerr := strconv.QuotedPrefix(v); qerr == nil {
			rest := strings.TrimPrefix(strings.TrimPrefix(v[len(q):], " for "), "flag ")
			if name, why, ok := strings.Cut(strings.TrimPrefix(rest, "-"), ": "); ok {
				if want := wants(fs, name); want != "" && why == "parse error" {
					why = want // the flag package says no more than "parse error"
				}
				return fmt.Errorf("invalid %s %s for flag %s: %s", what, q, typed(name, args), why)
			}
		}
		return err
	}
	name, ok := strings.CutPrefix(msg, "flag provided but not defined: -")
	if !ok {
		return err
	}
	t := typed(name, args)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near := suggest.Nearest(name, append(names, "help")...); near != "" {
		dashes := t[:len(t)-len(name)]
		return fmt.Errorf("unknown flag %s (did you mean %s%s?)", t, dashes, near)
	}
	return fmt.Errorf("unknown flag %s", t)
}

// InvalidValue returns the error for a value of flag name that the flag's type accepts but the
// command refuses (a negative count, a URL without its scheme), in the words of Parse's error
// for a value the type refuses, the flag named as args spell it first:
//
//	invalid value "-3" for flag --concurrency: want 1 to 100000 connections
func InvalidValue(args []string, name, value, why string) error {
	return fmt.Errorf("invalid value %q for flag %s: %s", value, typed(name, args), why)
}

// wants says what flag name of fs takes, by the type of its value ("" for a type of its own).
func wants(fs *flag.FlagSet, name string) string {
	f := fs.Lookup(name)
	if f == nil {
		return ""
	}
	v := f.Value
	if o, ok := v.(*once); ok {
		v = o.Value
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case int, int64:
		return "want an integer"
	case uint, uint64:
		return "want a whole number, 0 or more"
	case float64:
		return "want a number"
	case time.Duration:
		return "want a duration such as 500ms, 2s or 1m30s"
	case bool:
		return "want true or false"
	}
	return ""
}

// refusedValue splits the flag package's error about a value a flag refused, "invalid value
// \"x\" for flag -n: why" or "invalid boolean value \"x\" for -n: why", into its kind ("value",
// "boolean value") and the rest from the quoted value on.
func refusedValue(msg string) (what, rest string, ok bool) {
	for _, what := range []string{"value", "boolean value"} {
		if rest, ok := strings.CutPrefix(msg, "invalid "+what+" "); ok {
			return what, rest, true
		}
	}
	return "", "", false
}

// typed returns flag name as args spell it first (-config or --config), or as --name.
func typed(name string, args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		if spelt, _, _ := strings.Cut(a, "="); strings.TrimLeft(spelt, "-") == name {
			return spelt
		}
	}
	return "--" + name
}

// Repeatable defines a flag that may be given any number of times, as fs.Func does: set is
// called with each value in turn.
func Repeatable(fs *flag.FlagSet, name, usage string, set func(string) error) {
	fs.Var(&repeatable{set: set}, name, usage)
}

type repeatable struct{ set func(string) error }

func (r *repeatable) Set(v string) error { return r.set(v) }

// String is "" for the zero value too: fs.PrintDefaults calls it on one.
func (r *repeatable) String() string { return "" }

// once is a single-valued flag's value while Parse runs: a second value that differs from
// the first is recorded in *twice and refused. The same value again changes nothing and
// passes, also when spelt otherwise ("1s" and "1000ms": the value reads back the same).
type once struct {
	flag.Value
	twice    **repeat
	name     string
	set      bool
	first    string // as given
	firstVal string // as the value reads back after it; "" when it does not say
}

type repeat struct{ name, first, second string }

var errTwice = errors.New("given twice")

func (o *once) Set(v string) error {
	if !o.set {
		o.set, o.first = true, v
		err := o.Value.Set(v)
		o.firstVal = o.Value.String()
		return err
	}
	if v == o.first {
		return o.Value.Set(v)
	}
	if o.firstVal != "" {
		if err := o.Value.Set(v); err != nil {
			return err
		}
		if o.Value.String() == o.firstVal {
			return nil
		}
	}
	*o.twice = &repeat{name: o.name, first: o.first, second: v}
	return errTwice
}

// IsBoolFlag keeps a boolean flag's value optional (--quick, not --quick=true): the flag
// package asks the value.
func (o *once) IsBoolFlag() bool {
	b, ok := o.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// PrintDefaults writes fs's flags to w as fs.PrintDefaults does, but spelt as the errors and
// the docs spell them: "  --listen string", where the flag package writes "  -listen string".
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	var b bytes.Buffer
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for line := range bytes.Lines(b.Bytes()) {
		if bytes.HasPrefix(line, []byte("  -")) {
			_, _ = io.WriteString(w, "  -")
			line = line[2:]
		}
		_, _ = w.Write(line)
	}
}
