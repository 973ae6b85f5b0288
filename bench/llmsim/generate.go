package llmsim

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// genParams is what a handler has decided about a request before generation.
type genParams struct {
	enc          encoding // the API's wire format: chat, completions, responses or messages
	model        string
	stream       bool
	includeUsage bool
	maxTokens    int    // output cap from the request (0: none)
	capParam     string // the request field maxTokens came from, named by a window refusal
	promptParam  string // the request field holding the prompt, named by a window refusal
	reqSeed      *wholeInt
	salt         string   // prompt cache key / cache salt: scopes the block hashes
	stops        []string // stop sequences (non-empty strings): the output ends before the first
	fault        Fault
	executionID  string        // P/D decode: registered for /power/v1/abort
	source       *handleClaims // P/D decode: validated source handle (KV arrives by transfer)
	arrival      time.Time     // when the handler started: the TTFT clock's origin
	echo         *responseEcho // Responses API: request fields the response object repeats
}

// finishKind is why a generation ended; each encoding names it in its own words.
type finishKind uint8

const (
	finishEnd    finishKind = iota // the model's natural end (the configured output length)
	finishLength                   // the request's output cap cut it
	finishStop                     // a stop sequence matched (genResult.stopSeq)
)

// genResult is a finished (or finishing) generation's accounting.
type genResult struct {
	finish       finishKind
	stopSeq      string // the stop sequence that matched (finishStop)
	promptTokens int
	cached       int
	completion   int // tokens generated, the one that completed a stop sequence included
}

// job is one generation in flight; pooled with its buffers and timer.
type job struct {
	in      *instance
	w       http.ResponseWriter
	rc      *http.ResponseController
	ctx     context.Context
	p       *genParams
	res     genResult
	id      string // response id
	created int64  // unix seconds: the response's creation time
	head    []byte // per-response JSON prefix the encoding precomputes (an event's fixed part)
	buf     []byte // one event
	out     []byte // generated text (with the stop sequence and any text after it)
	text    int    // len(out) up to the stop sequence: the text the client gets
	sent    int    // bytes of out in which no stop sequence starts: a stream's delivered deltas
	deltas  int    // delta events written
	seq     int    // Responses API sequence_number of the next event
	hashes  []uint64
	events  int
	http11  bool // the response is chunked when streamed
	timer   *time.Timer
}

var jobPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &job{timer: t, buf: make([]byte, 0, 512), head: make([]byte, 0, 160), out: make([]byte, 0, 1024)}
}}

// itl returns the current inter-token latency: ITL + ITLPerRunning × (running − 1).
func (in *instance) itl() time.Duration {
	r := in.sched.running.Load()
	return in.cfg.ITL.D() + in.cfg.ITLPerRunning.D()*time.Duration(max(r-1, 0))
}

// lookupPrefix hashes the prompt's blocks (scoped by salt) into dst and returns them with
// the cached token count: leading cached blocks × BlockSize, never the whole prompt (at least
// one token is always computed, as in vLLM).
func (in *instance) lookupPrefix(dst []uint64, prompt []byte, salt string, promptTokens int) ([]uint64, int) {
	bs := in.cfg.BlockSize
	dst = appendBlockHashes(dst[:0], prompt, bs, saltHash(salt))
	maxBlocks := max(promptTokens-1, 0) / bs
	hits := in.cache.lookup(dst, maxBlocks, bs, promptTokens)
	return dst, hits * bs
}

// cacheState names the CacheHeader value.
func cacheState(cachedTokens, cacheableBlocks, blockSize int) string {
	switch {
	case cachedTokens == 0:
		return "miss"
	case cachedTokens >= cacheableBlocks*blockSize:
		return "hit"
	}
	return "partial"
}

// admit takes a running slot for the request and returns the time the request's TTFT clock
// starts: its arrival when a slot was free, the end of its queue wait otherwise. When it
// cannot (queue full, client gone) it has answered with errf or counted the abort and
// returns false.
func (in *instance) admit(w http.ResponseWriter, ctx context.Context, arrival time.Time, errf errorWriter) (time.Time, bool) {
	queued, err := in.sched.acquire(ctx)
	if err == nil {
		if queued || arrival.IsZero() {
			return time.Now(), true
		}
		return arrival, true
	}
	if err == errQueueFull {
		in.st.rejected.Add(1)
		errf(w, in.cfg.QueueFullStatus, "the server is overloaded: "+strconv.Itoa(in.cfg.MaxRunning)+" sequences running and "+strconv.Itoa(in.cfg.MaxWaiting)+" waiting", "", "queue_full")
		return time.Time{}, false
	}
	in.st.aborted.Add(1)
	return time.Time{}, false
}

// serveGeneration refuses a request over the context window, admits the others, models
// prefill (or KV transfer) and decode, and writes the streamed or whole response in p.enc's
// format; a client that leaves stops it at once (counted aborted). Every API is an encoding
// of this one generation: the window, timing, cache, stop sequences, faults and accounting
// are the same whatever the wire format.
func (in *instance) serveGeneration(w http.ResponseWriter, r *http.Request, p *genParams, prompt []byte) {
	promptTokens := CountTokens(len(prompt))
	// Before admission, as vLLM validates before scheduling: a request over the window is
	// answered at once and never waits in the queue or pays for its prefill.
	if in.checkWindow(promptTokens, p).answer(w, p.enc.writeError) {
		return
	}
	ctx := r.Context()
	if p.executionID != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		ex := in.registerExec(p.executionID, cancel)
		defer in.unregisterExec(p.executionID, ex)
		defer cancel()
	}
	start, ok := in.admit(w, ctx, p.arrival, p.enc.writeError)
	if !ok {
		return
	}
	defer in.sched.release()

	g := jobPool.Get().(*job)
	defer func() {
		g.w, g.rc, g.ctx, g.p = nil, nil, nil, nil
		jobPool.Put(g)
	}()
	g.in, g.w, g.ctx, g.p = in, w, ctx, p
	g.rc = http.NewResponseController(w)
	g.events, g.deltas, g.seq, g.sent, g.text = 0, 0, 0, 0, 0
	g.http11 = r.ProtoAtLeast(1, 1)
	g.out = g.out[:0]
	g.hashes = g.hashes[:0]

	var cached int
	var first time.Duration
	if p.source != nil {
		cached = p.source.Cached
		first = in.cfg.KVTransfer.D() + in.cfg.KVTransferPerToken.D()*time.Duration(promptTokens)
	} else {
		g.hashes, cached = in.lookupPrefix(g.hashes, prompt, p.salt, promptTokens)
		first = in.cfg.TTFT.D() + in.cfg.PerUncachedToken.D()*time.Duration(promptTokens-cached)
	}
	first += p.fault.Slow
	in.st.promptTokens.Add(int64(promptTokens))
	in.st.cachedTokens.Add(int64(cached))
	if cached == 0 {
		in.st.fullMisses.Add(1)
	}
	h := w.Header()
	if p.fault.Close {
		h.Set("Connection", "close")
	}
	h.Set(CacheHeader, cacheState(cached, max(promptTokens-1, 0)/in.cfg.BlockSize, in.cfg.BlockSize))
	h.Set(CachedTokensHeader, strconv.Itoa(cached))

	n := in.cfg.Tokens
	g.res = genResult{finish: finishEnd, promptTokens: promptTokens, cached: cached}
	if p.maxTokens > 0 && p.maxTokens < n {
		n, g.res.finish = p.maxTokens, finishLength
	}
	rg := seedFor(in.fleet.seed, p.reqSeed, prompt)
	g.id, g.created = p.enc.newID(in), start.Unix()
	p.enc.makeHead(g)

	if p.stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		// Events the API sends before any token (Responses: response.created; Messages:
		// message_start) go out with the headers, at admission.
		if !p.enc.open(g) {
			return
		}
		if g.rc.Flush() != nil {
			in.st.aborted.Add(1)
			return
		}
	}

	holdBack := 0 // bytes a stream withholds: a stop sequence may start in them
	for _, s := range p.stops {
		holdBack = max(holdBack, len(s)-1)
	}
	next := start.Add(first)
	repeatTok := vocab[rg.next()%uint64(len(vocab))]
	if n == 0 {
		if !g.sleepUntil(next) {
			in.st.aborted.Add(1)
			return
		}
		in.cache.insert(g.hashes)
	}
	for i := range n {
		if !p.stream && !g.checkFaults(i) {
			return
		}
		if i > 0 {
			itl := in.itl() + p.fault.Slow
			next = next.Add(itl)
			// Deadlines are absolute (no drift from timer latency), but a sequence that fell
			// more than one ITL behind (CPU starvation) is rebased instead of bursting to
			// catch up: a GPU does not emit missed steps at once either.
			if now := time.Now(); now.Sub(next) > itl {
				next = now
			}
		}
		if !g.sleepUntil(next) {
			in.st.aborted.Add(1)
			return
		}
		if i == 0 {
			in.cache.insert(g.hashes) // the prompt's blocks are computed
		}
		tok := repeatTok
		if !p.fault.Repeat {
			tok = vocab[rg.next()%uint64(len(vocab))]
		}
		g.out = append(g.out, tok...)
		in.st.completionTokens.Add(1)
		g.res.completion = i + 1
		if len(p.stops) == 0 {
			g.text = len(g.out)
			if p.stream {
				g.sent = len(g.out)
				if !g.delta(tok) {
					return
				}
			}
			continue
		}
		stopped := g.matchStop()
		safe := g.text
		if !stopped {
			safe = max(g.sent, safeEnd(g.out, len(g.out)-holdBack))
		}
		if safe > g.sent {
			d := g.out[g.sent:safe]
			g.sent = safe
			if p.stream && !g.delta(string(d)) {
				return
			}
		}
		if stopped {
			break
		}
	}
	// Cache the blocks the output completed, so a follow-up turn carrying this reply hits.
	if p.source == nil && in.cfg.Blocks > 0 {
		full := append(prompt, g.out...)
		g.hashes = appendBlockHashes(g.hashes[:0], full, in.cfg.BlockSize, saltHash(p.salt))
		in.cache.insert(g.hashes)
	}
	if !p.stream {
		if !g.checkFaults(g.res.completion) {
			return
		}
		g.writeWhole()
		return
	}
	if g.res.finish != finishStop {
		g.text = len(g.out)
	}
	if g.text > g.sent { // the held-back tail: no stop sequence completed in it
		d := string(g.out[g.sent:g.text])
		g.sent = g.text
		if !g.delta(d) {
			return
		}
	}
	if !p.enc.close(g) {
		return
	}
	in.st.completed.Add(1)
	if p.fault.CloseIdle {
		g.closeIdle(g.http11)
	}
}

// matchStop looks for the earliest stop sequence in the output not yet delivered (one that
// starts earlier would have been complete, and found, at an earlier token) and, when one
// matched, sets the result's text end and finish. It reports whether one matched.
func (g *job) matchStop() bool {
	best, seq := -1, ""
	tail := g.out[g.sent:]
	for _, s := range g.p.stops {
		if i := bytes.Index(tail, []byte(s)); i >= 0 && (best < 0 || i < best) {
			best, seq = i, s
		}
	}
	if best < 0 {
		g.text = len(g.out)
		return false
	}
	g.text = g.sent + best
	g.res.finish, g.res.stopSeq = finishStop, seq
	return true
}

// safeEnd returns end, moved back to the start of a UTF-8 sequence so a delta never splits a
// character (and never below 0).
func safeEnd(b []byte, end int) int {
	if end <= 0 {
		return 0
	}
	if end >= len(b) {
		return len(b)
	}
	for end > 0 && !utf8.RuneStart(b[end]) {
		end--
	}
	return end
}

// delta writes one streamed text delta in the API's format.
func (g *job) delta(text string) bool {
	if g.deltas == 0 && g.p.fault.BigLine > 0 {
		text += strings.Repeat("x", g.p.fault.BigLine) // what the client gets, not the output the stop sequences see
	}
	g.buf = g.p.enc.appendDelta(g.buf[:0], g, text)
	g.deltas++
	return g.emit()
}

// writeWhole writes a non-streamed response in the API's format.
func (g *job) writeWhole() {
	g.buf = g.p.enc.appendWhole(g.buf[:0], g)
	h := g.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(g.buf)))
	g.w.WriteHeader(http.StatusOK)
	if g.p.fault.Trickle {
		if !g.trickle(g.buf) {
			return
		}
	} else {
		g.w.Write(g.buf)
	}
	g.in.st.completed.Add(1)
	if g.p.fault.CloseIdle {
		g.closeIdle(false)
	}
}

// outText returns the text the client gets (up to any stop sequence).
func (g *job) outText() string { return string(g.out[:g.text]) }

// sleepUntil waits until t or the request's end; false means the client left.
func (g *job) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return !contextDone(g.ctx)
	}
	g.timer.Reset(d)
	select {
	case <-g.timer.C:
		return true
	case <-g.ctx.Done():
		g.timer.Stop()
		return false
	}
}

// send writes the event b (built in g.buf's storage) and, when flush, flushes it with what
// precedes it; false ends the stream. Encodings write events that are produced at the same
// instant with flush false but the last.
func (g *job) send(b []byte, flush bool) bool {
	g.buf = b
	if flush {
		return g.emit()
	}
	return g.emitNoFlush()
}

// emit writes and flushes the event in g.buf, unless a reset-after/stall-after fault fires
// first or the client has left; false ends the stream.
func (g *job) emit() bool {
	if !g.emitNoFlush() {
		return false
	}
	if err := g.rc.Flush(); err != nil {
		g.in.st.aborted.Add(1)
		return false
	}
	return true
}

// emitNoFlush is emit for an event that is followed at once by another: it stays in the
// response buffer until the last one's flush (a fault flushes what precedes it).
func (g *job) emitNoFlush() bool {
	if !g.checkFaults(g.events) {
		return false
	}
	if g.p.fault.Trickle {
		if !g.trickle(g.buf) {
			return false
		}
		g.events++
		return true
	}
	if _, err := g.w.Write(g.buf); err != nil {
		g.in.st.aborted.Add(1)
		return false
	}
	g.events++
	return true
}

// trickle writes b one byte at a time, flushing each (the trickle fault), with the fault's
// pause between bytes; false means the client left.
func (g *job) trickle(b []byte) bool {
	gap := g.p.fault.TrickleGap
	for i := range b {
		if i > 0 && gap > 0 && !g.sleepUntil(time.Now().Add(gap)) {
			g.in.st.aborted.Add(1)
			return false
		}
		if _, err := g.w.Write(b[i : i+1]); err != nil {
			g.in.st.aborted.Add(1)
			return false
		}
		if err := g.rc.Flush(); err != nil {
			g.in.st.aborted.Add(1)
			return false
		}
	}
	return true
}

// checkFaults applies reset-after/stall-after when `done` events (or tokens, unstreamed)
// have been produced; false ends the request.
func (g *job) checkFaults(done int) bool {
	f := &g.p.fault
	switch {
	case f.ResetAfter == done:
		g.reset()
		return false
	case f.StallAfter == done:
		if g.p.stream {
			g.rc.Flush() // what precedes the stall is delivered
		}
		<-g.ctx.Done() // held open until the client leaves or the instance closes
		g.in.st.aborted.Add(1)
		return false
	}
	return true
}

// reset aborts the TCP connection with an RST (SO_LINGER 0). A stream's events sent so far are
// flushed first; a non-streamed response has sent nothing, and a flush would send its status
// line and headers: it is reset unanswered, as a server that dies before it answers.
func (g *job) reset() {
	if g.p.stream {
		g.rc.Flush()
	}
	conn, _, err := g.rc.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// closeIdle ends the complete response, then closes the connection without having announced
// it (the keep-alive race a gateway's pool must survive).
func (g *job) closeIdle(chunked bool) {
	if g.rc.Flush() != nil {
		return
	}
	conn, bw, err := g.rc.Hijack()
	if err != nil {
		return
	}
	if chunked {
		bw.WriteString("0\r\n\r\n")
		bw.Flush()
	}
	conn.Close()
}
