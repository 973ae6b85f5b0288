// Command sluice-bench is the load harness.
//
//	sluice-bench run --target URL [--workload json] (--concurrency N | --rate R [--poisson])
//	    [--duration 10s] [--out FILE.json]
//	sluice-bench compare [--peers nginx,haproxy] [--quick] [--rounds 3] [--workload json,sse]
//	sluice-bench affinity [--instances 8] [--concurrency 30] [--duration 20s] [--out FILE.json]
//
// The logic lives in bench/harness (load), bench/peers (processes, compare)
// and bench/report (Markdown, JSON, SVG); this file only parses flags.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/sluice-gw/sluice/bench/peers"
	"github.com/sluice-gw/sluice/bench/report"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/internal/cliflag"
	"github.com/sluice-gw/sluice/internal/suggest"
)

// adversaryHelp is the --adversary flag's help, shared by run and compare.
const adversaryHelp = "misbehaving clients beside the workload, loopback only: kind=N,... " +
	"(slowloris, slowbody, noread, pipeline, segment: N connections; reset, bigheader: N slots of 20 attempts a second; " +
	"up-trickle, up-stall, up-reset, up-bigline: N% of the requests carry an llmsim fault) or mixed; see BENCHMARKS.md"

// defaultRunDuration is sluice-bench run's measured window.
const defaultRunDuration = 10 * time.Second

// usage is the tool's help. The defaults it shows come from the constants the flags take
// theirs from, so that the two cannot disagree.
var usage = fmt.Sprintf(`usage:
  sluice-bench run --target URL [--workload %s] (--concurrency N | --rate R [--poisson]) [--duration %v] [--adversary SPEC] [--out FILE.json]
  sluice-bench compare [--peers nginx,haproxy] [--engines gnet,fasthttp] [--quick] [--rounds %d] [--workload json,sse] [--adversary SPEC] [--out FILE.json]
  sluice-bench affinity [--instances %d] [--concurrency %d] [--duration %v] [--policies ...] [--out FILE.json]
run 'sluice-bench run -h', 'sluice-bench compare -h' or 'sluice-bench affinity -h' for all flags
`, harness.WorkloadJSON, defaultRunDuration, peers.DefaultRounds, peers.DefaultAffinityInstances, peers.DefaultAffinityConcurrency, peers.DefaultAffinityDuration)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, interrupted := interruptible()
	var err error
	cmd := os.Args[1]
	switch cmd {
	case "run":
		err = runCmd(ctx, os.Args[2:])
	case "compare":
		err = compareCmd(ctx, os.Args[2:])
	case "affinity":
		err = affinityCmd(ctx, os.Args[2:])
	case "-h", "-help", "--help":
		fmt.Print(usage)
		return
	case "help":
		if len(os.Args) > 2 && os.Args[2] != "help" {
			// "help compare" is "compare -h".
			os.Args = append([]string{os.Args[0], os.Args[2], "-h"}, os.Args[3:]...)
			main()
			return
		}
		fmt.Print(usage)
		return
	default:
		what := "command"
		if strings.HasPrefix(cmd, "-") {
			what = "flag"
		}
		msg := fmt.Sprintf("unknown %s %q", what, cmd)
		if near := suggest.Nearest(cmd, "run", "compare", "affinity", "help"); near != "" {
			msg += " (did you mean " + near + "?)"
		}
		err, cmd = usageError{err: errors.New(msg), usage: usage}, ""
	}
	if errors.Is(err, flag.ErrHelp) {
		return // -h or --help on a subcommand: its flags were printed, as asked
	}
	if err != nil {
		// "sluice-bench run: ...", as sluice names the command an error comes from.
		prefix := "sluice-bench"
		if cmd != "" {
			prefix += " " + cmd
		}
		if sig := interrupted(); sig != 0 {
			// What the run was doing when the signal came is no error of its own.
			name := "SIGTERM"
			if sig == syscall.SIGINT {
				name = "SIGINT"
			}
			fmt.Fprintf(os.Stderr, "%s: interrupted by %s\n", prefix, name)
			os.Exit(128 + int(sig))
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", prefix, err)
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprint(os.Stderr, ue.usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line the tool does not understand (an unknown command, flag or
// argument): exit status 2, as sluice's own; a run that fails exits 1. usage, when not "",
// is printed after the message.
type usageError struct {
	err   error
	usage string
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parseFlags parses a subcommand's flags, which are all it takes. Asked for (-h, --help), the
// flags go to standard output, as the top-level usage does; a command line the subcommand
// does not accept (an unknown flag, a single-valued one given twice, an argument) is a
// usageError, printed with the flags on standard error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	rest, err := cliflag.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printFlags(os.Stdout, fs)
		return err
	}
	if err != nil {
		var b strings.Builder
		printFlags(&b, fs)
		return usageError{err: err, usage: b.String()}
	}
	if len(rest) > 0 {
		return usageError{err: fmt.Errorf("unexpected argument %q (flags only)", rest[0])}
	}
	return nil
}

// refusedFlag returns err as a usageError when it is a *harness.OptionError or a
// *peers.OptionError about one of fs's flags, or about how two combine: a value worded as
// cliflag words a value the flag's type refuses, and followed by the flags. Any other error is
// returned as it is.
func refusedFlag(fs *flag.FlagSet, args []string, err error) error {
	var name, value, msg string
	var he *harness.OptionError
	var pe *peers.OptionError
	switch {
	case errors.As(err, &he):
		name, value, msg = he.Flag, he.Value, he.Msg
	case errors.As(err, &pe):
		name, value, msg = pe.Flag, pe.Value, pe.Msg
	default:
		return err
	}
	if name != "" && fs.Lookup(name) == nil {
		return err
	}
	var b strings.Builder
	printFlags(&b, fs)
	switch {
	case name == "":
		err = errors.New(msg)
	case pe != nil && value == "" && len(list(fs.Lookup(name).Value.String())) == 0:
		// An empty list, which the options cannot spell as it was typed ("none", ""): the
		// value refused is the flag's own.
		err = cliflag.InvalidValue(args, name, fs.Lookup(name).Value.String(), msg)
	case pe != nil && value == "":
		err = pe // the value is not what is wrong: its message says what is
	default:
		err = cliflag.InvalidValue(args, name, refusedValue(name, value), msg)
	}
	return usageError{err: err, usage: b.String()}
}

// refusedValue returns value, refused for flag name, as its error shows it: errors are shared
// as reports are, so the credentials of a --header and of a URL are redacted, as commandLine
// redacts them. A refused --header is no one field on one line: the text after its first line
// is not shown, and one without a colon shows its first word (the name, if the colon was
// left out) and the rest as a credential's value (at most its authentication scheme), or
// nothing of a word alone (a key given without its name).
func refusedValue(name, value string) string {
	if name != "header" {
		return config.RedactURL(value)
	}
	line, rest, more := strings.Cut(value, "\n")
	line, cr := strings.CutSuffix(line, "\r")
	shown := redactHeader(line)
	if !strings.Contains(line, ":") {
		word, after, ok := strings.Cut(strings.TrimSpace(line), " ")
		shown = config.Redacted
		if ok {
			// Whatever the name, the rest may be the key: it is redacted as under a
			// credential's name.
			shown = word + " " + config.RedactField("Authorization", strings.TrimSpace(after))
		}
	}
	if cr {
		shown += "\r"
	}
	if more {
		shown += "\n"
		if rest != "" {
			shown += config.Redacted
		}
	}
	return shown
}

// zeroGiven refuses a 0, or an empty value, written on the command line for one of the flags
// in refusals, whose option takes its zero for "not given": the harness's --rate and
// --concurrency (it would run the other mode, or ask for one), --workload (it would run the
// default one) and --adversary (it would run none), and the options compare fills in, which
// --quick chooses. refusals gives, by flag name, the error for the value as written: the one
// the option's own check gives a value out of its range.
func zeroGiven(fs *flag.FlagSet, args []string, refusals map[string]func(value string) error) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		refuse, ok := refusals[f.Name]
		if err != nil || !ok {
			return
		}
		if g, ok := f.Value.(flag.Getter); ok && reflect.ValueOf(g.Get()).IsZero() {
			err = refusedFlag(fs, args, refuse(f.Value.String()))
		}
	})
	return err
}

// emptyGiven refuses an empty value written on the command line for one of the flags in
// wants, which the command cannot take for what the flag's default means: --bin "" would
// search PATH alone, and compare's --out "" would fail to write the report after the run.
// wants gives, by flag name, what the flag takes, as the refusal words it.
func emptyGiven(fs *flag.FlagSet, args []string, wants map[string]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if want, ok := wants[f.Name]; ok && err == nil && f.Value.String() == "" {
			err = invalidFlag(fs, args, f.Name, "", want)
		}
	})
	return err
}

// invalidFlag returns the usageError for value of fs's flag name, worded as cliflag words a
// value the flag's type refuses, why saying what the flag takes, and followed by the flags.
func invalidFlag(fs *flag.FlagSet, args []string, name, value, why string) error {
	var b strings.Builder
	printFlags(&b, fs)
	return usageError{err: cliflag.InvalidValue(args, name, value, why), usage: b.String()}
}

// durationRefusal is harness.RefuseDuration for flag, as zeroGiven takes it.
func durationRefusal(flag string) func(string) error {
	return func(v string) error { return harness.RefuseDuration(flag, v) }
}

// commandLine returns the command line that ran subcommand cmd with args, quoted for a shell
// (report.CommandLine), for a report's Command. It starts with the program as it was invoked
// (os.Args[0]: "bin/sluice-bench", "./bin/sluice-bench", or "sluice-bench" when a shell found
// it on PATH), so that the line pasted back in the same directory runs the same binary.
// The value of a --header that may be a credential is shown as config.RedactField shows it
// (--header 'Authorization: Bearer <redacted>'), and a URL's user information and
// credential-named query parameters as config.RedactURL shows them: reports are made to be
// shared, and a line pasted back asks for the key again rather than carrying it.
func commandLine(cmd string, args []string) string {
	argv := append([]string{os.Args[0], cmd}, args...)
	header := false // argv[i] is the value of a --header before it
	for i := 2; i < len(argv); i++ {
		if header {
			argv[i], header = redactHeader(argv[i]), false
			continue
		}
		name, value, inline := strings.Cut(argv[i], "=")
		switch {
		case !strings.HasPrefix(argv[i], "-"):
			argv[i] = config.RedactURL(argv[i])
		case name == "--header" || name == "-header":
			if inline {
				argv[i] = name + "=" + redactHeader(value)
			} else {
				header = true
			}
		case inline:
			argv[i] = name + "=" + config.RedactURL(value)
		}
	}
	return report.CommandLine(argv...)
}

// redactHeader returns a --header's "Name: value" with its value as config.RedactField
// shows it.
func redactHeader(h string) string {
	name, value, ok := strings.Cut(h, ":")
	if !ok {
		return h
	}
	v := strings.TrimLeft(value, " \t")
	return name + ":" + value[:len(value)-len(v)] + config.RedactField(strings.TrimSpace(name), v)
}

// printFlags writes fs's usage line and flags.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: sluice-bench %s [flags]\n", fs.Name())
	cliflag.PrintDefaults(w, fs)
}

// terminal returns os.Stderr when it is a terminal (for live progress), nil
// otherwise.
func terminal() *os.File {
	if st, err := os.Stderr.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		return os.Stderr
	}
	return nil
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o harness.Options
	fs.StringVar(&o.Target, "target", "", "base URL of the target, http://host:port (required)")
	fs.StringVar(&o.Workload, "workload", harness.WorkloadJSON, "json, sse, chat-multiturn or mixed")
	fs.StringVar(&o.Path, "path", harness.DefaultPath, "request path")
	cliflag.Repeatable(fs, "header", `extra request header "Name: value", repeatable (an API key: --header "Authorization: Bearer KEY")`, func(v string) error {
		o.Headers = append(o.Headers, v)
		return nil
	})
	fs.IntVar(&o.Concurrency, "concurrency", 0, "closed loop: keep-alive connections, one request in flight each")
	fs.Float64Var(&o.Rate, "rate", 0, "open loop: requests per second (latency from the intended send time)")
	fs.BoolVar(&o.Poisson, "poisson", false, "open loop: exponential gaps instead of constant (needs --rate)")
	fs.IntVar(&o.Connections, "connections", harness.DefaultConnections, "open loop: connection cap")
	fs.BoolVar(&o.NewConnections, "new-conns", false, "a new connection per request (Connection: close); latency and TTFT include the connect")
	fs.DurationVar(&o.Duration, "duration", defaultRunDuration, "measured window, at least "+harness.MinDuration.String())
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "unrecorded load before the window")
	fs.DurationVar(&o.Timeout, "timeout", harness.DefaultTimeout, "per-request timeout")
	fs.StringVar(&o.Model, "model", harness.DefaultModel, "model field of request bodies")
	fs.IntVar(&o.MaxTokens, "max-tokens", 0, "max_tokens of request bodies (0: omitted)")
	fs.IntVar(&o.Turns, "turns", 0, "chat-multiturn: turns per conversation (default 6)")
	fs.IntVar(&o.ReplyBytes, "reply-bytes", 0, "chat-multiturn: bytes of each assistant reply the conversation grows by (default 86)")
	fs.BoolVar(&o.EchoReplies, "echo-replies", false, "chat-multiturn: grow each conversation by the reply the target streamed instead")
	fs.StringVar(&o.AltTarget, "alt-target", "", "closed loop: a second base URL; each connection's requests alternate between the two")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of request mixes, Poisson gaps and the adversary")
	fs.StringVar(&o.Adversary, "adversary", "", adversaryHelp)
	out := fs.String("out", "", "write the JSON result to this file (default: stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The harness reads 0 and "" as "not given"; given on the command line, they are refused.
	if err := zeroGiven(fs, args, map[string]func(string) error{
		"rate": harness.RefuseRate, "concurrency": harness.RefuseConcurrency, "connections": harness.RefuseConnections,
		"workload": harness.RefuseWorkload, "adversary": harness.RefuseAdversary, "timeout": durationRefusal("timeout"),
		"target": harness.RefuseTarget, "path": harness.RefusePath, "model": harness.RefuseModel,
	}); err != nil {
		return err
	}
	if o.Target == "" {
		return usageError{err: errors.New("--target is required")}
	}
	// The harness checks its options as it starts; checked here, a value it refuses is the
	// flag's mistake, told as the flag package's are.
	if err := o.Check(); err != nil {
		return refusedFlag(fs, args, err)
	}
	if err := reportDirsExist(fs, args, "out"); err != nil {
		return err
	}
	if t := terminal(); t != nil {
		o.Progress = t
	}
	res, err := harness.Run(ctx, o)
	if err != nil {
		return err
	}
	res.Command = commandLine("run", args)
	printRunSummary(os.Stderr, res)
	var buf bytes.Buffer
	if err := report.EncodeJSON(&buf, res); err != nil {
		return err
	}
	b := buf.Bytes()
	if *out == "" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	switch {
	case err != nil:
	case res.OK == 0 && res.Requests+res.Unfinished > 0:
		err = errors.New("no request succeeded (the result above says why)")
	case res.OK == 0 && o.Rate > 0:
		err = errors.New("the window held no request: lengthen --duration or raise --rate")
	case res.OK == 0:
		// The closed loop has no rate to raise: every connection's request in flight was
		// answered after the window ended.
		err = errors.New("no response came within the window: lengthen --duration beyond the time one response takes (each connection sends its next request once the last is answered)")
	}
	return err
}

// printRunSummary writes what a run measured, for a reader: its Command line, one line of
// results (latencies in µs) and, with an adversary, a line per kind. The JSON result holds it
// all, and more.
func printRunSummary(w io.Writer, res *harness.Result) {
	fmt.Fprintf(w, "Command: %s\n", res.Command)
	errs := strconv.FormatInt(res.Errors, 10)
	if res.Errors > 0 {
		errs += " (" + res.ErrorSummary() + ")"
	}
	fmt.Fprintf(w, "%s %s %s: %d ok, %s errors, %d unfinished, %.0f req/s; latency µs p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f max %.1f",
		res.Target, res.Workload, res.Mode, res.OK, errs, res.Unfinished, res.RPS,
		res.Latency.P50Us, res.Latency.P90Us, res.Latency.P99Us, res.Latency.P999Us, res.Latency.MaxUs)
	if res.TTFT.Count > 0 {
		fmt.Fprintf(w, "; TTFT p50 %.1f p99 %.1f; ITL p50 %.1f p99 %.1f", res.TTFT.P50Us, res.TTFT.P99Us, res.ITL.P50Us, res.ITL.P99Us)
	}
	fmt.Fprintln(w)
	if res.Adversary != nil {
		fmt.Fprintf(w, "adversary %s:\n", res.Adversary.Spec)
		for _, k := range res.Adversary.Kinds {
			fmt.Fprintf(w, "  %-10s %5d opened %7d attempts: %s", k.Kind, k.Opened, k.Attempts, harness.FormatOutcomes(k.Outcomes))
			if k.HeldMaxMs > 0 {
				fmt.Fprintf(w, "; held mean %.0f ms, max %.0f ms", k.HeldMeanMs, k.HeldMaxMs)
			}
			fmt.Fprintln(w)
		}
	}
}

func list(s string) []string {
	out := []string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && f != "none" {
			out = append(out, f)
		}
	}
	return out
}

func compareCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var o peers.CompareOptions
	peerList := fs.String("peers", "nginx,haproxy", "peer proxies to run (\"none\" for none)")
	engines := fs.String("engines", "gnet,fasthttp", "sluice ingress engines to run: gnet (its default upstream_io, \"loop\"), gnet-loop (upstream_io = \"loop\" set), gnet-connect (also upstream_connect = \"loop\"), gnet-worker (upstream_io = \"worker\"), fasthttp (\"none\" for none); ENGINE@DIR runs the sluice binary in DIR, to compare two builds in one run")
	workloads := fs.String("workload", "json,sse", "comma-separated workloads: json, sse, chat-multiturn, mixed")
	fs.BoolVar(&o.Quick, "quick", false, "~20 s smoke run: 1 round, 1.2 s per run after a 300 ms warmup, 16 connections")
	// These take 0 as "not given", so that --quick can choose: their help gives both defaults.
	fs.IntVar(&o.Rounds, "rounds", 0, fmt.Sprintf("rounds, targets alternating within each (default %d; 1 with --quick)", peers.DefaultRounds))
	fs.DurationVar(&o.Duration, "duration", 0, fmt.Sprintf("measured window per run, at least %v (default %v; 1.2s with --quick)", harness.MinDuration, peers.DefaultDuration))
	fs.DurationVar(&o.Warmup, "warmup", 0, fmt.Sprintf("warmup per run (default %v; 300ms with --quick)", peers.DefaultWarmup))
	fs.IntVar(&o.Concurrency, "concurrency", 0, fmt.Sprintf("closed-loop connections (default %d; 16 with --quick)", peers.DefaultConcurrency))
	fs.Float64Var(&o.Rate, "rate", 0, "open-loop rate in req/s instead of closed loop")
	fs.BoolVar(&o.Poisson, "poisson", false, "open loop: Poisson arrivals (needs --rate)")
	fs.IntVar(&o.Connections, "connections", harness.DefaultConnections, "open loop: connection cap")
	fs.BoolVar(&o.NewConnections, "new-conns", false, "a new connection per request (Connection: close); latency and TTFT include the connect")
	fs.IntVar(&o.MaxTokens, "max-tokens", 0, "max_tokens of request bodies (0: omitted)")
	fs.IntVar(&o.IdleConns, "idle", 0, "after the rounds, hold this many idle keep-alive connections on each proxy and report its RSS")
	fs.DurationVar(&o.SimTTFT, "sim-ttft", 0, "upstream TTFT (llmsim --ttft)")
	fs.DurationVar(&o.SimITL, "sim-itl", 0, "upstream inter-token latency (llmsim --itl)")
	fs.IntVar(&o.SimTokens, "sim-tokens", peers.DefaultSimTokens, "upstream tokens per response (llmsim --tokens)")
	simArgs := fs.String("sim-args", "", "extra llmsim flags, space-separated")
	fs.StringVar(&o.Adversary, "adversary", "", "run every target under each adversary in turn, between clean runs that open and close each round: specs separated by \";\", or each (every kind alone at its count in mixed, then mixed); a spec is "+adversaryHelp)
	sluiceExtra := fs.String("sluice-extra", "", "a TOML file added to each sluice config after the catch-all router's keys: its middlewares = [...] and their tables, [log] (peers run without)")
	binDir := fs.String("bin", "./bin", "directory searched for sluice and llmsim before PATH")
	fs.StringVar(&o.WorkDir, "workdir", "", "directory for generated configs and logs, kept: made if it is missing, in a directory that exists (default: temporary, removed)")
	out := fs.String("out", "bench-compare.json", "JSON report file; the SVG chart goes beside it (.svg)")
	md := fs.String("md", "", "also write the Markdown table to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// A zero would be taken as "not given" (the default); given on the command line, it is
	// refused. An empty --workload is refused as an empty list (CompareOptions.Workloads).
	if err := zeroGiven(fs, args, map[string]func(string) error{
		"rate": harness.RefuseRate, "concurrency": harness.RefuseConcurrency, "connections": harness.RefuseConnections,
		"rounds": peers.RefuseRounds, "duration": harness.RefuseWindow, "warmup": durationRefusal("warmup"),
		"sim-tokens": peers.RefuseSimTokens, "adversary": harness.RefuseAdversary,
	}); err != nil {
		return err
	}
	if err := emptyGiven(fs, args, map[string]string{
		"bin": "want a directory to look for sluice and llmsim in before PATH",
		"out": "want a file for the JSON report (the SVG chart goes beside it)",
	}); err != nil {
		return err
	}
	o.Peers, o.Engines, o.Workloads = list(*peerList), list(*engines), list(*workloads)
	o.SimArgs = strings.Fields(*simArgs)
	if *sluiceExtra != "" {
		b, err := os.ReadFile(*sluiceExtra)
		if err != nil {
			// A file that cannot be read is the value's mistake, found before anything
			// starts: refused as --out in a missing directory is, exit status 2.
			return invalidFlag(fs, args, "sluice-extra", *sluiceExtra, fmt.Sprintf("want a TOML file that can be read (%v)", errors.Unwrap(err)))
		}
		o.SluiceExtra = string(b)
	}
	if err := reportDirsExist(fs, args, "out", "md"); err != nil {
		return err
	}
	if why := workDirRefusal(o.WorkDir); why != "" {
		return invalidFlag(fs, args, "workdir", o.WorkDir, "want a directory, or a new one in an existing directory ("+why+")")
	}
	o.BinDirs = []string{*binDir}
	o.KeepWorkDir = o.WorkDir != ""
	o.Log = os.Stderr
	if t := terminal(); t != nil {
		o.Progress = t
	}
	o.Command = commandLine("compare", args)
	survivePipeWithoutReader()
	cmp, err := peers.Compare(ctx, o)
	if err != nil {
		return refusedFlag(fs, args, err)
	}
	// The files first: they are the run's result, the table on standard output a copy for
	// whoever reads it, and that reader may be gone (`| head -1`).
	svg := strings.TrimSuffix(*out, ".json") + ".svg"
	werr := errors.Join(writeFile(*out, cmp.WriteJSON), writeFile(svg, cmp.SVG))
	if *md != "" {
		werr = errors.Join(werr, writeFile(*md, cmp.Markdown))
	}
	// The table is printed also when a file could not be written: it is then the only copy.
	if err := printTable(cmp.Markdown); err != nil || werr != nil {
		return errors.Join(werr, err)
	}
	if *md != "" {
		fmt.Fprintf(os.Stderr, "wrote %s, %s and %s\n", *out, svg, *md)
	} else {
		fmt.Fprintf(os.Stderr, "wrote %s and %s\n", *out, svg)
	}
	return nil
}

// reportDirsExist refuses, as a value of its flag, a report file named by one of fs's flags
// names ("" names none) in a directory that does not exist or is not a directory. The report
// files are the run's result: a directory that is not there is found before the run, not
// after minutes of it.
func reportDirsExist(fs *flag.FlagSet, args []string, names ...string) error {
	for _, name := range names {
		path := fs.Lookup(name).Value.String()
		if path == "" {
			continue
		}
		dir := filepath.Dir(path)
		var why string
		switch st, err := os.Stat(dir); {
		case err != nil:
			why = fmt.Sprintf("%s: %v", dir, errors.Unwrap(err))
		case !st.IsDir():
			why = dir + " is not a directory"
		default:
			why = reportFileRefusal(path, dir)
			if why == "" {
				continue
			}
		}
		return invalidFlag(fs, args, name, path, "want a file in an existing directory ("+why+")")
	}
	return nil
}

// workDirRefusal says why compare's --workdir dir cannot be its work directory, "" when it
// can: dir is a directory, or is not there and its parent is one, in which compare makes it.
// A parent that is not there is refused, as a report file's directory is, before anything
// starts: compare makes the one directory named, not a tree of them that a mistyped path
// would leave behind.
func workDirRefusal(dir string) string {
	if dir == "" {
		return "" // a temporary directory, removed afterwards
	}
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return dir + " is not a directory"
		}
		return ""
	}
	parent := filepath.Dir(filepath.Clean(dir))
	switch st, err := os.Stat(parent); {
	case err != nil:
		return fmt.Sprintf("%s: %v", parent, errors.Unwrap(err))
	case !st.IsDir():
		return parent + " is not a directory"
	}
	return ""
}

// reportFileRefusal says why a report could not be written at path in the existing directory
// dir, "" when it can: path is a directory, or dir takes no new file (no write permission, a
// read-only or virtual file system such as /proc). A file is made in dir and removed to find
// out, since permission bits do not tell it for root or for such file systems.
func reportFileRefusal(path, dir string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return path + " is a directory"
	}
	f, err := os.CreateTemp(dir, ".sluice-bench-*")
	if err != nil {
		return fmt.Sprintf("%s takes no new file: %v", dir, errors.Unwrap(err))
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return ""
}

// survivePipeWithoutReader makes a write to a pipe that has no reader fail with EPIPE, where
// on standard output or error it would kill the process with SIGPIPE (os/signal, "SIGPIPE"):
// a compare or affinity run takes minutes to write its report files, and output read by
// `| head -1`, or by a log reader that died, must not cost them. The signal is handled rather
// than ignored (signal.Ignore): an ignored signal stays ignored across exec, in nginx,
// haproxy, sluice and llmsim, while a handled one is reset to the default there.
func survivePipeWithoutReader() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// printTable writes the Markdown table that markdown writes (a report's Markdown method) to
// standard output, nothing before it: `| head -1` reads its first line. A reader that left
// before the end (EPIPE: `| head -1`, `| true`) is not an error: it read what it wanted.
func printTable(markdown func(w io.Writer) error) error {
	var b bytes.Buffer
	if err := markdown(&b); err != nil {
		return err
	}
	_, err := os.Stdout.Write(b.Bytes())
	if errors.Is(err, syscall.EPIPE) {
		return nil
	}
	return err
}

func writeFile(path string, write func(w io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func affinityCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("affinity", flag.ContinueOnError)
	var o peers.AffinityOptions
	fs.IntVar(&o.Instances, "instances", peers.DefaultAffinityInstances, "llmsim instances")
	fs.IntVar(&o.Concurrency, "concurrency", peers.DefaultAffinityConcurrency, "closed-loop connections, one conversation each at a time")
	fs.DurationVar(&o.Duration, "duration", peers.DefaultAffinityDuration, "measured window per policy, at least "+harness.MinDuration.String())
	fs.DurationVar(&o.Warmup, "warmup", 5*time.Second, "warmup per policy")
	fs.IntVar(&o.Turns, "turns", 6, "turns per conversation")
	fs.IntVar(&o.ReplyBytes, "reply-bytes", 0, "bytes of a fixed assistant reply (0: send back the reply the instance generated)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 64, "tokens generated per request")
	fs.DurationVar(&o.TTFT, "sim-ttft", 20*time.Millisecond, "llmsim prefill overhead of a fully cached prompt")
	fs.DurationVar(&o.PerUncachedToken, "sim-per-uncached-token", 100*time.Microsecond, "llmsim prefill cost per uncached prompt token")
	fs.DurationVar(&o.ITL, "sim-itl", 5*time.Millisecond, "llmsim time per output token")
	fs.BoolVar(&o.Observe, "observe", false, "affinity policies: the gateways poll the instances' worker observations for their loads")
	fs.IntVar(&o.Blocks, "sim-blocks", 8192, "llmsim KV cache blocks (16 tokens each) per instance")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the workload and the fleet")
	policies := fs.String("policies", strings.Join(peers.AffinityPolicies, ","), "policies to run, in order")
	binDir := fs.String("bin", "./bin", "directory searched for sluice before PATH")
	out := fs.String("out", "", "also write the JSON result to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := emptyGiven(fs, args, map[string]string{"bin": "want a directory to look for sluice in before PATH"}); err != nil {
		return err
	}
	o.Policies, o.BinDirs, o.Log = list(*policies), []string{*binDir}, os.Stderr
	// Every flag has its default: a 0 here was written, and Check refuses it where RunAffinity
	// would take it for "not given".
	if err := o.Check(); err != nil {
		return refusedFlag(fs, args, err)
	}
	if err := reportDirsExist(fs, args, "out"); err != nil {
		return err
	}
	survivePipeWithoutReader()
	res, err := peers.RunAffinity(ctx, o)
	if err != nil {
		// A sluice binary it needs and does not find is refused as compare refuses it.
		return refusedFlag(fs, args, err)
	}
	res.Command = commandLine("affinity", args)
	// The file first, as compare writes its reports: the table is a copy for a reader who may
	// be gone, and it is printed also when the file could not be written.
	var werr error
	if *out != "" {
		werr = writeFile(*out, func(w io.Writer) error { return report.EncodeJSON(w, res) })
	}
	err = errors.Join(werr, printTable(res.Markdown))
	// After the table, where whoever reads it looks next: its figures for these policies are
	// not those of a clean run.
	for _, f := range res.Failures() {
		fmt.Fprintf(os.Stderr, "sluice-bench affinity: warning: %s\n", f)
	}
	return err
}

// interruptible returns a context cancelled by the first SIGINT or SIGTERM, and a function
// that reports which one came (0: none). The command then cleans up what it started and exits
// 128 plus the signal's number (130, 143), as a shell reports a process the signal killed. A
// second signal finds the default action again and ends the process at once; the reaper
// still stops the peers it started (bench/peers/reaper.go).
func interruptible() (context.Context, func() syscall.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var got atomic.Int32
	go func() {
		s := <-sigs
		signal.Stop(sigs)
		got.Store(int32(s.(syscall.Signal)))
		cancel()
	}()
	return ctx, func() syscall.Signal { return syscall.Signal(got.Load()) }
}
