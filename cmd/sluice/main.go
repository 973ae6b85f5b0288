// Command sluice is the gateway: `sluice serve [--config PATH]`, `sluice validate [--config]
// PATH`, `sluice version`. It parses flags and signals and wires core/gateway.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-gw/sluice/core/accesslog"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/snapshot"
	"github.com/sluice-gw/sluice/internal/cliflag"
	"github.com/sluice-gw/sluice/internal/suggest"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: sluice COMMAND [flags]

commands:
  serve [--config PATH]     run the gateway (PATH: a TOML file or a directory of *.toml;
                            default: the embedded configs/default.toml)
  validate [--config] PATH  check a config: exit 0 (warnings, if any, on stderr), or 1
                            with one file:line:col: message line per problem
  version                   print the version (also --version, -v, -V)
  help [COMMAND]            print this help, or a command's

Run 'sluice COMMAND --help' for a command's flags.
`

const serveUsage = `usage: sluice serve [--config PATH]

Run the gateway until SIGTERM or SIGINT (drain in-flight requests, then exit 0; a
second SIGTERM or SIGINT closes what is left at once and exits 128 plus its number:
143 for SIGTERM, 130 for SIGINT).
SIGHUP reloads the configuration from PATH; a bad configuration is refused and the
running one stays in force.

flags:
  --config PATH   a TOML file, or a directory whose *.toml files are merged in name
                  order (default: the embedded configs/default.toml)
  -h, --help      print this help
`

const validateUsage = `usage: sluice validate [--config] PATH

Check the configuration at PATH (a TOML file or a directory of *.toml) as serve would
load it, TLS files included. Exit 0 when it loads, printing a file:line:col: warning:
line on stderr for each part of it that can route nothing; exit 1 after printing one
file:line:col: message line on stderr per problem.

flags:
  --config PATH   the configuration to check (the same as giving PATH alone)
  -h, --help      print this help
`

// embeddedInUse tells a user of the embedded default whose address is taken how to listen
// elsewhere.
const embeddedInUse = `sluice: to listen on other addresses, copy configs/default.toml, change its addresses and
run 'sluice serve --config FILE' (or 'make run CONFIG=FILE' in the repository)`

const versionUsage = `usage: sluice version

Print the version sluice was built as.

flags:
  -h, --help      print this help
`

// commandUsage is each command's help text.
var commandUsage = map[string]string{"serve": serveUsage, "validate": validateUsage, "version": versionUsage}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "version":
		return versionCmd(args[1:], stdout, stderr)
	case "--version", "-version", "-v", "-V": // -v and -V as nginx and haproxy take them
		fmt.Fprintln(stdout, "sluice", version)
		return 0
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if u, ok := commandUsage[args[1]]; ok {
				fmt.Fprint(stdout, u)
				return 0
			}
			fmt.Fprintf(stderr, "sluice help: unknown command %q%s\n%s", args[1], nearestCommand(args[1]), usage)
			return 2
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		what, hint := "command", nearestCommand(args[0])
		if strings.HasPrefix(args[0], "-") {
			what, hint = "flag", nearestTopFlag(args[0])
		}
		fmt.Fprintf(stderr, "sluice: unknown %s %q%s\n%s", what, args[0], hint, usage)
		return 2
	}
}

// nearestTopFlag returns " (did you mean --version?)" for a flag within two edits of one sluice
// takes before a command (--verison, -hepl), spelt with the dashes typed; the command to write
// for --config, which goes after serve or validate (sluice --config x.toml, its command left
// out), or a near miss of it; or "".
func nearestTopFlag(flag string) string {
	dashes := flag[:len(flag)-len(strings.TrimLeft(flag, "-"))]
	name, _, _ := strings.Cut(flag[len(dashes):], "=")
	if strings.EqualFold(name, "config") {
		return " (a flag of serve and validate: sluice serve " + dashes + "config PATH)"
	}
	switch best := suggest.Nearest(name, "version", "help", "config"); best {
	case "":
		return ""
	case "config":
		return " (did you mean sluice serve " + dashes + "config?)"
	default:
		return " (did you mean " + dashes + best + "?)"
	}
}

// nearestCommand returns " (did you mean NAME?)" for the command within two edits of name
// (serv, valdate), or "".
func nearestCommand(name string) string {
	if best := suggest.Nearest(name, "serve", "validate", "version", "help"); best != "" {
		return " (did you mean " + best + "?)"
	}
	return ""
}

// parseFlags parses a command's flags, which may come before, between and after its
// arguments (`sluice validate conf.toml --help`), and returns the arguments. A "--" ends the
// flags. On -h or --help it prints the command's help on stdout and returns done with exit
// code 0; on a bad flag (unknown, missing its value, or a single-valued one given twice) it
// prints the problem and the help on stderr and returns done with exit code 2.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (rest []string, code int, done bool) {
	help := commandUsage[fs.Name()]
	rest, err := cliflag.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, help)
		return nil, 0, true
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice %s: %s\n%s", fs.Name(), err, help)
		return nil, 2, true
	}
	return rest, 0, false
}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	rest, code, done := parseFlags(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "sluice version: unexpected argument %q\n%s", rest[0], versionUsage)
		return 2
	}
	fmt.Fprintln(stdout, "sluice", version)
	return 0
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	flagPath := fs.String("config", "", "")
	rest, code, done := parseFlags(fs, args, stdout, stderr)
	if done {
		return code
	}
	if err := emptyConfig(fs, args, ""); err != nil {
		fmt.Fprintf(stderr, "sluice validate: %s\n%s", err, validateUsage)
		return 2
	}
	var path string
	switch {
	case len(rest) > 1:
		fmt.Fprintf(stderr, "sluice validate: unexpected argument %q (give one PATH)\n%s", rest[1], validateUsage)
		return 2
	case len(rest) == 1 && *flagPath != "" && rest[0] != *flagPath:
		fmt.Fprintf(stderr, "sluice validate: two configs, --config %s and %s: give one\n%s", *flagPath, rest[0], validateUsage)
		return 2
	case len(rest) == 1 && rest[0] == "":
		fmt.Fprintf(stderr, "sluice validate: invalid PATH \"\": %s\n%s", wantConfig, validateUsage)
		return 2
	case len(rest) == 1:
		path = rest[0]
	case *flagPath != "":
		path = *flagPath
	default:
		fmt.Fprintf(stderr, "sluice validate: which config? give its PATH\n%s", validateUsage)
		return 2
	}
	cfg, err := check(path)
	if err != nil {
		printErrors(stderr, err)
		return 1
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, w.String())
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return 0
}

// check loads and compiles the config at path, as serve would. What compiling starts and logs
// (a rollout's first step) is the running gateway's to report: validate prints its verdict
// alone, so the log goes nowhere meanwhile. A config that does not load is not compiled, but
// the files it names are still checked (withFileErrors).
func check(path string) (*config.Config, error) {
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.DiscardHandler))
	cfg, err := config.LoadPartial(path)
	if err != nil {
		return nil, withFileErrors(cfg, err)
	}
	snap, err := snapshot.Compile(cfg, nil, 1)
	if err != nil {
		return nil, err
	}
	snap.Retire(nil)
	return cfg, nil
}

// withFileErrors returns err, the ErrorList of a config that did not load (cfg, as
// config.LoadPartial returns it), with the problems of the files cfg names
// (snapshot.CheckFiles) among them in the order of their positions: one run of validate
// reports both, rather than the second only once the first is mended. err is returned as it
// is when cfg is nil (a file that cannot be read or parsed).
func withFileErrors(cfg *config.Config, err error) error {
	var list config.ErrorList
	if cfg == nil || !errors.As(err, &list) {
		return err
	}
	list = slices.Concat(list, snapshot.CheckFiles(cfg))
	list.Sort()
	return list
}

// wantConfig says what a config PATH is, for the refusal of an empty one.
const wantConfig = "want a TOML file or a directory of *.toml"

// emptyConfig returns the error for a --config written out empty on the command line args of
// fs, as `--config "$SLUICE_CONFIG"` is with the variable unset or empty, or nil. The empty
// value is the flag's default, which would otherwise be taken for the flag left out: serve
// would run the embedded default in place of the config meant, and validate would check
// another one or none. hint follows what a PATH is in the message.
func emptyConfig(fs *flag.FlagSet, args []string, hint string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" && f.Value.String() == "" {
			err = cliflag.InvalidValue(args, f.Name, "", wantConfig+hint)
		}
	})
	return err
}

func printErrors(w io.Writer, err error) {
	var list config.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	fmt.Fprintln(w, err.Error())
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", "", "")
	rest, code, done := parseFlags(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q (the config goes after --config)\n%s", rest[0], serveUsage)
		return 2
	}
	if err := emptyConfig(fs, args, " (leave --config out to run the embedded default)"); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %s\n%s", err, serveUsage)
		return 2
	}
	cfg, err := gateway.LoadConfig(*path)
	if err != nil {
		printErrors(stderr, err)
		return 1
	}
	logOut, flush := stderr, func() {}
	if f, ok := stderr.(*os.File); ok && f == os.Stderr {
		// Nothing that logs may wait on a standard error nobody reads (an event loop, the
		// drain): the log goes through the access log's writer goroutine for "stderr".
		logOut, flush = accesslog.ProcessLog(), flushLog
		defer flushLog()
	}
	logs := newSwitchHandler(logHandler(cfg.Log, logOut))
	log := slog.New(logs)
	// Parts handed no logger of their own (passive health, scalers, mirror summaries, any
	// library) write through slog's default: it is this one, so every line follows [log].
	slog.SetDefault(log)
	defer routeStdLog(log.Handler())()
	// Signals are caught before the gateway says it starts and opens its listeners: one that
	// comes meanwhile (a client may already be served) waits in the channel and is handled
	// once Start returns, instead of killing the process without a drain.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	// Once serve returns, the signals do what they do by default again (a test that runs
	// serve in its process is stopped by Ctrl-C as before).
	defer signal.Stop(sigs)
	// The first line says what runs, before what compiling the configuration logs (a
	// rollout's start).
	sources := "embedded default"
	if *path != "" {
		sources = strings.Join(cfg.Files(), ", ")
	}
	log.Info("sluice starting", "version", version, "config", sources,
		"entrypoints", len(cfg.Entrypoints), "routers", len(cfg.Routers), "services", len(cfg.Services), "models", len(cfg.Models))
	g, err := gateway.New(cfg, *path, log)
	if err != nil {
		flush()
		printErrors(stderr, err)
		return 1
	}
	g.SetLog = func(l config.Log) { logs.set(logHandler(l, logOut)) }
	if err := g.Start(); err != nil {
		flush() // the lines logged so far come before the error, as they happened
		fmt.Fprintln(stderr, err)
		if *path == "" && strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) {
			// The embedded default cannot be edited where it is.
			fmt.Fprintln(stderr, embeddedInUse)
		}
		return 1
	}
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			_ = g.Reload() // Reload logs a refusal
			continue
		}
		return drain(g, sig, sigs, log)
	}
	return 0
}

// drain drains g after sig and returns the exit status: 0 when the drain ended on its own or at
// drain_timeout; when a second signal cut it short, 128 plus that signal's number (130 for
// SIGINT, 143 for SIGTERM), the status a shell reports for a process the signal killed, so
// that whoever sent it (a script, systemd, make) sees that the drain did not finish.
func drain(g *gateway.Gateway, sig os.Signal, sigs <-chan os.Signal, log *slog.Logger) int {
	log.Info("draining; send the signal again to close the remaining connections now", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(g.DrainTimeout()))
	cut := make(chan os.Signal, 1)
	go cutOnSecondSignal(sigs, cancel, cut, log)
	start := time.Now()
	err := g.Drain(ctx)
	cancel()
	took := time.Since(start).Round(time.Millisecond).String()
	switch {
	case err == nil:
		log.Info("drained; exiting", "took", took)
	case errors.Is(err, context.DeadlineExceeded):
		// Each entrypoint drains for its own drain_timeout: the error names those it cut.
		log.Warn("drain_timeout reached; closed the connections left", "cut", strings.ReplaceAll(err.Error(), "\n", "; "), "took", took)
	case errors.Is(err, context.Canceled):
		code := 1
		select {
		case second := <-cut: // sent before the cancel that ended the drain
			code = signalStatus(second)
		default:
		}
		log.Warn("drain cut short; closed the remaining connections", "took", took, "exit_status", code)
		return code
	default:
		log.Error("drain", "error", err.Error())
	}
	return 0
}

// signalStatus is the exit status a shell reports for a process sig killed: 128 plus its
// number, or 1 for a signal that has none.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// cutOnSecondSignal ends a drain early: a second SIGTERM or SIGINT (an operator pressing
// Ctrl-C again) is sent on cut, then cancels the drain's context, so the remaining connections
// are closed as at drain_timeout. SIGHUP during a drain reloads nothing: the configuration is
// on its way out.
func cutOnSecondSignal(sigs <-chan os.Signal, cancel context.CancelFunc, cut chan<- os.Signal, log *slog.Logger) {
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			log.Warn("reload ignored: draining", "signal", sig.String())
			continue
		}
		log.Warn("second signal: closing the remaining connections", "signal", sig.String())
		cut <- sig
		cancel()
		return
	}
}

// flushLog writes out the log lines still waiting for standard error, for at most 2 s (a
// pipe nobody reads must not keep the process from exiting).
func flushLog() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = accesslog.Flush(ctx)
}
