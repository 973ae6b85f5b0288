package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/report"
	"github.com/sluice-gw/sluice/core/config"
)

var testProxy = ProxyConfig{Listen: "127.0.0.1:18080", Upstream: "127.0.0.1:18000", Dir: "/tmp/bench-x/", Workers: 2, MaxConns: 5000}

func TestNginxConfigHasEquivalentSettings(t *testing.T) {
	c := NginxConfig(testProxy)
	for _, want := range []string{
		"daemon off;", "worker_processes 2;", "pid /tmp/bench-x/nginx.pid;",
		"worker_connections 5000;", "access_log off;",
		"server 127.0.0.1:18000;", "keepalive 1024;", "keepalive_requests 1000000;",
		"listen 127.0.0.1:18080", "proxy_pass http://up;", "proxy_http_version 1.1;",
		`proxy_set_header Connection "";`, "proxy_buffering off;", "proxy_request_buffering off;",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "%!") {
		t.Fatalf("format error in nginx.conf:\n%s", c)
	}
}

func TestHAProxyConfigHasEquivalentSettings(t *testing.T) {
	c := HAProxyConfig(testProxy)
	for _, want := range []string{
		"nbthread 2", "maxconn 5000", "mode http", "option http-keep-alive", "http-reuse always",
		"option http-no-delay", "bind 127.0.0.1:18080", "server up 127.0.0.1:18000",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "%!") {
		t.Fatalf("format error in haproxy.cfg:\n%s", c)
	}
}

// TestGeneratedConfigsPassThePeersOwnCheck runs `nginx -t` and `haproxy -c`
// on the generated files when the peers are installed.
func TestGeneratedConfigsPassThePeersOwnCheck(t *testing.T) {
	dir := t.TempDir()
	pc := ProxyConfig{Listen: "127.0.0.1:18080", Upstream: "127.0.0.1:18000", Dir: dir, Workers: 2, MaxConns: maxConnsForFDLimit()}
	if bin, err := FindBinary("nginx"); err != nil {
		t.Logf("nginx not installed (%s): skipping its check", InstallHint)
	} else {
		cfg := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(cfg, []byte(NginxConfig(pc)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "-t", "-p", dir, "-c", cfg, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
			t.Errorf("nginx -t: %v\n%s", err, out)
		}
	}
	if bin, err := FindBinary("haproxy"); err != nil {
		t.Logf("haproxy not installed (%s): skipping its check", InstallHint)
	} else {
		cfg := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(cfg, []byte(HAProxyConfig(pc)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "-c", "-f", cfg).CombinedOutput(); err != nil {
			t.Errorf("haproxy -c: %v\n%s", err, out)
		}
	}
}

func TestSluiceConfigIsTheDesignShape(t *testing.T) {
	for _, engine := range []string{EngineGnet, EngineFasthttp} {
		var c struct {
			Entrypoints map[string]struct {
				Address string `toml:"address"`
				Engine  string `toml:"engine"`
			} `toml:"entrypoints"`
			Routers map[string]struct {
				Rule    string `toml:"rule"`
				Service string `toml:"service"`
			} `toml:"routers"`
			Services map[string]struct {
				LoadBalancer struct {
					Servers []struct {
						URL string `toml:"url"`
					} `toml:"servers"`
				} `toml:"load_balancer"`
			} `toml:"services"`
			Admin struct {
				Address *string `toml:"address"`
			} `toml:"admin"`
		}
		src := SluiceConfig(testProxy, engine)
		if err := toml.Unmarshal([]byte(src), &c); err != nil {
			t.Fatalf("%s: %v\n%s", engine, err, src)
		}
		ep := c.Entrypoints["web"]
		r := c.Routers["all"]
		srv := c.Services["up"].LoadBalancer.Servers
		if ep.Address != "127.0.0.1:18080" || ep.Engine != engine || r.Rule != "PathPrefix(`/`)" || r.Service != "up" ||
			len(srv) != 1 || srv[0].URL != "http://127.0.0.1:18000" || c.Admin.Address == nil || *c.Admin.Address != "" {
			t.Errorf("%s: unexpected config %+v\n%s", engine, c, src)
		}
	}
}

func TestFindBinaryPrefersBinDirThenPath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinary("sh", dir); err != nil || got != p {
		t.Errorf("FindBinary(sh, dir) = %q, %v; want %q", got, err, p)
	}
	if got, err := FindBinary("sh", filepath.Join(dir, "missing")); err != nil || got == p {
		t.Errorf("FindBinary(sh) from PATH = %q, %v", got, err)
	}
	if _, err := FindBinary("no-such-binary-sluice-bench"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing binary: err = %v", err)
	}
}

func TestProcessUsageAndStop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process usage is read from Linux's /proc (usage_other.go)")
	}
	dir := t.TempDir()
	// A shell that burns CPU in a child process: the tree's CPU time and
	// RSS must include the child.
	p, err := StartProcess("burn", "/bin/sh", []string{"-c", "sh -c 'while :; do :; done' & wait"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	// CPU time accumulates with no event to wait on: the tree's usage is read again until
	// the child has run, within a deadline.
	var u Usage
	var uerr error
	require.Eventually(t, func() bool {
		if u, uerr = TreeUsage(p.PID()); uerr != nil {
			return true
		}
		return u.Procs >= 2 && u.CPUSeconds >= 0.05
	}, 10*time.Second, 20*time.Millisecond, "the child's CPU time never showed in the tree's usage")
	if uerr != nil {
		t.Fatal(uerr)
	}
	if u.Procs < 2 || u.CPUSeconds < 0.05 || u.RSSBytes <= 0 || u.HWMBytes <= 0 {
		t.Fatalf("usage = %+v, want the child's CPU time and memory", u)
	}
	s := StartSampler(p.PID(), 10*time.Millisecond)
	if peak := s.Stop(); peak <= 0 {
		t.Errorf("sampled peak RSS = %d", peak)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("process still running after Stop")
	}
	if _, err := TreeUsage(p.PID()); err == nil {
		t.Error("TreeUsage of an exited process returned no error")
	}
}

// TestCompareDirectAndInstalledPeers runs a short compare: the basic
// upstream (llmsim is not looked up: BinDirs points at an empty directory
// and PATH is unlikely to hold it), no sluice, and whichever of nginx and
// haproxy is installed.
func TestCompareDirectAndInstalledPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts proxies")
	}
	cmp, err := Compare(context.Background(), CompareOptions{
		Engines:  []string{},
		BinDirs:  []string{t.TempDir()},
		Rounds:   1,
		Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Concurrency: 4,
		SimTokens:   4,
		Log:         testLog{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range cmp.Rows {
		seen[r.Target+"/"+r.Workload] = true
		if r.Errors != 0 || r.RPS <= 0 {
			t.Errorf("%s %s: rps %.0f errors %d (notes %v)", r.Target, r.Workload, r.RPS, r.Errors, cmp.Notes)
		}
		if r.Target != TargetDirect && (r.CPUPer1k <= 0 || r.PeakRSSMiB <= 0) {
			t.Errorf("%s: no proxy usage: cpu/1k %v rss %v", r.Target, r.CPUPer1k, r.PeakRSSMiB)
		}
		if r.Workload == "sse" && r.TTFTP50Us <= 0 {
			t.Errorf("%s sse: no TTFT", r.Target)
		}
	}
	if !seen["direct/json"] || !seen["direct/sse"] {
		t.Fatalf("direct rows missing: %v", seen)
	}
	for _, peer := range []string{TargetNginx, TargetHAProxy} {
		_, ferr := FindBinary(peer)
		if ferr == nil && !seen[peer+"/json"] {
			t.Errorf("%s installed but not compared; notes: %v", peer, cmp.Notes)
		}
		if ferr != nil && !strings.Contains(strings.Join(cmp.Notes, "\n"), InstallHint) {
			t.Errorf("%s missing without an install hint; notes: %v", peer, cmp.Notes)
		}
	}
}

// Under an adversary a round runs pass by pass: every target clean, every target attacked,
// every target clean again; each target's two clean runs come back as one run pooling both.
func TestCompareUnderAnAdversaryRunsPassByPass(t *testing.T) {
	if testing.Short() {
		t.Skip("starts proxies")
	}
	var log lines
	cmp, err := Compare(context.Background(), CompareOptions{
		Engines:   []string{},
		BinDirs:   []string{t.TempDir()},
		Workloads: []string{"sse"},
		Rounds:    1,
		Duration:  300 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Concurrency: 4,
		SimTokens:   4,
		Adversary:   "reset=1",
		Log:         &log,
	})
	require.NoError(t, err)

	targets := map[string]bool{}
	for _, r := range cmp.Runs {
		targets[r.Target] = true
		if r.Adversary != "" {
			require.Zero(t, r.Pooled, "%s attacked", r.Target)
			continue
		}
		require.Equal(t, 2, r.Pooled, "%s: its clean run pools the opening and the closing one", r.Target)
		require.InDelta(t, 0.6, r.Result.DurationS, 1e-9, "%s: two windows of 300 ms", r.Target)
		require.Positive(t, r.Result.OK, r.Target)
		if r.Target != TargetDirect {
			require.Positive(t, r.ProxyRequests, r.Target)
		}
	}
	require.Len(t, cmp.Runs, 2*len(targets), "one clean and one attacked run per target")

	// The passes in the progress log: clean, attacked, clean again, each across all targets.
	var passes []int
	for _, l := range log.all() {
		if !strings.HasPrefix(l, "round 1/1 ") {
			continue
		}
		switch f := strings.Fields(strings.TrimPrefix(l, "round 1/1 ")); {
		case strings.HasPrefix(f[0], "sse+"):
			passes = append(passes, 1)
		case len(f) > 2 && f[1] == "(clean" && f[2] == "again)":
			passes = append(passes, 2)
		default:
			passes = append(passes, 0)
		}
	}
	require.Len(t, passes, 3*len(targets), "log: %q", log.all())
	require.True(t, slices.IsSorted(passes), "runs out of pass order: %v", passes)
	perPass := make([]int, 3)
	for _, p := range passes {
		perPass[p]++
	}
	require.Equal(t, []int{len(targets), len(targets), len(targets)}, perPass, "runs per pass: %v", passes)
}

// A target whose process dies during its closing clean run is noted, and that run is not
// pooled into its clean baseline: the clean run stays the opening one alone. The target here is
// a loopback server beside a stand-in process, which the server kills when the closing run's
// first request reaches it (the progress log has shown the two passes before).
func TestCompareDoesNotPoolARunTheTargetDiedIn(t *testing.T) {
	proc, err := StartProcess("victim", "/bin/sleep", []string{"60"}, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proc.Stop(time.Second) })
	var log lines
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if log.ended() == 2 {
			_ = proc.Stop(0)
			<-proc.Exited()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(srv.Close)
	o := CompareOptions{Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, Concurrency: 2, Rounds: 1, Log: &log}
	var notes []string
	runs, err := runRound(context.Background(), &o, []target{{name: "victim", url: srv.URL, proc: proc}}, "json",
		[]string{"", "noread=1"}, 1, map[string]bool{}, func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) })
	require.NoError(t, err)
	require.Len(t, runs, 2, "the opening clean run and the attacked run")
	require.Equal(t, "", runs[0].Adversary)
	require.Zero(t, runs[0].Pooled, "the run the target died in is not pooled")
	require.Len(t, notes, 1, "notes %q", notes)
	require.Contains(t, notes[0], "victim exited during its run (round 1, clean again)")
}

// A target that exits during its run has no CPU to read: the run counts none of its requests
// against its CPU, so a cost of zero never enters the median, and the table shows "–".
func TestMeasureLeavesTheCPUOfADeadTargetUnknown(t *testing.T) {
	proc, err := StartProcess("victim", "/bin/sleep", []string{"60"}, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proc.Stop(time.Second) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = proc.Stop(0)
		<-proc.Exited()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(srv.Close)
	o := CompareOptions{Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, Concurrency: 2}
	run, err := measure(context.Background(), &o, target{name: "victim", url: srv.URL, proc: proc}, "json", "", 1)
	require.NoError(t, err)
	require.Positive(t, run.Result.TotalSent, "the run's requests were answered")
	require.Zero(t, run.ProxyRequests, "no requests stand against a CPU that was not read")
	rows := report.Summarize([]report.Run{run})
	require.Len(t, rows, 1)
	require.Zero(t, rows[0].CPUPer1k)
	table := report.MarkdownTable(rows)
	require.Contains(t, table, "| – | – | – |", "CPU, its ratio and peak RSS unknown:\n%s", table)
}

// lines collects what is written to it, one entry per line.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// ended counts the lines written whole: in a progress log, the runs that ended.
func (l *lines) ended() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), "\n")
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimRight(l.b.String(), "\n"), "\n")
}

func TestCompareRejectsBadOptions(t *testing.T) {
	for _, o := range []CompareOptions{
		{Peers: []string{"envoy"}},
		{Engines: []string{"netpoll"}},
		{Workloads: []string{"grpc"}},
		{Concurrency: 4, Rate: 100},
	} {
		if _, err := Compare(context.Background(), o); err == nil {
			t.Errorf("Compare(%+v) = nil error", o)
		}
	}
}

// A value out of range is refused, named by its flag with the value as that flag prints it, as
// sluice-bench run's values are (harness.OptionError); the load's own values in run's words.
func TestCompareNamesTheRefusedValue(t *testing.T) {
	for _, c := range []struct {
		o           CompareOptions
		flag, value string
	}{
		{CompareOptions{Rounds: -1}, "rounds", "-1"},
		{CompareOptions{Rounds: MaxRounds + 1}, "rounds", "101"},
		{CompareOptions{SimTokens: llmsim.MaxOutputTokens + 1}, "sim-tokens", "1048577"},
		// Of a list, the element refused.
		{CompareOptions{Peers: []string{"nginx", "nginxx"}}, "peers", "nginxx"},
		{CompareOptions{Engines: []string{"gnett@old"}}, "engines", "gnett@old"},
		{CompareOptions{Engines: []string{"gnet@"}}, "engines", "gnet@"},
		{CompareOptions{Workloads: []string{"json", "jsn"}}, "workload", "jsn"},
		// Of a list, the element given twice: it would not be measured twice.
		{CompareOptions{Peers: []string{"nginx", "haproxy", "nginx"}}, "peers", "nginx"},
		{CompareOptions{Engines: []string{"gnet", "fasthttp", "gnet"}}, "engines", "gnet"},
		{CompareOptions{Engines: []string{"gnet@old", "gnet@old"}}, "engines", "gnet@old"},
		{CompareOptions{Workloads: []string{"json", "sse", "json"}}, "workload", "json"},
		// An empty list written out, which the flag spells as it was typed.
		{CompareOptions{Workloads: []string{}}, "workload", ""},
		{CompareOptions{Adversary: "noread=0"}, "adversary", "noread=0"},
		{CompareOptions{Adversary: ";"}, "adversary", ";"},
		{CompareOptions{Warmup: -time.Second}, "warmup", "-1s"},
		{CompareOptions{SimTokens: -1}, "sim-tokens", "-1"},
		{CompareOptions{IdleConns: -1}, "idle", "-1"},
		{CompareOptions{Duration: -time.Second}, "duration", "-1s"},
		{CompareOptions{Duration: time.Nanosecond}, "duration", "1ns"},
		{CompareOptions{Quick: true, Duration: 50 * time.Millisecond}, "duration", "50ms"},
		{CompareOptions{Concurrency: -5}, "concurrency", "-5"},
		{CompareOptions{Connections: -1}, "connections", "-1"},
		{CompareOptions{Rate: -1}, "rate", "-1"},
	} {
		err := c.o.normalize()
		var pe *OptionError
		var he *harness.OptionError
		switch {
		case errors.As(err, &pe):
			require.Equal(t, [2]string{c.flag, c.value}, [2]string{pe.Flag, pe.Value}, "%v", err)
		case errors.As(err, &he):
			require.Equal(t, [2]string{c.flag, c.value}, [2]string{he.Flag, he.Value}, "%v", err)
		default:
			t.Errorf("%+v: %v", c.o, err)
		}
	}
}

// An engine asked for whose sluice binary is missing is refused before anything starts, as a
// bad option is: a compare that ran without it would report the others as if it had measured
// sluice. ENGINE@DIR looks in DIR alone, whatever PATH holds.
func TestCompareRefusesEngineWithoutSluice(t *testing.T) {
	tmp, empty := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp) // where a compare that started would make its work directory
	t.Setenv("PATH", empty)
	for _, engines := range [][]string{
		{EngineGnet},
		{EngineGnet + "@" + empty},
		{EngineFasthttp, EngineGnet + "@" + empty},
	} {
		o := CompareOptions{Engines: engines, Peers: []string{}, Workloads: []string{harness.WorkloadJSON},
			Quick: true, BinDirs: []string{empty}, Log: testLog{t}}
		_, err := Compare(context.Background(), o)
		var oe *OptionError
		require.ErrorAs(t, err, &oe, "%v", o.Engines)
		require.Equal(t, "engines", oe.Flag)
		require.Contains(t, oe.Msg, "sluice", "%v", o.Engines)
		dirs, _ := filepath.Glob(filepath.Join(tmp, "*"))
		require.Empty(t, dirs, "%v: nothing started", o.Engines)
	}
}

// RunAffinity refuses a policy that needs sluice without its binary as Compare refuses an
// engine: before anything starts, in the same words, for the option that asked for it.
func TestAffinityRefusesPolicyWithoutSluice(t *testing.T) {
	tmp, empty := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("PATH", empty)
	_, err := RunAffinity(context.Background(), AffinityOptions{Policies: []string{PolicyOracle, PolicyAffinity},
		BinDirs: []string{empty}, Log: testLog{t}})
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "policies", oe.Flag)
	require.Equal(t, "sluice not found in "+empty+" or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or run --policies oracle alone", oe.Msg)
	dirs, _ := filepath.Glob(filepath.Join(tmp, "*"))
	require.Empty(t, dirs, "nothing started")

	_, err = Compare(context.Background(), CompareOptions{Engines: []string{EngineGnet}, Peers: []string{},
		Quick: true, BinDirs: []string{empty}, Log: testLog{t}})
	var ce *OptionError
	require.ErrorAs(t, err, &ce)
	same := "sluice not found in " + empty + " or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or "
	require.True(t, strings.HasPrefix(ce.Msg, same), ce.Msg)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s %s", time.Now().Format("15:04:05.000"), strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The middlewares of bench/configs/loop-middlewares.toml fit the generated config: sluice
// loads it with the catch-all router listing them.
func TestSluiceExtraLoads(t *testing.T) {
	extra, err := os.ReadFile("../configs/loop-middlewares.toml")
	if err != nil {
		t.Fatal(err)
	}
	c := testProxy
	c.SluiceExtra = string(extra)
	src := SluiceConfig(c, EngineGnetLoop)
	cfg, err := config.LoadBytes("bench.toml", []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if got := cfg.Routers["all"].Middlewares; len(got) != 4 {
		t.Errorf("router all has middlewares %v\n%s", got, src)
	}
}

// Each sluice engine name gives a config sluice loads, with the upstream path it names.
func TestSluiceEnginesLoad(t *testing.T) {
	for engine, want := range map[string][2]string{
		EngineGnet:        {"loop", "worker"},
		EngineGnetLoop:    {"loop", "worker"},
		EngineGnetConnect: {"loop", "loop"},
		EngineGnetWorker:  {"worker", "worker"},
	} {
		src := SluiceConfig(testProxy, engine)
		cfg, err := config.LoadBytes("bench.toml", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v\n%s", engine, err, src)
		}
		ep := cfg.Entrypoints["web"]
		if got := [2]string{ep.UpstreamIO, ep.UpstreamConnect}; got != want {
			t.Errorf("%s: upstream_io, upstream_connect = %v, want %v", engine, got, want)
		}
	}
}

func TestRoundOrderPutsEveryTargetInEveryPosition(t *testing.T) {
	targets := []string{"direct", "gnet", "nginx", "haproxy"}
	assert.Equal(t, targets, roundOrder(targets, 1))
	assert.Equal(t, []string{"gnet", "nginx", "haproxy", "direct"}, roundOrder(targets, 2))
	assert.Equal(t, targets, roundOrder(targets, 5))
	seen := map[string]map[int]bool{}
	for round := 1; round <= len(targets); round++ {
		for pos, name := range roundOrder(targets, round) {
			if seen[name] == nil {
				seen[name] = map[int]bool{}
			}
			seen[name][pos] = true
		}
	}
	for _, name := range targets {
		assert.Len(t, seen[name], len(targets), "%s did not run in every position", name)
	}
	assert.Equal(t, []string{"direct", "gnet", "nginx", "haproxy"}, targets, "the caller's slice is left as it was")
	assert.Nil(t, roundOrder([]string(nil), 3))
}
