// Package harness is sluice-bench's load generator: closed-loop
// load over N keep-alive HTTP/1.1 connections, open-loop load at a constant
// or Poisson rate with latency measured from each request's intended send
// time (so coordinated omission cannot hide a stall), SSE-aware timing (TTFT,
// ITL), HDR histograms, and a correctness check of every response.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultPath        = "/v1/chat/completions"
	DefaultModel       = "llmsim"
	DefaultTimeout     = 30 * time.Second
	DefaultDrain       = 5 * time.Second
	DefaultConnections = 64 // open-loop connection cap
	dialTimeout        = 5 * time.Second
	maxConnectBackoff  = 100 * time.Millisecond
	progressInterval   = time.Second
	progressMinRun     = 3 * time.Second
	maxSleepSlice      = 100 * time.Millisecond // open loop: longest uninterrupted wait
)

// Options describe one load run. Exactly one of Concurrency (closed loop) and
// Rate (open loop) must be set.
type Options struct {
	// Target is the base URL, "http://host:port" (https is not supported).
	Target string
	// AltTarget, when set, is a second base URL: every worker (closed loop only) keeps a
	// connection to each target and sends its requests to them in turn, as a load balancer
	// in front of two gateway replicas that alternates requests would.
	AltTarget string
	// Path is the request path; default "/v1/chat/completions".
	Path string
	// Headers are extra request header fields, each "Name: value" (an API key:
	// "Authorization: Bearer KEY"), sent on every workload request.
	Headers []string
	// Workload is json, sse, chat-multiturn or mixed.
	Workload string
	// Concurrency is the number of closed-loop connections, each sending its
	// next request when the previous response has been read completely.
	Concurrency int
	// Rate is the open-loop request rate in requests per second.
	Rate float64
	// Poisson draws open-loop gaps from an exponential distribution instead
	// of a constant 1/Rate; it needs Rate.
	Poisson bool
	// Connections caps the open-loop connections (default 64). When all are
	// busy, requests wait and their wait counts in their latency.
	Connections int
	// Duration is the measured window, MinDuration to MaxDuration.
	Duration time.Duration
	// Warmup runs load before the measured window without recording it.
	Warmup time.Duration
	// AtWindowStart and AtWindowEnd, when set, are called when the measured window starts
	// (the warmup has ended) and when it ends (the drain starts), each from a goroutine of
	// its own, so that a caller can read what a target used over the window alone (a
	// proxy's CPU time, against Result.WindowSent). A call takes its time out of nothing the
	// run measures; Run returns after both have returned, or after AtWindowStart alone when
	// ctx ends first.
	AtWindowStart, AtWindowEnd func()
	// Timeout bounds one request, response body included (default 30 s).
	Timeout time.Duration
	// Drain is how long requests in flight at the end of the window may
	// still finish (default 5 s); later ones are counted as Unfinished.
	Drain time.Duration
	// Model is the "model" field of request bodies (default "llmsim").
	Model string
	// MaxTokens, when > 0, is sent as "max_tokens".
	MaxTokens int
	// Turns is the number of turns per chat-multiturn conversation (default 6).
	Turns int
	// EchoReplies makes a chat-multiturn conversation grow by the reply the target actually
	// streamed (sent back verbatim, as a chat client does) instead of a fixed text, so that
	// a server that caches its output's KV blocks can reuse them on the next turn.
	EchoReplies bool
	// ReplyBytes is the length of the assistant reply a chat-multiturn conversation grows
	// by after each turn (0: the default, 86 bytes); a model's answers are often a few
	// hundred tokens, about 4 bytes each.
	ReplyBytes int
	// Seed makes request mixes and Poisson gaps reproducible.
	Seed uint64
	// Progress, when set and the run is longer than 3 s, receives a status
	// line every second.
	Progress io.Writer
	// NewConnections sends every workload request on a connection of its own, as clients
	// without keep-alive do: the request carries "Connection: close", and its latency and
	// TTFT include the TCP connect and the target's accept.
	NewConnections bool
	// Adversary, when set, runs misbehaving connections beside the workload and makes a
	// share of its requests carry upstream faults (ParseAdversary has the syntax). Only
	// loopback targets accept it. The workload's latencies and errors exclude the requests
	// that carried a fault; Result.Adversary says what happened to the adversary.
	Adversary string
}

// Result is the outcome of a run. Latencies are in microseconds; Latency is
// measured from the intended send time (equal to the actual send time in the
// closed loop), ServiceLatency from the actual send time.
type Result struct {
	// Command is the command line that ran the load, as a POSIX shell takes it back
	// (report.CommandLine), when one did: sluice-bench run sets it; "" (left out of the JSON)
	// in a run of a compare, whose report has its own.
	Command     string  `json:"command,omitempty"`
	Target      string  `json:"target"`
	Workload    string  `json:"workload"`
	Mode        string  `json:"mode"` // "closed" or "open"
	Concurrency int     `json:"concurrency,omitempty"`
	Connections int     `json:"connections,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Poisson     bool    `json:"poisson,omitempty"`

	StartedAt time.Time `json:"started_at"`
	DurationS float64   `json:"duration_s"`

	// Requests counts requests sent in the window that finished (OK+Errors).
	Requests     int64            `json:"requests"`
	OK           int64            `json:"ok"`
	Errors       int64            `json:"errors"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind"`
	// ErrorsByStatus counts the responses of ErrorsByKind's status_4xx, status_5xx and
	// status_other by their status code ("408", "429", "431", "502"), so that a model router's
	// 429 (model_at_capacity) is told apart from a 431 or a 408; each response is counted in
	// both maps.
	ErrorsByStatus map[string]int64 `json:"errors_by_status,omitempty"`
	// Unfinished counts requests of the window (or of the warmup) still in
	// flight when the drain time ended (their connect included), and (open loop) requests scheduled in the window
	// that could not be sent before it ended because every connection was
	// busy. They have no latency sample: a non-zero count means the
	// percentiles understate a stall.
	Unfinished int64 `json:"unfinished"`
	// RPS is OK responses completed inside the window, per second of the window (the
	// throughput the target served, whenever the requests were sent).
	RPS float64 `json:"rps"`

	Latency        Summary `json:"latency_us"`
	ServiceLatency Summary `json:"service_latency_us"`
	// SendLag (open loop) is how late the generator itself sent requests:
	// actual minus intended send time, for requests sent on a free
	// connection. It is the generator's own precision, part of every
	// target's Latency alike; a large p99 means the machine starved it.
	SendLag *Summary `json:"send_lag_us,omitempty"`
	// TTFT (streams) is from the request's start, as Latency's, to the arrival of its first
	// SSE event with content; ITL is the gaps between the arrivals of a stream's consecutive
	// content events (events that one read brings share its arrival time). Both come from the
	// streams counted in OK, as Latency does.
	TTFT Summary `json:"ttft_us"`
	ITL  Summary `json:"itl_us"`
	// TotalSent counts every request written to the target during the run,
	// warmup and drain included, whatever its outcome: the work a proxy did.
	TotalSent int64 `json:"total_sent"`
	// WindowSent counts the requests of TotalSent written inside the measured window, whatever
	// their outcome: the work a proxy took on over the window, set against what it used over
	// the window (Options.AtWindowStart).
	WindowSent int64 `json:"window_sent"`
	// Tokens counts SSE content events of OK streams.
	Tokens    int64 `json:"tokens"`
	BodyBytes int64 `json:"body_bytes"`

	LatencyDistribution []Point `json:"latency_distribution_us"`

	// Adversary is what happened to the adversary's connections and requests (nil without
	// an adversary).
	Adversary *AdversaryResult `json:"adversary,omitempty"`

	// Histograms, for merging runs; not serialised. SendLagHist is nil in the closed loop.
	LatencyHist *Histogram `json:"-"`
	ServiceHist *Histogram `json:"-"`
	SendLagHist *Histogram `json:"-"`
	TTFTHist    *Histogram `json:"-"`
	ITLHist     *Histogram `json:"-"`
}

// runState is shared by the workers of one run.
type runState struct {
	o       Options
	addr    string
	base    time.Time
	measure int64 // ns: start of the measured window
	end     int64 // ns: end of the window (no request starts later)
	stopAt  time.Time
	// stopCtx ends at stopAt (or with the run): a connect still under way then is cut short.
	stopCtx  context.Context
	timeout  time.Duration
	stopping atomic.Bool

	latency, service, lag, ttft, itl *Recorder

	ok, tokens, bytes, unfinished atomic.Int64
	okInWindow                    atomic.Int64 // OK responses completed inside the window, whenever sent
	sent                          atomic.Int64 // all finished attempts, warmup included (progress)
	written                       atomic.Int64 // requests written to a connection (TotalSent)
	windowWritten                 atomic.Int64 // those written inside the window (WindowSent)
	errs                          [errKindCount]atomic.Int64
	statusErrs                    [1000]atomic.Int64 // status errors by code (three digits), for ErrorsByStatus

	pacers *pacerPool // open loop: precise sleeps (nil: time.Sleep only)
	adv    *advRun    // nil without an adversary

	schedMu sync.Mutex
	next    float64 // open loop, Poisson: next intended time (ns)
	k       int64   // open loop: requests scheduled so far
	rng     *rand.Rand

	connsMu sync.Mutex
	conns   []*httpConn
}

func (r *runState) clock() int64 { return int64(time.Since(r.base)) }

// Run generates load as o describes and returns the measured result. It
// returns an error for invalid options (the *OptionError Check returns) or when ctx is cancelled
// before the window ends; request failures are counted in the Result, not returned.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.normalize()
	if err := o.check(); err != nil {
		return nil, err
	}
	// check has parsed the targets and the adversary: they parse again without error.
	u, addr, _ := parseTarget("target", o.Target)
	var altAddr string
	if o.AltTarget != "" {
		_, altAddr, _ = parseTarget("alt-target", o.AltTarget)
	}
	adversary, _ := ParseAdversary(o.Adversary)
	r := &runState{
		o:       o,
		addr:    addr,
		timeout: o.Timeout,
		latency: NewRecorder(), service: NewRecorder(), lag: NewRecorder(), ttft: NewRecorder(), itl: NewRecorder(),
		rng: rand.New(rand.NewPCG(o.Seed, o.Seed+1)),
	}
	workers := o.Concurrency
	if o.Rate > 0 {
		workers = o.Connections
	}
	gens := make([]*requestGen, workers)
	var err error
	for i := range gens {
		if gens[i], err = newRequestGen(&o, u.Host, o.Seed+uint64(i)*7919+1); err != nil {
			return nil, err
		}
	}
	r.base = time.Now()
	r.measure = int64(o.Warmup)
	r.end = int64(o.Warmup + o.Duration)
	r.stopAt = r.base.Add(o.Warmup + o.Duration + o.Drain)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopCtx, stopCancel := context.WithDeadline(runCtx, r.stopAt)
	defer stopCancel()
	r.stopCtx = stopCtx
	if adversary != nil {
		if r.adv, err = startAdversary(runCtx, adversary, &o, addr, u.Host, r.clock); err != nil {
			return nil, err
		}
	}
	go func() {
		<-runCtx.Done()
		r.stopping.Store(true)
		r.connsMu.Lock()
		for _, c := range r.conns {
			c.abort()
		}
		r.connsMu.Unlock()
	}()
	progressDone := make(chan struct{})
	if o.Progress != nil && o.Warmup+o.Duration > progressMinRun {
		go r.progress(runCtx, progressDone)
	} else {
		close(progressDone)
	}

	if o.Rate > 0 && usePacer {
		r.pacers = newPacerPool(min(workers, maxPacers))
		defer r.pacers.close()
	}
	windowDone := make(chan struct{})
	go r.windowHooks(runCtx, windowDone)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		w := &worker{r: r, id: i, gen: gens[i], conn: newHTTPConn(addr, r.clock),
			frng: rand.New(rand.NewPCG(o.Seed^0xad5e, uint64(i)))}
		w.conns[0] = w.conn
		w.conn.sse.capture = o.EchoReplies
		if altAddr != "" {
			w.conns[1] = newHTTPConn(altAddr, r.clock)
			w.conns[1].sse.capture = o.EchoReplies
		}
		r.connsMu.Lock()
		for _, c := range w.conns {
			if c != nil {
				w.conn = c
				w.wire()
				r.conns = append(r.conns, c)
			}
		}
		w.conn = w.conns[0]
		r.connsMu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop()
			for _, c := range w.conns {
				if c != nil {
					c.close()
				}
			}
		}()
	}
	wg.Wait()
	// The workers end once the window has: its end is at hand, if it has not come yet.
	<-windowDone
	var advRes *AdversaryResult
	if r.adv != nil {
		advRes = r.adv.stop()
	}
	cancel()
	<-progressDone
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("harness: run cancelled: %w", err)
	}
	res := r.result()
	res.Adversary = advRes
	return res, nil
}

// windowHooks calls the options' AtWindowStart and AtWindowEnd at the window's start and end,
// and closes done when they have returned or ctx has ended.
func (r *runState) windowHooks(ctx context.Context, done chan struct{}) {
	defer close(done)
	for _, edge := range []struct {
		at   int64
		call func()
	}{{r.measure, r.o.AtWindowStart}, {r.end, r.o.AtWindowEnd}} {
		if edge.call == nil {
			continue
		}
		t := time.NewTimer(time.Until(r.base.Add(time.Duration(edge.at))))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		edge.call()
	}
}

// nextIntended returns the next open-loop intended send time (ns on the run
// clock) and false once it falls past the window.
func (r *runState) nextIntended() (int64, bool) {
	r.schedMu.Lock()
	var t int64
	if r.o.Poisson {
		t = int64(r.next)
		r.next += r.rng.ExpFloat64() / r.o.Rate * 1e9
	} else {
		// k / rate rather than a running sum: no rounding error piles up over a long run, and
		// a window holds exactly rate × window requests.
		t = int64(float64(r.k) * 1e9 / r.o.Rate)
	}
	r.k++
	r.schedMu.Unlock()
	return t, t < r.end
}

func (r *runState) progress(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	total := r.o.Warmup + r.o.Duration
	var last int64
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(r.o.Progress, "\n")
			return
		case <-t.C:
			now := time.Since(r.base)
			el := min(now.Round(time.Second), total)
			n := r.sent.Load()
			var e int64
			for i := range r.errs {
				e += r.errs[i].Load()
			}
			phase := "run"
			if now < r.o.Warmup {
				phase = "warmup"
			}
			fmt.Fprintf(r.o.Progress, "\r  %s %s %v/%v  %d req/s  %d done  %d errors   ",
				r.o.Target, phase, el, total, n-last, n, e)
			last = n
		}
	}
}

func (r *runState) result() *Result {
	o := r.o
	res := &Result{
		Target: o.Target, Workload: o.Workload,
		StartedAt: r.base.UTC(), DurationS: o.Duration.Seconds(),
		ErrorsByKind: map[string]int64{},
	}
	if o.Rate > 0 {
		res.Mode, res.Rate, res.Poisson, res.Connections = "open", o.Rate, o.Poisson, o.Connections
	} else {
		res.Mode, res.Concurrency = "closed", o.Concurrency
	}
	res.OK = r.ok.Load()
	for k := ErrorKind(1); k < errKindCount; k++ {
		if n := r.errs[k].Load(); n > 0 {
			res.ErrorsByKind[k.String()] = n
			res.Errors += n
		}
	}
	for code := range r.statusErrs {
		if n := r.statusErrs[code].Load(); n > 0 {
			if res.ErrorsByStatus == nil {
				res.ErrorsByStatus = map[string]int64{}
			}
			res.ErrorsByStatus[strconv.Itoa(code)] = n
		}
	}
	res.Requests = res.OK + res.Errors
	res.Unfinished = r.unfinished.Load()
	// Responses completed inside the window, per second: an overloaded target answers the
	// window's requests during the drain, and counting those would report the offered rate.
	res.RPS = float64(r.okInWindow.Load()) / o.Duration.Seconds()
	res.TotalSent = r.written.Load()
	res.WindowSent = r.windowWritten.Load()
	res.Tokens = r.tokens.Load()
	res.BodyBytes = r.bytes.Load()
	res.LatencyHist = r.latency.Snapshot()
	res.TTFTHist = r.ttft.Snapshot()
	res.ITLHist = r.itl.Snapshot()
	res.Latency = res.LatencyHist.Summary()
	res.ServiceHist = r.service.Snapshot()
	res.ServiceLatency = res.ServiceHist.Summary()
	if res.Mode == "open" {
		res.SendLagHist = r.lag.Snapshot()
		lag := res.SendLagHist.Summary()
		res.SendLag = &lag
	}
	res.TTFT = res.TTFTHist.Summary()
	res.ITL = res.ITLHist.Summary()
	res.LatencyDistribution = res.LatencyHist.Distribution()
	return res
}

// ErrorKinds returns the error kinds of res sorted by name, for printing.
func (res *Result) ErrorKinds() []string {
	ks := make([]string, 0, len(res.ErrorsByKind))
	for k := range res.ErrorsByKind {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ErrorSummary writes the errors by kind in name order, each status kind followed by its
// status codes: "status_4xx 12 (408 1, 429 10, 431 1), timeout 3"; "" without errors.
func (res *Result) ErrorSummary() string {
	var b strings.Builder
	for i, k := range res.ErrorKinds() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, res.ErrorsByKind[k])
		var codes []string
		for c := range res.ErrorsByStatus {
			if n, err := strconv.Atoi(c); err == nil && statusKind(n).String() == k {
				codes = append(codes, c)
			}
		}
		sort.Strings(codes) // three digits each: numeric order
		for j, c := range codes {
			if j == 0 {
				b.WriteString(" (")
			} else {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", c, res.ErrorsByStatus[c])
			if j == len(codes)-1 {
				b.WriteString(")")
			}
		}
	}
	return b.String()
}

// worker owns one connection and sends requests on it one at a time.
type worker struct {
	r        *runState
	id       int
	gen      *requestGen
	conn     *httpConn    // the connection of the current request
	conns    [2]*httpConn // to Target and, with AltTarget, to it
	turn     int          // requests sent, to alternate between conns
	backoff  time.Duration
	intended int64
	record   bool
	onTime   bool // open loop: the current request's intended time was still ahead when the worker took it

	frng     *rand.Rand // draws the requests that carry an upstream fault
	faultReq []byte     // the current request with its fault header

	// The current stream's timings, recorded once it has ended well: a stream cut short or
	// ending in an error event has no latency sample, and so no TTFT or ITL sample either.
	firstNs int64   // arrival of its first content event (0: none yet)
	gaps    []int64 // the gaps between its content events' arrivals, ns
}

// wire connects the connection's SSE scanner to the worker's stream timings once, so that
// streaming does not allocate per request (gaps grows to a stream's length once).
func (w *worker) wire() {
	w.conn.sse.onFirst = func(now int64) { w.firstNs = now }
	w.conn.sse.onGap = func(gap int64) { w.gaps = append(w.gaps, gap) }
}

// recordStream records the timings of the stream that just ended well.
func (w *worker) recordStream() {
	if w.firstNs == 0 {
		return
	}
	w.r.ttft.Record(w.id, w.firstNs-w.intended)
	for _, g := range w.gaps {
		w.r.itl.Record(w.id, g)
	}
}

func (w *worker) loop() {
	r := w.r
	open := r.o.Rate > 0
	for !r.stopping.Load() {
		var intended int64
		if open {
			t, ok := r.nextIntended()
			if !ok {
				return
			}
			w.onTime = r.waitUntil(t)
			if r.stopping.Load() {
				return
			}
			if !time.Now().Before(r.stopAt) {
				// Scheduled in the window but never sent: the target held
				// every connection until the drain ended.
				if t >= r.measure {
					r.unfinished.Add(1)
				}
				continue
			}
			intended = t
		} else {
			intended = r.clock()
			if intended >= r.end {
				return
			}
		}
		w.one(intended)
	}
}

// one sends one request intended at time intended (ns on the run clock).
func (w *worker) one(intended int64) {
	r := w.r
	if w.conns[1] != nil {
		w.conn = w.conns[w.turn%2]
		w.turn++
	}
	c := w.conn
	if c.c == nil {
		if err := c.connectCtx(r.stopCtx, dialTimeout); err != nil {
			if r.stopping.Load() {
				return
			}
			switch {
			case r.stopCtx.Err() != nil || !time.Now().Before(r.stopAt):
				// Still connecting when the run ended (the dial's own deadline, which is the
				// context's, may fire first): in flight, like an unanswered request.
				if intended < r.end {
					r.unfinished.Add(1)
				}
				r.sent.Add(1)
				return
			case intended >= r.measure:
				r.errs[ErrConnect].Add(1)
			}
			r.sent.Add(1)
			w.sleepBackoff()
			return
		}
		w.backoff = 0
	}
	req, stream := w.gen.next()
	var fault *advStat
	if r.adv != nil {
		var line string
		if fault, line = r.adv.upstreamFault(w.frng); fault != nil {
			req = w.withHeader(req, line)
		}
	}
	w.intended = intended
	w.record = intended >= r.measure && fault == nil
	c.sse.reset()
	w.firstNs, w.gaps = 0, w.gaps[:0]
	sent := r.clock()
	if w.onTime && w.record {
		r.lag.Record(w.id, sent-intended)
	}
	deadline := r.base.Add(time.Duration(sent) + r.timeout)
	if fault != nil {
		deadline = r.base.Add(time.Duration(sent) + min(r.timeout, upFaultTimeout))
	}
	if deadline.After(r.stopAt) {
		deadline = r.stopAt
	}
	ex := c.roundTrip(req, stream, deadline)
	done := r.clock()
	if w.gen.echo && stream {
		w.gen.lastReply = append(w.gen.lastReply[:0], c.sse.text...)
	}
	r.sent.Add(1)
	r.written.Add(1)
	if sent >= r.measure && sent < r.end {
		r.windowWritten.Add(1)
	}
	if ex.kind != errNone || !ex.keepAlive || r.o.NewConnections {
		c.close()
	}
	if fault != nil {
		// Not part of the workload's figures: the adversary's, when the run is still on.
		if !r.stopping.Load() && time.Now().Before(r.stopAt) {
			fault.add(outcomeOf(c, ex, false))
		}
		return
	}
	if ex.kind == errNone && done >= r.measure && done < r.end {
		r.okInWindow.Add(1)
	}
	stuck := ex.kind == ErrTimeout && (r.stopping.Load() || !time.Now().Before(r.stopAt))
	if !w.record {
		if stuck {
			// Sent during warmup and still unanswered when the run ended: it held its
			// connection through the whole window, which must not look like a clean run.
			r.unfinished.Add(1)
		}
		return
	}
	if ex.kind == errNone {
		r.ok.Add(1)
		r.latency.Record(w.id, done-intended)
		r.service.Record(w.id, done-sent)
		r.tokens.Add(int64(c.sse.events))
		r.bytes.Add(ex.bodyBytes)
		w.recordStream()
		return
	}
	if stuck {
		r.unfinished.Add(1)
		return
	}
	r.errs[ex.kind].Add(1)
	if ex.kind >= ErrStatus4xx && ex.kind <= ErrStatusOther && ex.status > 0 && ex.status < len(r.statusErrs) {
		r.statusErrs[ex.status].Add(1)
	}
}

// withHeader returns req with the header line added after its request line.
func (w *worker) withHeader(req []byte, line string) []byte {
	i := bytes.Index(req, crlf) + len(crlf)
	w.faultReq = append(append(append(w.faultReq[:0], req[:i]...), line...), req[i:]...)
	return w.faultReq
}

var crlf = []byte("\r\n")

func (w *worker) sleepBackoff() {
	if w.backoff == 0 {
		w.backoff = time.Millisecond
	} else if w.backoff < maxConnectBackoff {
		w.backoff *= 2
	}
	time.Sleep(w.backoff)
}
