package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/bench/harness"
	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/report"
)

// Routing policies of the prefix-affinity quality benchmark (RunAffinity).
const (
	PolicyRoundRobin       = "round-robin"       // sluice, strategy round-robin
	PolicyLeastConnections = "least-connections" // sluice, strategy least-connections
	PolicyAffinity         = "affinity"          // sluice with prefix_affinity
	PolicyAffinity2        = "affinity-2"        // two sluice processes with prefix_affinity, requests alternating
	PolicyOracle           = "oracle"            // a router that knows every instance's KV cache
)

// AffinityPolicies lists the policies in the order RunAffinity runs them by default.
var AffinityPolicies = []string{PolicyRoundRobin, PolicyLeastConnections, PolicyAffinity, PolicyAffinity2, PolicyOracle}

// RunAffinity defaults of the options sluice-bench affinity's usage line shows.
const (
	// DefaultAffinityInstances is the llmsim fleet's size.
	DefaultAffinityInstances = 8
	// DefaultAffinityConcurrency is not a multiple of the fleet's size, so that round robin
	// does not send a conversation's turns to one instance by aliasing.
	DefaultAffinityConcurrency = 30
	// DefaultAffinityDuration is each policy's measured window.
	DefaultAffinityDuration = 20 * time.Second
	// MaxAffinityInstances bounds the llmsim fleet's size (each instance is a listener and its
	// KV cache in this process).
	MaxAffinityInstances = 64
	// observedTimeout bounds the wait for a gateway to take every instance of a restarted
	// fleet back: two polls at the default observe_interval (1 s), with room for a busy machine.
	observedTimeout = 30 * time.Second
)

// AffinityOptions configure RunAffinity. Zero values take the defaults given.
type AffinityOptions struct {
	// Instances is the llmsim fleet's size (default DefaultAffinityInstances).
	Instances int
	// Concurrency is the closed-loop connections of the chat-multiturn workload, each running
	// one conversation at a time (default DefaultAffinityConcurrency).
	Concurrency int
	// Duration is each policy's measured window (default DefaultAffinityDuration), Warmup the
	// load before it (default 5 s).
	Duration, Warmup time.Duration
	// Turns per conversation (default 6), MaxTokens generated per request (default 64, at
	// most llmsim.MaxOutputTokens).
	// Each turn sends back the reply the instance generated (as a chat client does), unless
	// ReplyBytes sets a fixed reply of that many bytes instead.
	Turns, ReplyBytes, MaxTokens int
	// The instances' timing (llmsim): TTFT is the prefill overhead of a fully cached prompt
	// (default 20 ms), PerUncachedToken the prefill cost of each prompt token not cached
	// (default 100 µs), ITL the time per output token (default 5 ms).
	TTFT, PerUncachedToken, ITL time.Duration
	// Observe makes the affinity policies' gateways poll the instances' worker observations
	// ([services.<name>.workers], every 100 ms), so that their loads are the instances' own
	// (active and waiting sequences) rather than each gateway's requests in flight.
	Observe bool
	// Blocks is each instance's KV cache in 16-token blocks (default 8192).
	Blocks int
	// Seed makes the workload and the fleet's outputs reproducible (default 1).
	Seed uint64
	// Policies to run, in order (nil: AffinityPolicies; an empty list is refused).
	Policies []string
	// BinDirs are searched for sluice before PATH (default ./bin).
	BinDirs []string
	// Log receives a line per policy (nil: none).
	Log io.Writer
}

// normalize fills in the defaults of the fields left zero, then checks o.
func (o *AffinityOptions) normalize() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Instances, DefaultAffinityInstances)
	def(&o.Concurrency, DefaultAffinityConcurrency)
	def(&o.Turns, 6)
	def(&o.MaxTokens, 64)
	def(&o.Blocks, 8192)
	defD(&o.Duration, DefaultAffinityDuration)
	defD(&o.Warmup, 5*time.Second)
	defD(&o.TTFT, 20*time.Millisecond)
	defD(&o.PerUncachedToken, 100*time.Microsecond)
	defD(&o.ITL, 5*time.Millisecond)
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Policies == nil {
		o.Policies = AffinityPolicies
	}
	if o.BinDirs == nil {
		o.BinDirs = []string{"bin"}
	}
	return o.Check()
}

// Check returns the first of o's values that RunAffinity refuses, as an *OptionError (or a
// *harness.OptionError for the workload's options) named by its sluice-bench affinity flag,
// or nil. It takes every value as given: a 0 that RunAffinity would read as "not given" is
// refused, so that a command which sets each option from a flag with its default can tell
// a 0 written on its command line from the default, and refuse it before anything runs.
func (o AffinityOptions) Check() error {
	itoa := strconv.Itoa
	positive := func(flag string, d time.Duration) error {
		if d <= 0 || d > harness.MaxDuration {
			return harness.RefuseDuration(flag, d.String())
		}
		return nil
	}
	switch {
	case o.Instances < 1 || o.Instances > MaxAffinityInstances:
		return refuse("instances", itoa(o.Instances), "want 1 to %d instances", MaxAffinityInstances)
	case o.Concurrency < 1:
		return harness.RefuseConcurrency(itoa(o.Concurrency))
	case o.Turns < 1:
		return refuse("turns", itoa(o.Turns), "want 1 or more turns")
	case o.MaxTokens < 1 || o.MaxTokens > llmsim.MaxOutputTokens:
		// The fleet's instances are configured to generate MaxTokens, which llmsim bounds.
		return refuse("max-tokens", itoa(o.MaxTokens), "want 1 to %d tokens", llmsim.MaxOutputTokens)
	case o.Blocks < 1:
		return refuse("sim-blocks", itoa(o.Blocks), "want 1 or more blocks")
	case len(o.Policies) == 0:
		return optionError("policies", "want one or more of %s", strings.Join(AffinityPolicies, ", "))
	}
	for _, t := range []struct {
		flag string
		d    time.Duration
	}{{"warmup", o.Warmup}, {"sim-ttft", o.TTFT}, {"sim-per-uncached-token", o.PerUncachedToken}, {"sim-itl", o.ITL}} {
		if err := positive(t.flag, t.d); err != nil {
			return err
		}
	}
	for _, p := range o.Policies {
		if !slices.Contains(AffinityPolicies, p) {
			return refuse("policies", p, "want %s%s", strings.Join(AffinityPolicies, ", "), nearest(p, AffinityPolicies...))
		}
	}
	if err := refuseRepeated("policies", "policy", o.Policies); err != nil {
		return err
	}
	// The workload's options, checked as sluice-bench run checks its own: their bounds
	// (concurrency, duration, warmup, reply bytes) in run's words.
	load := harness.Options{Target: checkTarget, Workload: harness.WorkloadMultiTurn, Concurrency: o.Concurrency,
		Duration: o.Duration, Warmup: o.Warmup, MaxTokens: o.MaxTokens, Turns: o.Turns,
		ReplyBytes: o.ReplyBytes, EchoReplies: o.ReplyBytes == 0}
	return load.Check()
}

// AffinityRow is one policy's outcome. Rates and loads are over the measured window.
type AffinityRow struct {
	Policy string `json:"policy"`
	// Replicas is the number of routers the requests alternated between.
	Replicas int `json:"replicas"`
	// OK and Errors count the workload's requests in the window; ErrorSummary gives the
	// errors by kind (harness.Result.ErrorSummary), "" without any.
	OK           int64  `json:"ok"`
	Errors       int64  `json:"errors"`
	ErrorSummary string `json:"error_summary,omitempty"`
	// HitRate is the fleet's prompt tokens found in a KV cache over its prompt tokens (what
	// vLLM's prefix_cache_hits / prefix_cache_queries gives).
	HitRate float64 `json:"hit_rate"`
	// FullMisses counts requests with no cached prompt block.
	FullMisses int64 `json:"full_misses"`
	// TTFT percentiles as the client saw them, in ms.
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	// InstanceLoad is each instance's mean in-flight sequences (running + waiting), sampled
	// every 5 ms; BusiestOverMean is the largest over their mean.
	InstanceLoad    []float64 `json:"instance_load"`
	BusiestOverMean float64   `json:"busiest_over_mean"`
}

// AffinityResult is RunAffinity's outcome.
type AffinityResult struct {
	// Command is the command line that ran it, as a POSIX shell takes it back
	// (report.CommandLine): RunAffinity leaves it "" (left out of the JSON) for its caller to set.
	Command string          `json:"command,omitempty"`
	Options AffinityOptions `json:"options"`
	Rows    []AffinityRow   `json:"rows"`
}

// RunAffinity runs the chat-multiturn workload against a fresh llmsim fleet per policy
// (cold caches for each) through the policy's router and measures the fleet's prefix-cache
// hit rate, the clients' TTFT and the balance of the instances' load. A policy that needs
// sluice (all but oracle) when its binary is not in BinDirs or on PATH is an *OptionError
// for --policies, returned before anything starts, as Compare refuses an engine without it.
func RunAffinity(ctx context.Context, o AffinityOptions) (*AffinityResult, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	var bin string
	for _, p := range o.Policies {
		if p != PolicyOracle && bin == "" {
			b, err := findSluice(o.BinDirs, "policies", "run --policies "+PolicyOracle+" alone")
			if err != nil {
				return nil, err
			}
			bin = b
		}
	}
	dir, err := os.MkdirTemp("", "sluice-bench-affinity-")
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	reaper, err := StartReaper(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer reaper.Close()
	res := &AffinityResult{Options: o}
	for _, p := range o.Policies {
		row, err := runPolicy(ctx, &o, p, bin, dir, reaper)
		if err != nil {
			return nil, fmt.Errorf("peers: policy %s: %w", p, err)
		}
		if o.Log != nil {
			fmt.Fprintf(o.Log, "%-18s hit rate %.1f%%, TTFT p50 %.1f ms p99 %.1f ms, busiest/mean %.2f, %d ok %d errors\n",
				p, 100*row.HitRate, row.TTFTP50Ms, row.TTFTP99Ms, row.BusiestOverMean, row.OK, row.Errors)
		}
		res.Rows = append(res.Rows, *row)
	}
	return res, nil
}

func runPolicy(ctx context.Context, o *AffinityOptions, policy, bin, dir string, reaper *Reaper) (*AffinityRow, error) {
	cfg := llmsim.DefaultConfig()
	cfg.Seed = o.Seed
	cfg.Instances = o.Instances
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(o.TTFT)
	cfg.Defaults.PerUncachedToken = llmsim.Duration(o.PerUncachedToken)
	cfg.Defaults.ITL = llmsim.Duration(o.ITL)
	cfg.Defaults.Tokens = o.MaxTokens
	cfg.Defaults.Blocks = o.Blocks
	// No context window: the conversations' length (Turns, ReplyBytes) and MaxTokens are the
	// caller's to choose, and a refusal would measure nothing.
	cfg.Defaults.MaxModelLen = 0
	fleet, err := llmsim.Start(cfg)
	if err != nil {
		return nil, err
	}
	defer fleet.Close()

	var targets, admins []string
	switch policy {
	case PolicyOracle:
		base, stop, err := startOracle(fleet)
		if err != nil {
			return nil, err
		}
		defer stop()
		targets = []string{base}
	default:
		n := 1
		if policy == PolicyAffinity2 {
			n = 2
		}
		for k := range n {
			listen, err := freeAddr()
			if err != nil {
				return nil, err
			}
			admin, err := freeAddr()
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s-%d", policy, k)
			path := filepath.Join(dir, name+".toml")
			if err := os.WriteFile(path, []byte(affinityConfig(listen, admin, fleet.Addrs(), policy, o.Observe)), 0o644); err != nil {
				return nil, err
			}
			p, err := reaper.StartProcess(name, bin, []string{"serve", "--config", path}, dir)
			if err != nil {
				return nil, err
			}
			defer func() { _ = p.Stop(5 * time.Second) }()
			base := "http://" + listen
			if err := waitReady(ctx, base, p); err != nil {
				return nil, fmt.Errorf("%s: %w; log: %s", name, err, oneLine(p.LogTail(20)))
			}
			targets, admins = append(targets, base), append(admins, "http://"+admin)
		}
	}
	// The readiness probes touched the caches: start every policy cold.
	for i := range fleet.Len() {
		if err := fleet.Crash(i, 0); err != nil {
			return nil, err
		}
	}
	if err := waitFleet(ctx, fleet); err != nil {
		return nil, err
	}
	if err := waitObserved(ctx, admins, fleet); err != nil {
		return nil, err
	}

	ho := harness.Options{
		Target: targets[0], Workload: harness.WorkloadMultiTurn, Concurrency: o.Concurrency,
		Duration: o.Duration, Warmup: o.Warmup, MaxTokens: o.MaxTokens, Turns: o.Turns,
		ReplyBytes: o.ReplyBytes, EchoReplies: o.ReplyBytes == 0, Seed: o.Seed,
	}
	if len(targets) > 1 {
		ho.AltTarget = targets[1]
	}
	smp := &loadSampler{fleet: fleet, sums: make([]float64, fleet.Len())}
	windowCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		smp.run(windowCtx, o.Warmup, o.Duration)
	}()
	hr, err := harness.Run(ctx, ho)
	cancel()
	<-sampled
	if err != nil {
		return nil, err
	}
	row := &AffinityRow{Policy: policy, Replicas: len(targets), OK: hr.OK, Errors: hr.Errors, ErrorSummary: hr.ErrorSummary(),
		TTFTP50Ms: hr.TTFT.P50Us / 1000, TTFTP99Ms: hr.TTFT.P99Us / 1000}
	smp.fill(row)
	return row, nil
}

// affinityConfig is the sluice configuration of a policy: one model router over the fleet,
// and the admin API on admin, where waitObserved reads the gateway's view of the fleet.
func affinityConfig(listen, admin string, fleet []string, policy string, observe bool) string {
	strategy, affinity := policy, false
	if policy == PolicyAffinity || policy == PolicyAffinity2 {
		strategy, affinity = PolicyRoundRobin, true
	}
	servers := make([]string, len(fleet))
	for i, a := range fleet {
		servers[i] = fmt.Sprintf("{ url = %q }", "http://"+a)
	}
	workers := ""
	if observe && affinity {
		workers = "\n[services.fleet.workers]\nobserve_interval = \"100ms\"\nobservation_ttl = \"1s\"\n"
	}
	return fmt.Sprintf(`# generated by sluice-bench affinity
[entrypoints.web]
address = %q
engine = "gnet"

[admin]
address = %q

[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true

[services.fleet.load_balancer]
strategy = %q
servers = [%s]
%s
[models.%s.targets.t]
service = "fleet"

[models.%s.scheduling]
prefix_affinity = %t
`, listen, admin, strategy, strings.Join(servers, ", "), workers, harness.DefaultModel, harness.DefaultModel, affinity)
}

// waitFleet waits until every instance answers again after a restart.
func waitFleet(ctx context.Context, f *llmsim.Fleet) error {
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	for i, a := range f.Addrs() {
		for {
			resp, err := client.Get("http://" + a + "/health")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("llmsim instance %d not back within %v", i, readyTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitObserved waits until each gateway whose admin API is at one of admins has observed
// every instance of f since its restart (the observation carries the instance's epoch of now)
// and lets it take requests. Until then a gateway leaves a restarted instance out of its
// choice (identity_changed, then not_ready while it starts), and with every instance out it
// answers 503: load started earlier would measure those answers. After observedTimeout it
// fails with what the gateway showed last.
func waitObserved(ctx context.Context, admins []string, f *llmsim.Fleet) error {
	epochs := map[string]int64{}
	for i, a := range f.Addrs() {
		epochs["http://"+a] = f.Stats(i).Epoch
	}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(observedTimeout)
	for _, admin := range admins {
		for {
			left, err := unobserved(ctx, client, admin, epochs)
			if err == nil && left == "" {
				break
			}
			if err != nil {
				left = err.Error()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the gateway did not take every llmsim instance back within %v (admin API %s/api/gateway/workers: %s)", observedTimeout, admin, left)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// unobserved reads the workers of the gateway whose admin API is at admin and says which of
// the servers in epochs (URL to the epoch the instance has now) it has no observation of that
// epoch from or does not let take requests ("http://127.0.0.1:1234: identity_changed"), ""
// for none.
func unobserved(ctx context.Context, client *http.Client, admin string, epochs map[string]int64) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/api/gateway/workers", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	var workers []struct {
		URL         string `json:"url"`
		Observation *struct {
			Epoch int64 `json:"epoch"`
		} `json:"observation"`
		Eligible bool    `json:"eligible"`
		Reason   *string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&workers); err != nil {
		return "", fmt.Errorf("cannot decode the workers: %w", err)
	}
	seen := map[string]bool{}
	var left []string
	for _, w := range workers {
		epoch, ok := epochs[w.URL]
		if !ok {
			continue
		}
		seen[w.URL] = true
		switch {
		case w.Observation == nil || w.Observation.Epoch != epoch:
			left = append(left, w.URL+": not observed since its restart")
		case !w.Eligible && w.Reason != nil:
			left = append(left, w.URL+": "+*w.Reason)
		case !w.Eligible:
			left = append(left, w.URL+": not eligible")
		}
	}
	for u := range epochs {
		if !seen[u] {
			left = append(left, u+": not listed")
		}
	}
	slices.Sort(left)
	return strings.Join(left, ", "), nil
}

// loadSampler measures the fleet over the measured window: its cache counters at both ends
// and the instances' in-flight sequences every 5 ms.
type loadSampler struct {
	fleet       *llmsim.Fleet
	sums        []float64
	samples     int
	first, last []llmsim.Stats
}

func (s *loadSampler) snapshot() []llmsim.Stats {
	out := make([]llmsim.Stats, s.fleet.Len())
	for i := range out {
		out[i] = s.fleet.Stats(i)
	}
	return out
}

func (s *loadSampler) run(ctx context.Context, warmup, window time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(warmup):
	}
	s.first = s.snapshot()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	end := time.After(window)
	for {
		select {
		case <-ctx.Done():
			s.last = s.snapshot()
			return
		case <-end:
			s.last = s.snapshot()
			return
		case <-t.C:
			for i := range s.sums {
				st := s.fleet.Stats(i)
				s.sums[i] += float64(st.Running + st.Waiting)
			}
			s.samples++
		}
	}
}

func (s *loadSampler) fill(row *AffinityRow) {
	if s.first == nil || s.last == nil {
		return
	}
	var prompt, cached int64
	for i := range s.first {
		prompt += s.last[i].PromptTokens - s.first[i].PromptTokens
		cached += s.last[i].CachedTokens - s.first[i].CachedTokens
		row.FullMisses += s.last[i].FullMisses - s.first[i].FullMisses
	}
	if prompt > 0 {
		row.HitRate = float64(cached) / float64(prompt)
	}
	if s.samples == 0 {
		return
	}
	var total, busiest float64
	for _, v := range s.sums {
		l := v / float64(s.samples)
		row.InstanceLoad = append(row.InstanceLoad, l)
		total += l
		busiest = max(busiest, l)
	}
	if mean := total / float64(len(s.sums)); mean > 0 {
		row.BusiestOverMean = busiest / mean
	}
}

// startOracle serves a router that sends each chat completion to the instance holding the
// longest cached prefix of its prompt (it asks every instance's cache), the least loaded of
// equal ones: the hit rate no router without that knowledge can beat.
func startOracle(f *llmsim.Fleet) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}
	n := f.Len()
	proxies := make([]*httputil.ReverseProxy, n)
	inflight := make([]atomic.Int64, n)
	for i, a := range f.Addrs() {
		u := &url.URL{Scheme: "http", Host: a}
		proxies[i] = &httputil.ReverseProxy{
			Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
			Transport:     tr,
			FlushInterval: -1,
		}
	}
	var mu sync.Mutex // one choice at a time: two requests see each other's load
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		best, bestCached := 0, -1
		for i := range n {
			c, err := f.CachedChatTokens(i, body)
			if err != nil {
				c = 0
			}
			if c > bestCached || c == bestCached && inflight[i].Load() < inflight[best].Load() {
				best, bestCached = i, c
			}
		}
		inflight[best].Add(1)
		mu.Unlock()
		defer inflight[best].Add(-1)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		proxies[best].ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		_ = srv.Close()
		tr.CloseIdleConnections()
	}, nil
}

// Failures says, one sentence for each policy whose measured window had failed requests, how
// many failed and why ("round-robin: 636 of 696 requests in the measured window failed
// (status_5xx 636 (503 636)); ..."): such a policy's hit rate, TTFT and load are those of a
// run other than the one asked for. It is nil when no request failed.
func (r *AffinityResult) Failures() []string {
	var out []string
	for _, x := range r.Rows {
		if x.Errors == 0 {
			continue
		}
		why := ""
		if x.ErrorSummary != "" {
			why = " (" + x.ErrorSummary + ")"
		}
		out = append(out, fmt.Sprintf("%s: %d of %d requests in the measured window failed%s; its hit rate, TTFT and load are not those of the run asked for",
			x.Policy, x.Errors, x.OK+x.Errors, why))
	}
	return out
}

// Markdown writes the result's Command line, when it has one, then a table, then the Failures
// in bold, then the ratios the quality bar is stated in: affinity's hit rate over the oracle's,
// its TTFT p50 over round robin's, and the hit rate two replicas lose against one.
func (r *AffinityResult) Markdown(w io.Writer) error {
	var b strings.Builder
	if r.Command != "" {
		b.WriteString(report.CommandMarkdown(r.Command) + "\n")
	}
	b.WriteString("| policy | routers | hit rate | full misses | TTFT p50 (ms) | TTFT p99 (ms) | busiest / mean load | requests (errors) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	by := map[string]*AffinityRow{}
	for i := range r.Rows {
		x := &r.Rows[i]
		by[x.Policy] = x
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %d | %.1f | %.1f | %.2f | %d (%d) |\n",
			x.Policy, x.Replicas, 100*x.HitRate, x.FullMisses, x.TTFTP50Ms, x.TTFTP99Ms, x.BusiestOverMean, x.OK, x.Errors)
	}
	aff, rr, or, two := by[PolicyAffinity], by[PolicyRoundRobin], by[PolicyOracle], by[PolicyAffinity2]
	b.WriteString("\n")
	for _, f := range r.Failures() {
		fmt.Fprintf(&b, "- **%s**\n", f)
	}
	if aff != nil && or != nil && or.HitRate > 0 {
		fmt.Fprintf(&b, "- affinity hit rate / oracle hit rate: %.2f\n", aff.HitRate/or.HitRate)
	}
	if aff != nil && rr != nil && rr.TTFTP50Ms > 0 {
		fmt.Fprintf(&b, "- affinity TTFT p50 / round-robin TTFT p50: %.2f\n", aff.TTFTP50Ms/rr.TTFTP50Ms)
	}
	if aff != nil {
		fmt.Fprintf(&b, "- affinity busiest instance / mean load: %.2f\n", aff.BusiestOverMean)
	}
	if aff != nil && two != nil && aff.HitRate > 0 {
		fmt.Fprintf(&b, "- hit rate two replicas lose against one: %.1f%% (relative)\n", 100*(aff.HitRate-two.HitRate)/aff.HitRate)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
