package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/report"
	"github.com/sluice-gw/sluice/internal/suggest"
)

// Target names used by Compare, in the order the first round runs them;
// each later round starts one target further on (see roundOrder).
const (
	TargetDirect         = report.TargetDirect
	TargetSluiceGnet     = "sluice-gnet"
	TargetSluiceFasthttp = "sluice-fasthttp"
	TargetNginx          = report.TargetNginx
	TargetHAProxy        = report.TargetHAProxy
)

// Compare defaults; Quick replaces them with a ~20 s smoke run.
const (
	DefaultRounds      = 3
	DefaultDuration    = 10 * time.Second
	DefaultWarmup      = 2 * time.Second
	DefaultConcurrency = 64
	DefaultSimTokens   = 16
	quickRounds        = 1
	quickDuration      = 1200 * time.Millisecond
	quickWarmup        = 300 * time.Millisecond
	quickConcurrency   = 16
	readyTimeout       = 15 * time.Second
	stopGrace          = 3 * time.Second
	rssSampleInterval  = 100 * time.Millisecond
)

// MaxRounds bounds CompareOptions.Rounds, so that a typo fails at once instead of running for
// days: a round runs every workload on every target, and each of those runs keeps its three
// latency histograms (about 260 KiB each) in memory for the report, about 760 MiB for 100
// rounds of the default five targets and two workloads. The report's medians and counts of
// rounds need far fewer: a lead in 5 of 5 rounds happens by chance one time in 32.
const MaxRounds = 100

// CompareOptions configure Compare. Zero values take the defaults noted.
type CompareOptions struct {
	// Peers lists the peer proxies to run: "nginx", "haproxy" (default both).
	// An empty non-nil slice runs none.
	Peers []string
	// Engines lists the sluice ingress engines to run (default gnet and
	// fasthttp). An empty non-nil slice runs no sluice. Each needs the
	// sluice binary: from BinDirs or PATH, or for ENGINE@DIR from DIR alone
	// (DIR names the build to compare; one found elsewhere is another);
	// Compare refuses an engine whose binary is missing with an *OptionError.
	Engines []string
	// Workloads to run, each against every target (default json and sse). An empty non-nil
	// slice is refused: a comparison runs at least one workload.
	Workloads []string
	// Rounds is how many times every target runs every workload, in
	// alternating order (default 3, at most MaxRounds).
	Rounds int
	// Duration and Warmup are per run (default 10 s and 2 s).
	Duration, Warmup time.Duration
	// Concurrency is the closed-loop connection count (default 64) unless
	// Rate is set; Rate, Poisson and Connections select open-loop load
	// (Poisson without Rate is refused).
	Concurrency int
	Rate        float64
	Poisson     bool
	Connections int
	// NewConnections sends every request on a connection of its own
	// (harness.Options.NewConnections): the clients' latencies include
	// the connect and each proxy's accept.
	NewConnections bool
	// MaxTokens is passed to the harness (0: the upstream's length).
	MaxTokens int
	// SimTTFT, SimITL and SimTokens configure the upstream (llmsim --ttft,
	// --itl, --tokens; default 0, 0, 16: a zero-delay upstream).
	SimTTFT, SimITL time.Duration
	SimTokens       int
	// SimArgs are extra llmsim flags; one of Compare's own that they give too is left out
	// (theirs wins: llmsim refuses a flag given twice):
	// Compare runs llmsim with --per-uncached-token 0s --itl-per-running 0s
	// --max-running 100000 --max-waiting 100000 --max-model-len 0, a pure timing model.
	SimArgs []string
	// IdleConns, when > 0, adds a memory run after the rounds: each proxy
	// in turn holds this many idle keep-alive client connections (each has
	// carried one request) and its RSS is read (the "10,000 idle
	// connections" bar).
	IdleConns int
	// SluiceExtra is TOML added to every sluice target's config (ProxyConfig.SluiceExtra):
	// the catch-all router's middlewares and their tables, an access log. Peers run without.
	SluiceExtra string
	// Adversary, when set, adds to every run one more under each adversary it names
	// (harness.ParseAdversaries: specs separated by ";", or "each" for every kind alone and
	// then mixed), right after it on the same target: every proxy faces the same misbehaving
	// clients in the same rounds, and the report sets its well-behaved clients' figures under
	// each attack against the clean ones.
	Adversary string
	// adversaries is Adversary parsed (normalize), in canonical form.
	adversaries []string
	// Quick is the ~20 s smoke run for `make test`: one round of json and
	// sse, 1.2 s each with 0.3 s warmup, 16 connections, unless the fields
	// above are set explicitly.
	Quick bool
	// BinDirs are searched for sluice and llmsim before PATH (default
	// ["./bin"]). Without llmsim, Compare runs the harness's basic upstream
	// in-process instead.
	BinDirs []string
	// WorkDir holds generated configs and logs (default: a new temporary
	// directory, removed afterwards unless KeepWorkDir).
	WorkDir     string
	KeepWorkDir bool
	// Log receives progress lines and notes (default io.Discard).
	Log io.Writer
	// Progress is passed to each harness run (live status line).
	Progress io.Writer
	// Command is recorded in the report: the command line that ran the comparison, quoted
	// for a shell (report.CommandLine).
	Command string
}

// OptionError is a CompareOptions or AffinityOptions value that Compare or RunAffinity
// refuses, named by its sluice-bench flag. Value is the value as the flag prints it (of a
// list, the element refused), and Msg what the option takes. Value is "" when the value is
// not what is wrong (an engine whose sluice binary is missing: Msg says where it was looked
// for), and when an empty list is refused (Policies), which a flag may spell several ways.
type OptionError struct{ Flag, Value, Msg string }

// Error returns `--rounds "-2": want 1 to 100 rounds`, or "--", Flag, ": " and Msg when Value
// is "".
func (e *OptionError) Error() string {
	if e.Value == "" {
		return "--" + e.Flag + ": " + e.Msg
	}
	return fmt.Sprintf("--%s %q: %s", e.Flag, e.Value, e.Msg)
}

func optionError(flag, format string, a ...any) error {
	return &OptionError{Flag: flag, Msg: fmt.Sprintf(format, a...)}
}

// checkTarget stands in for the targets when the load's options are checked, before any of
// them has started.
const checkTarget = "http://127.0.0.1:1"

func refuse(flag, value, format string, a ...any) error {
	return &OptionError{Flag: flag, Value: value, Msg: fmt.Sprintf(format, a...)}
}

// RefuseRounds is the *OptionError for a number of rounds outside 1..MaxRounds, value as
// given. A caller that can tell a 0 written out from one left out (CompareOptions reads 0 as
// "not given") refuses the first with it.
func RefuseRounds(value string) error {
	return refuse("rounds", value, "want 1 to %d rounds", MaxRounds)
}

// RefuseSimTokens is the *OptionError for upstream tokens per response outside
// 1..llmsim.MaxOutputTokens (llmsim --tokens refuses more), value as given; see RefuseRounds
// for a 0 written out.
func RefuseSimTokens(value string) error {
	return refuse("sim-tokens", value, "want 1 to %d tokens", llmsim.MaxOutputTokens)
}

// refuseRepeated is the *OptionError for the first element of list, the value of flag, that
// an earlier one already names, or nil. A target or workload named twice is not measured
// twice: a second sluice or peer would be started and never loaded, and a workload's two
// passes would be folded into one row, so that the table would not say what ran.
func refuseRepeated(flag, what string, list []string) error {
	for i, v := range list {
		if slices.Contains(list[:i], v) {
			return refuse(flag, v, "given twice: want each %s once", what)
		}
	}
	return nil
}

// nearest is " (did you mean NAME?)" for the one of names within two edits of v, else "".
func nearest(v string, names ...string) string {
	if n := suggest.Nearest(v, names...); n != "" {
		return " (did you mean " + n + "?)"
	}
	return ""
}

func (o *CompareOptions) normalize() error {
	if o.Peers == nil {
		o.Peers = []string{TargetNginx, TargetHAProxy}
	}
	for _, p := range o.Peers {
		if p != TargetNginx && p != TargetHAProxy {
			return refuse("peers", p, "want nginx, haproxy%s", nearest(p, TargetNginx, TargetHAProxy))
		}
	}
	if err := refuseRepeated("peers", "peer", o.Peers); err != nil {
		return err
	}
	if o.Engines == nil {
		o.Engines = []string{EngineGnet, EngineFasthttp}
	}
	for _, spec := range o.Engines {
		e, dir, _ := strings.Cut(spec, "@")
		if e != EngineGnet && e != EngineGnetLoop && e != EngineGnetConnect && e != EngineGnetWorker && e != EngineFasthttp {
			return refuse("engines", spec, "want gnet, gnet-loop, gnet-connect, gnet-worker, fasthttp, each optionally @DIR%s",
				nearest(e, EngineGnet, EngineGnetLoop, EngineGnetConnect, EngineGnetWorker, EngineFasthttp))
		}
		if strings.Contains(spec, "@") && dir == "" {
			return refuse("engines", spec, "want a directory after @")
		}
	}
	if err := refuseRepeated("engines", "engine", o.Engines); err != nil {
		return err
	}
	switch {
	case o.Workloads == nil:
		o.Workloads = []string{harness.WorkloadJSON, harness.WorkloadSSE}
	case len(o.Workloads) == 0:
		// An empty list written out ("", "none"): the refusal names the flag's value.
		return refuse("workload", "", "want one or more of %s", strings.Join(harness.Workloads, ", "))
	}
	for _, w := range o.Workloads {
		ok := false
		for _, k := range harness.Workloads {
			ok = ok || k == w
		}
		if !ok {
			return refuse("workload", w, "want one of %s%s", strings.Join(harness.Workloads, ", "), nearest(w, harness.Workloads...))
		}
	}
	if err := refuseRepeated("workload", "workload", o.Workloads); err != nil {
		return err
	}
	pick := func(v, normal, quick time.Duration) time.Duration {
		switch {
		case v != 0:
			return v
		case o.Quick:
			return quick
		}
		return normal
	}
	advs, err := harness.ParseAdversaries(o.Adversary)
	if err != nil {
		return err
	}
	o.adversaries = advs
	o.Adversary = strings.Join(advs, ";")
	switch {
	case o.Rounds < 0 || o.Rounds > MaxRounds:
		return RefuseRounds(strconv.Itoa(o.Rounds))
	case o.Warmup < 0 || o.Warmup > harness.MaxDuration:
		// Here 0 is "not given" (run takes it for no warmup): a warmup is more than 0.
		return harness.RefuseDuration("warmup", o.Warmup.String())
	case o.SimTokens < 0 || o.SimTokens > llmsim.MaxOutputTokens:
		return RefuseSimTokens(strconv.Itoa(o.SimTokens))
	case o.SimTTFT < 0:
		return refuse("sim-ttft", o.SimTTFT.String(), "want 0 or more")
	case o.SimITL < 0:
		return refuse("sim-itl", o.SimITL.String(), "want 0 or more")
	case o.IdleConns < 0 || o.IdleConns > harness.MaxConnections:
		return refuse("idle", strconv.Itoa(o.IdleConns), "want 0 to %d connections", harness.MaxConnections)
	}
	o.Duration = pick(o.Duration, DefaultDuration, quickDuration)
	o.Warmup = pick(o.Warmup, DefaultWarmup, quickWarmup)
	if o.Rounds == 0 {
		o.Rounds = DefaultRounds
		if o.Quick {
			o.Rounds = quickRounds
		}
	}
	if o.Rate == 0 && o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
		if o.Quick {
			o.Concurrency = quickConcurrency
		}
	}
	// Every run's load, checked as sluice-bench run checks its own: compare refuses what run
	// refuses, in the same words, before anything starts.
	load := harness.Options{Target: checkTarget, Concurrency: o.Concurrency, Rate: o.Rate, Poisson: o.Poisson,
		Connections: o.Connections, Duration: o.Duration, Warmup: o.Warmup, MaxTokens: o.MaxTokens}
	if err := load.Check(); err != nil {
		return err
	}
	if o.SimTokens == 0 {
		o.SimTokens = DefaultSimTokens
	}
	if o.BinDirs == nil {
		o.BinDirs = []string{"./bin"}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// sluiceBinaries returns the path of the sluice binary each of o.Engines runs, by its spec:
// for ENGINE@DIR the one in DIR, for ENGINE the first in o.BinDirs or on PATH (FindBinary).
// A missing binary is an *OptionError for --engines that says where it was looked for and
// how to go on: a compare that asked for sluice and ran without it would measure only the
// rest, and exit as if it had measured sluice.
func sluiceBinaries(o CompareOptions) (map[string]string, error) {
	bins := map[string]string{}
	for _, spec := range o.Engines {
		_, dir, alt := strings.Cut(spec, "@")
		if !alt {
			bin, err := findSluice(o.BinDirs, "engines", "run no sluice with --engines none")
			if err != nil {
				return nil, err
			}
			bins[spec] = bin
			continue
		}
		bin := filepath.Join(dir, "sluice")
		if !isExecutable(bin) {
			return nil, optionError("engines", "%s: no sluice binary in %s: build one there (`go build -o %s ./cmd/sluice`), or leave %s out", spec, dir, bin, spec)
		}
		abs, err := filepath.Abs(bin)
		if err != nil {
			return nil, fmt.Errorf("peers: %w", err)
		}
		bins[spec] = abs
	}
	return bins, nil
}

// target is one thing to load: the upstream directly, or a proxy in front
// of it.
type target struct {
	name string
	url  string
	proc *Process // nil for direct and an in-process upstream
}

// Compare starts the upstream (llmsim from BinDirs or PATH; the harness's
// basic upstream in-process when llmsim is missing), sluice on each engine,
// and each requested peer, all on loopback with generated configs; runs every
// workload against the upstream directly and against every proxy, in
// alternating order (direct, sluice-gnet, sluice-fasthttp, nginx, haproxy,
// then again) for Rounds rounds; stops everything; and returns the
// comparison. A missing or failing peer proxy, and a sluice that does not
// start, are skipped with a note (nginx and haproxy: "apt-get install nginx
// haproxy"); an engine whose sluice binary is missing is refused, as a bad
// option is, with an *OptionError before anything starts. Otherwise Compare
// fails only when the upstream cannot start, nothing is left to compare, or
// ctx ends. A Reaper
// ends every process it started, and removes its temporary work directory,
// also when the process that called Compare is killed.
func Compare(ctx context.Context, o CompareOptions) (*report.Comparison, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	sluiceBins, err := sluiceBinaries(o)
	if err != nil {
		return nil, err
	}
	cmp := &report.Comparison{Command: o.Command, StartedAt: time.Now().UTC(), Machine: machine()}
	note := func(format string, a ...any) {
		s := fmt.Sprintf(format, a...)
		cmp.Notes = append(cmp.Notes, s)
		fmt.Fprintln(o.Log, "note: "+s)
	}
	dir, removeDir := o.WorkDir, ""
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			return nil, fmt.Errorf("peers: %w", err)
		}
		dir = d
		if !o.KeepWorkDir {
			removeDir = dir
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	// The reaper removes the work directory and ends the processes, here or, should this
	// process be killed, on its own.
	reaper, err := StartReaper(removeDir)
	if err != nil {
		if removeDir != "" {
			_ = os.RemoveAll(removeDir)
		}
		return nil, err
	}
	var procs []*Process
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			_ = procs[i].Stop(stopGrace)
		}
		_ = reaper.Close()
	}()

	// Upstream.
	upAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	upstreamDesc := ""
	if bin, err := FindBinary("llmsim", o.BinDirs...); err == nil {
		p, err := reaper.StartProcess("llmsim", bin, llmsimArgs(o, upAddr), dir)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if err := waitReady(ctx, "http://"+upAddr, p); err != nil {
			return nil, fmt.Errorf("peers: llmsim did not become ready: %w\n%s", err, p.LogTail(2000))
		}
		upstreamDesc = fmt.Sprintf("llmsim (%s) ttft %v itl %v tokens %d", bin, o.SimTTFT, o.SimITL, o.SimTokens)
	} else {
		ln, err := net.Listen("tcp", upAddr)
		if err != nil {
			return nil, fmt.Errorf("peers: %w", err)
		}
		up := harness.StartUpstream(ln, harness.UpstreamOptions{TTFT: o.SimTTFT, ITL: o.SimITL, Tokens: o.SimTokens})
		defer up.Close()
		note("llmsim not found in %s or PATH: using the harness's basic in-process upstream (it shares the load generator's process); build it with `make build`", strings.Join(o.BinDirs, ", "))
		upstreamDesc = fmt.Sprintf("basic in-process upstream ttft %v itl %v tokens %d", o.SimTTFT, o.SimITL, o.SimTokens)
	}
	targets := []target{{name: TargetDirect, url: "http://" + upAddr}}

	start := func(name, bin string, args []string) {
		listen := args[len(args)-1]
		args = args[:len(args)-1]
		p, err := reaper.StartProcess(name, bin, args, dir)
		if err != nil {
			note("%s skipped: %v", name, err)
			return
		}
		procs = append(procs, p)
		if err := waitReady(ctx, "http://"+listen, p); err != nil {
			note("%s skipped: not ready: %v; log %s: %s", name, err, p.LogPath, oneLine(p.LogTail(600)))
			_ = p.Stop(stopGrace)
			return
		}
		targets = append(targets, target{name: name, url: "http://" + listen, proc: p})
		fmt.Fprintf(o.Log, "started %s on %s (pid %d)\n", name, listen, p.PID())
	}
	workers := runtime.NumCPU()

	// sluice, one process per engine.
	for _, spec := range o.Engines {
		eng, binDir, alt := strings.Cut(spec, "@")
		name := "sluice-" + eng
		if alt {
			// Another build side by side (a tag, a commit): named by its directory's base
			// name, so the report holds no machine path.
			name += "@" + filepath.Base(binDir)
		}
		bin := sluiceBins[spec]
		listen, err := freeAddr()
		if err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, strings.ReplaceAll(name, "@", "-at-")+".toml")
		if err := os.WriteFile(cfg, []byte(SluiceConfig(ProxyConfig{Listen: listen, Upstream: upAddr, Dir: dir, SluiceExtra: o.SluiceExtra}, eng)), 0o644); err != nil {
			return nil, fmt.Errorf("peers: %w", err)
		}
		start(name, bin, []string{"serve", "--config", cfg, listen})
	}
	// Peers.
	for _, peer := range o.Peers {
		bin, err := FindBinary(peer)
		if err != nil {
			note("%s not found in PATH or %s: install with `%s`; continuing without it", peer, strings.Join(sbinDirs, ", "), InstallHint)
			continue
		}
		listen, err := freeAddr()
		if err != nil {
			return nil, err
		}
		pc := ProxyConfig{Listen: listen, Upstream: upAddr, Dir: dir, Workers: workers, MaxConns: maxConnsForFDLimit()}
		switch peer {
		case TargetNginx:
			cfg := filepath.Join(dir, "nginx.conf")
			if err := os.WriteFile(cfg, []byte(NginxConfig(pc)), 0o644); err != nil {
				return nil, fmt.Errorf("peers: %w", err)
			}
			start(peer, bin, []string{"-p", dir, "-c", cfg, "-e", filepath.Join(dir, "error.log"), listen})
		case TargetHAProxy:
			cfg := filepath.Join(dir, "haproxy.cfg")
			if err := os.WriteFile(cfg, []byte(HAProxyConfig(pc)), 0o644); err != nil {
				return nil, fmt.Errorf("peers: %w", err)
			}
			start(peer, bin, []string{"-db", "-f", cfg, listen})
		}
	}
	if len(targets) < 2 {
		note("no proxy is running: the table has the direct target only")
	}

	mode := fmt.Sprintf("closed loop, %d connections", o.Concurrency)
	if o.Rate > 0 {
		shape := "constant"
		if o.Poisson {
			shape = "Poisson"
		}
		mode = fmt.Sprintf("open loop, %.0f req/s %s", o.Rate, shape)
	}
	if o.NewConnections {
		mode += ", a new connection per request"
	}
	cmp.Setup = fmt.Sprintf("workloads %s; %s; %v per run after %v warmup; %d round(s), targets alternating, each round starting one target later; upstream %s; proxies with %d workers/threads",
		strings.Join(o.Workloads, ", "), mode, o.Duration, o.Warmup, o.Rounds, upstreamDesc, workers)
	adversaries := append([]string{""}, o.adversaries...)
	switch names := adversaryNames(o.adversaries); len(o.adversaries) {
	case 0:
	default:
		cmp.Setup += "; in each round every target runs clean, then under the adversary " + names +
			" (each adversary in turn, every target's run of it back to back), then clean again; its clean figures pool its two clean runs of the round"
	}

	dead := map[string]bool{} // targets whose process exited
	for round := 1; round <= o.Rounds; round++ {
		for _, wl := range o.Workloads {
			runs, err := runRound(ctx, &o, targets, wl, adversaries, round, dead, note)
			if err != nil {
				return nil, err
			}
			cmp.Runs = append(cmp.Runs, runs...)
		}
	}
	cmp.Rows = report.Summarize(cmp.Runs)
	cmp.Paired = report.PairRounds(cmp.Runs)
	if o.Rate > 0 {
		note("%s", sendLagNote(cmp.Runs))
	}
	if o.IdleConns > 0 {
		for _, t := range targets {
			if t.proc == nil {
				continue
			}
			ir, err := measureIdle(ctx, t, o.IdleConns)
			if err != nil {
				return nil, err
			}
			cmp.Idle = append(cmp.Idle, ir)
			fmt.Fprintf(o.Log, "idle %-16s %d/%d connections open: RSS %.1f MiB (before %.1f MiB)\n",
				t.name, ir.Opened, ir.Requested, ir.RSSMiB, ir.RSSBeforeMiB)
		}
	}
	return cmp, nil
}

// runRound measures every target on workload wl in one round: clean only, or, with
// adversaries, pass by pass: every target clean, then every target under each adversary in
// turn, then every target clean again, whose run is pooled with the first clean one
// (report.PoolRuns). A target's attacked run is set against its clean run and against the
// peers' runs under the same adversary; taking each pass across the targets back to back puts
// those runs minutes closer together than running each target's passes in a block, so a slow
// swing of the machine moves them alike, and the clean runs that open and close the round
// stand for the machine at both ends of it. Targets go in roundOrder within every pass. A
// target whose process exited is noted once, added to dead and left out from then on; a run
// during which it exited is kept (its failures are the figures), but not pooled into the
// clean run.
func runRound(ctx context.Context, o *CompareOptions, targets []target, wl string, adversaries []string, round int, dead map[string]bool, note func(string, ...any)) ([]report.Run, error) {
	passes := adversaries
	if len(adversaries) > 1 {
		passes = append(append([]string(nil), adversaries...), "") // the closing clean pass
	}
	var runs []report.Run
	clean := map[string]int{} // target → index in runs of its opening clean run
	for i, adv := range passes {
		closing := i > 0 && adv == ""
		for _, t := range roundOrder(targets, round) {
			if dead[t.name] {
				continue
			}
			if exited(t) {
				note("%s exited between runs (round %d): %s", t.name, round, oneLine(t.proc.LogTail(400)))
				dead[t.name] = true
				continue
			}
			run, err := measure(ctx, o, t, wl, adv, round)
			if err != nil {
				return nil, err
			}
			logRun(o, run, closing)
			if exited(t) {
				// Its failures are in the run; the next runs would only fail to connect.
				note("%s exited during its run (round %d, %s): %s", t.name, round, passName(adv, closing), oneLine(t.proc.LogTail(400)))
				dead[t.name] = true
				if closing {
					continue // a clean baseline pooled with a failed run would move every rise
				}
			}
			if !closing {
				if adv == "" {
					clean[t.name] = len(runs)
				}
				runs = append(runs, run)
				continue
			}
			// A target in the closing pass ran the opening one: one it missed is dead since.
			j := clean[t.name]
			pooled, err := report.PoolRuns(runs[j], run)
			if err != nil {
				return nil, err
			}
			runs[j] = pooled
		}
	}
	return runs, nil
}

// exited reports whether t's process has exited (false for a target without one).
func exited(t target) bool {
	if t.proc == nil {
		return false
	}
	select {
	case <-t.proc.Exited():
		return true
	default:
		return false
	}
}

// passName names a pass of runRound for a note: "clean", "clean again" or the adversary.
func passName(adv string, closing bool) string {
	switch {
	case adv != "":
		return "under " + harness.AdversaryName(adv)
	case closing:
		return "clean again"
	}
	return "clean"
}

// logRun prints one run's line of the progress log; closing marks the clean run that closes a
// round under adversaries.
func logRun(o *CompareOptions, run report.Run, closing bool) {
	r := run.Result
	label := run.Workload
	switch {
	case run.Adversary != "":
		label += "+" + harness.AdversaryName(run.Adversary)
	case closing:
		label += " (clean again)"
	}
	errs := ""
	if r.Errors > 0 {
		errs = " (" + r.ErrorSummary() + ")"
	}
	fmt.Fprintf(o.Log, "round %d/%d %-22s %-20s %8.0f req/s  p50 %8.1f µs  p99 %8.1f µs  errors %d%s\n",
		run.Round, o.Rounds, label, run.Target, r.RPS, r.Latency.P50Us, r.Latency.P99Us, r.Errors, errs)
}

// adversaryNames lists specs as the report names them, separated by "; ".
func adversaryNames(specs []string) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = harness.AdversaryName(s)
	}
	return strings.Join(names, "; ")
}

// sendLagNote says how precisely the generator kept the open-loop schedule:
// the largest p50 and p99 send lag over all runs. Every target's latency
// includes its run's lag, so a lag near the added latencies makes them noise.
func sendLagNote(runs []report.Run) string {
	var p50, p99 float64
	for _, r := range runs {
		if r.Result != nil && r.Result.SendLag != nil {
			p50, p99 = max(p50, r.Result.SendLag.P50Us), max(p99, r.Result.SendLag.P99Us)
		}
	}
	return fmt.Sprintf("load generator send lag (actual − intended send time, worst run): p50 %.0f µs, p99 %.0f µs; part of every target's latency alike", p50, p99)
}

// idleSettle is how long the idle connections are held while the proxy's
// RSS is sampled.
const idleSettle = time.Second

// measureIdle opens n idle keep-alive connections to t and reads the peak
// RSS of its process tree while they are held.
func measureIdle(ctx context.Context, t target, n int) (report.IdleRun, error) {
	ir := report.IdleRun{Target: t.name, Requested: n}
	before, _ := TreeUsage(t.proc.PID())
	ir.RSSBeforeMiB = float64(before.RSSBytes) / (1 << 20)
	sampler := StartSampler(t.proc.PID(), rssSampleInterval)
	set, err := harness.OpenIdle(ctx, t.url, n)
	if err != nil {
		sampler.Stop()
		return ir, err
	}
	select {
	case <-ctx.Done():
	case <-time.After(idleSettle):
	}
	ir.RSSMiB = float64(sampler.Stop()) / (1 << 20)
	ir.Opened, ir.Errors = set.Opened, set.Errors
	set.Close()
	return ir, ctx.Err()
}

// roundOrder is the order round (1-based) runs the targets in: the list
// rotated by round-1, so over len(targets) rounds each target runs once in
// every position. A fixed order measures position as well as target: a
// target that always runs right after another finds the upstream (a Go
// server whose heap, goroutines and connection state carry over) in the
// state that one left.
func roundOrder[T any](targets []T, round int) []T {
	n := len(targets)
	if n == 0 {
		return nil
	}
	k := (round - 1) % n
	out := make([]T, 0, n)
	out = append(out, targets[k:]...)
	return append(out, targets[:k]...)
}

// measure runs one workload against one target, under the adversary adv when it is not
// empty, reading the proxy's CPU time at the start and the end of the measured window and
// sampling its RSS during the whole run.
func measure(ctx context.Context, o *CompareOptions, t target, wl, adv string, round int) (report.Run, error) {
	opts := harness.Options{
		Target: t.url, Workload: wl, Concurrency: o.Concurrency, Rate: o.Rate, Poisson: o.Poisson,
		Connections: o.Connections, NewConnections: o.NewConnections, Duration: o.Duration, Warmup: o.Warmup, MaxTokens: o.MaxTokens,
		Seed: uint64(round), Progress: o.Progress, Adversary: adv,
	}
	var (
		sampler    *Sampler
		start, end Usage
		serr, eerr = errNotRead, errNotRead
		peakReset  bool
	)
	if t.proc != nil {
		pid := t.proc.PID()
		// The processes' peaks since they started may be an earlier run's (an attacked run's
		// before the clean run that closes its round): they count only when reset to now.
		peakReset = ResetPeakRSS(pid) == nil
		sampler = StartSampler(pid, rssSampleInterval)
		// CPU time over the measured window alone, as the latencies are: the warmup's
		// connects and first requests cost a proxy more than the steady state.
		opts.AtWindowStart = func() { start, serr = TreeUsage(pid) }
		opts.AtWindowEnd = func() { end, eerr = TreeUsage(pid) }
	}
	res, err := harness.Run(ctx, opts)
	run := report.Run{Round: round, Target: t.name, Workload: wl, Adversary: adv, Result: res}
	cpuRead := false
	if sampler != nil {
		run.ProxyPeakRSSBytes = sampler.Stop()
		after, uerr := TreeUsage(t.proc.PID())
		if uerr == nil && peakReset {
			// The peak of one process between two samples, which the sampled sum missed.
			run.ProxyPeakRSSBytes = max(run.ProxyPeakRSSBytes, after.HWMBytes)
		}
		if cpuRead = serr == nil && eerr == nil; cpuRead {
			run.ProxyCPUSeconds = end.CPUSeconds - start.CPUSeconds
		}
	}
	if err != nil {
		return run, err
	}
	if cpuRead {
		// Only with its CPU: a process that exited in the window has none to read, and its
		// requests would enter the median CPU per request as a cost of zero.
		run.ProxyRequests = res.WindowSent
	}
	return run, nil
}

// errNotRead is a target's usage at a window edge that was not read (the run ended first).
var errNotRead = errors.New("peers: usage not read")

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("peers: no free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// probeBody is a small non-streaming chat completion used as readiness probe.
var probeBody = []byte(`{"model":"llmsim","messages":[{"role":"user","content":"ping"}],"max_tokens":1,"stream":false}`)

// waitReady polls base until a chat completion through it answers 200, the
// process exits, ctx ends or readyTimeout passes.
func waitReady(ctx context.Context, base string, p *Process) error {
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for time.Now().Before(deadline) {
		if p != nil {
			select {
			case <-p.Exited():
				return fmt.Errorf("process exited: %v", p.waitErr)
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+harness.DefaultPath, bytes.NewReader(probeBody))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("status %d", resp.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("no 200 within %v (last: %v)", readyTimeout, last)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	return s
}

// machine describes the host: CPU model, cores, system and kernel (the model and kernel are
// read from Linux's /proc, and left empty elsewhere).
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.IndexByte(l, ':'); i >= 0 {
					model = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	system := runtime.GOOS
	if system == "linux" {
		system = "Linux"
	}
	return fmt.Sprintf("%s, %d CPUs, %s %s, %s", model, runtime.NumCPU(), system, kernel, runtime.Version())
}

// llmsimArgs is the upstream's command line: Compare's flags, less those o.SimArgs give,
// then o.SimArgs.
func llmsimArgs(o CompareOptions, upAddr string) []string {
	own := [][2]string{
		{"listen", upAddr}, {"ttft", o.SimTTFT.String()}, {"itl", o.SimITL.String()},
		{"tokens", fmt.Sprint(o.SimTokens)},
		// A pure timing model: no prefill cost per prompt token, no batch slowdown, no
		// queueing, no context window (MaxTokens is the caller's choice, and a refusal
		// would measure nothing).
		{"per-uncached-token", "0s"}, {"itl-per-running", "0s"},
		{"max-running", "100000"}, {"max-waiting", "100000"}, {"max-model-len", "0"},
	}
	given := map[string]bool{}
	for _, a := range o.SimArgs {
		if name, ok := strings.CutPrefix(a, "-"); ok {
			name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
			given[name] = true
		}
	}
	var args []string
	for _, f := range own {
		if !given[f[0]] {
			args = append(args, "--"+f[0], f[1])
		}
	}
	return append(args, o.SimArgs...)
}
