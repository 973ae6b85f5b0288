package llmsim

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

type endpointKind uint8

const (
	kindChat endpointKind = iota
	kindCompletion
)

// genParams is what a handler has decided about a request before generation.
type genParams struct {
	kind         endpointKind
	model        string
	stream       bool
	includeUsage bool
	maxTokens    int // output cap from the request (0: none)
	reqSeed      *int64
	salt         string // prompt cache key / cache salt: scopes the block hashes
	fault        Fault
	executionID  string        // P/D decode: registered for /power/v1/abort
	source       *handleClaims // P/D decode: validated source handle (KV arrives by transfer)
	arrival      time.Time     // when the handler started: the TTFT clock's origin
}

// job is one generation in flight; pooled with its buffers and timer.
type job struct {
	in     *instance
	w      http.ResponseWriter
	rc     *http.ResponseController
	ctx    context.Context
	p      *genParams
	head   []byte // `{"id":…,"object":…,"created":…,"model":…,"choices":[`
	buf    []byte // one event
	out    []byte // generated text
	hashes []uint64
	events int
	http11 bool // the response is chunked when streamed
	timer  *time.Timer
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
// cannot (queue full, client gone) it has answered or counted the abort and returns false.
func (in *instance) admit(w http.ResponseWriter, ctx context.Context, arrival time.Time) (time.Time, bool) {
	queued, err := in.sched.acquire(ctx)
	if err == nil {
		if queued || arrival.IsZero() {
			return time.Now(), true
		}
		return arrival, true
	}
	if err == errQueueFull {
		in.st.rejected.Add(1)
		writeError(w, in.cfg.QueueFullStatus, "the server is overloaded: "+strconv.Itoa(in.cfg.MaxRunning)+" sequences running and "+strconv.Itoa(in.cfg.MaxWaiting)+" waiting", "", "queue_full")
		return time.Time{}, false
	}
	in.st.aborted.Add(1)
	return time.Time{}, false
}

// serveGeneration admits the request, models prefill (or KV transfer) and decode, and writes
// the streamed or whole response; a client that leaves stops it at once (counted aborted).
func (in *instance) serveGeneration(w http.ResponseWriter, r *http.Request, p *genParams, prompt []byte) {
	ctx := r.Context()
	if p.executionID != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		ex := in.registerExec(p.executionID, cancel)
		defer in.unregisterExec(p.executionID, ex)
		defer cancel()
	}
	start, ok := in.admit(w, ctx, p.arrival)
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
	g.events = 0
	g.http11 = r.ProtoAtLeast(1, 1)
	g.out = g.out[:0]
	g.hashes = g.hashes[:0]

	promptTokens := CountTokens(len(prompt))
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
	h.Set(CacheHeader, cacheState(cached, max(promptTokens-1, 0)/in.cfg.BlockSize, in.cfg.BlockSize))
	h.Set(CachedTokensHeader, strconv.Itoa(cached))

	n := in.cfg.Tokens
	finish := "stop"
	if p.maxTokens > 0 && p.maxTokens < n {
		n, finish = p.maxTokens, "length"
	}
	rg := seedFor(in.fleet.seed, p.reqSeed, prompt)
	g.makeHead(in.nextID(p.kind), start.Unix())

	if p.stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		if g.rc.Flush() != nil {
			in.st.aborted.Add(1)
			return
		}
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
		if p.stream {
			g.tokenEvent(tok, i == 0)
			if !g.emit() {
				return
			}
		}
	}
	// Cache the blocks the output completed, so a follow-up turn carrying this reply hits.
	if p.source == nil && in.cfg.Blocks > 0 {
		full := append(prompt, g.out...)
		g.hashes = appendBlockHashes(g.hashes[:0], full, in.cfg.BlockSize, saltHash(p.salt))
		in.cache.insert(g.hashes)
	}
	if p.stream {
		g.finishEvents(finish, promptTokens, cached, n)
	} else {
		if !g.checkFaults(n) {
			return
		}
		g.writeWhole(finish, promptTokens, cached, n)
	}
}

// nextID returns a response id: chatcmpl-/cmpl- + worker + sequence.
func (in *instance) nextID(kind endpointKind) string {
	pfx := "chatcmpl-"
	if kind == kindCompletion {
		pfx = "cmpl-"
	}
	return pfx + in.cfg.WorkerID + "-" + strconv.FormatUint(in.seq.Add(1), 10)
}

func (g *job) makeHead(id string, created int64) {
	b := append(g.head[:0], `{"id":`...)
	b = appendJSONString(b, id)
	if g.p.kind == kindChat {
		if g.p.stream {
			b = append(b, `,"object":"chat.completion.chunk","created":`...)
		} else {
			b = append(b, `,"object":"chat.completion","created":`...)
		}
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, g.p.model)
	b = append(b, `,"choices":[`...)
	g.head = b
}

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

func (g *job) tokenEvent(tok string, first bool) {
	b := append(g.buf[:0], "data: "...)
	b = append(b, g.head...)
	if g.p.kind == kindChat {
		if first {
			b = append(b, `{"index":0,"delta":{"role":"assistant","content":`...)
		} else {
			b = append(b, `{"index":0,"delta":{"content":`...)
		}
		b = appendJSONString(b, tok)
		b = append(b, `},"logprobs":null,"finish_reason":null}]}`...)
	} else {
		b = append(b, `{"index":0,"text":`...)
		b = appendJSONString(b, tok)
		b = append(b, `,"logprobs":null,"finish_reason":null}]}`...)
	}
	g.buf = append(b, "\n\n"...)
}

func appendUsage(b []byte, prompt, cached, completion int) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	return append(b, "}}"...)
}

// finishEvents writes the finish_reason chunk, the usage chunk (include_usage) and [DONE]
// (unless drop-done) — produced at the same instant, so written as separate events but
// flushed together — then applies close-idle.
func (g *job) finishEvents(finish string, prompt, cached, completion int) {
	b := append(g.buf[:0], "data: "...)
	b = append(b, g.head...)
	if g.p.kind == kindChat {
		b = append(b, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `{"index":0,"text":"","logprobs":null,"finish_reason":`...)
	}
	b = appendJSONString(b, finish)
	b = append(b, "}]}\n\n"...)
	if g.p.includeUsage {
		g.buf = b
		if !g.emitNoFlush() {
			return
		}
		b = append(g.buf[:0], "data: "...)
		b = append(b, g.head...)
		b = append(b, "],"...)
		b = appendUsage(b, prompt, cached, completion)
		b = append(b, "}\n\n"...)
	}
	if !g.p.fault.DropDone {
		g.buf = b
		if !g.emitNoFlush() {
			return
		}
		b = append(g.buf[:0], "data: [DONE]\n\n"...)
	}
	g.buf = b
	if !g.emit() {
		return
	}
	g.in.st.completed.Add(1)
	if g.p.fault.CloseIdle {
		g.closeIdle(g.http11)
	}
}

// writeWhole writes a non-streamed response.
func (g *job) writeWhole(finish string, prompt, cached, completion int) {
	b := append(g.buf[:0], g.head...)
	if g.p.kind == kindChat {
		b = append(b, `{"index":0,"message":{"role":"assistant","content":`...)
		b = appendJSONString(b, string(g.out))
		b = append(b, `},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `{"index":0,"text":`...)
		b = appendJSONString(b, string(g.out))
		b = append(b, `,"logprobs":null,"finish_reason":`...)
	}
	b = appendJSONString(b, finish)
	b = append(b, "}],"...)
	b = appendUsage(b, prompt, cached, completion)
	g.buf = append(b, "}\n"...)
	h := g.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(g.buf)))
	g.w.WriteHeader(http.StatusOK)
	g.w.Write(g.buf)
	g.in.st.completed.Add(1)
	if g.p.fault.CloseIdle {
		g.closeIdle(false)
	}
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
	if _, err := g.w.Write(g.buf); err != nil {
		g.in.st.aborted.Add(1)
		return false
	}
	g.events++
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

// reset aborts the TCP connection with an RST (SO_LINGER 0), after flushing what was sent.
func (g *job) reset() {
	g.rc.Flush()
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
