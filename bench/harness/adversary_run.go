package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Pacing of the client kinds. Each connection of a kind repeats its misbehaviour until the
// run ends; the pauses bound how fast it comes back once the target has dealt with it.
const (
	slowlorisGap      = time.Second            // between two bytes of a slowloris request
	slowBodyGap       = 100 * time.Millisecond // between two body bytes (or 1-byte chunks)
	noReadGap         = time.Second            // between two unread streaming requests
	noReadMaxRequests = 16                     // unread requests per connection
	noReadRcvBuf      = 4096                   // receive buffer of a noread connection, bytes
	noReadDrain       = 200 * time.Millisecond // reading what is left at the end of the run
	resetMaxRead      = 4096                   // a reset reads up to this many response bytes first
	pipelineBurst     = 16                     // requests per pipelined write
	pipelineBursts    = 16                     // unanswered bursts before the writer waits
	bigHeaderBytes    = 64 << 10               // the oversized field value
	bigHeaderFields   = 2000                   // fields of the many-fields head
	someHeaderFields  = 200                    // fields of the head over a 100-field limit only
	segmentMaxPieces  = 8                      // a segmented request is written in 2..8 pieces
	segmentMaxGap     = 2 * time.Millisecond   // pause between two pieces, 0..2 ms
	advWriteTimeout   = 2 * time.Second        // one write of a misbehaving connection
	advAnswerTimeout  = 5 * time.Second        // waiting for the target's answer to a whole request
	advPause          = 50 * time.Millisecond  // after a failed connect; between slowbody attempts
	advPeriod         = 50 * time.Millisecond  // between two starts of a reset or bigheader slot
	advMaxInFlight    = 4                      // a reset or bigheader slot's attempts running at once
	advSlowPause      = time.Second            // between two attempts of slowloris, noread
	segmentPause      = 10 * time.Millisecond  // between two segmented requests
	// upFaultTimeout bounds a workload request that carries an upstream fault: a stalled
	// upstream would otherwise hold a load connection for the whole request timeout.
	upFaultTimeout = time.Second
)

// faultHeaderName is llmsim's fault request header (docs/llmsim.md).
const faultHeaderName = "X-Llmsim-Fault"

// Outcome names that are not a status or a workload error kind.
const (
	outOK        = "ok"
	outClosed    = "closed"
	outReset     = "reset"
	outTimeout   = "timeout"
	outOpenAtEnd = "open_at_end"
	outConnect   = "connect"
	// The reset kind's own resets.
	outResetBefore = "reset_sent_before_response"
	outResetMid    = "reset_sent_mid_response"
	outResetAfter  = "reset_sent_after_response"
	// A paced slot's start skipped: its earlier attempts were all still running.
	outSkipped = "skipped"
	// A paced slot's start missed: the harness itself woke a period or more after it was
	// due (its own load), so it never started; not the target's doing, unlike outSkipped.
	outLate = "late"
)

// advStat accumulates one kind's outcomes.
type advStat struct {
	kind             string
	opened, attempts atomic.Int64

	mu       sync.Mutex
	outcomes map[string]int64
	heldN    int64
	heldSum  time.Duration
	heldMax  time.Duration
}

func (s *advStat) add(outcome string) {
	s.attempts.Add(1)
	s.mu.Lock()
	s.outcomes[outcome]++
	s.mu.Unlock()
}

// skip records n paced starts not made (outSkipped or outLate): they are no attempts.
func (s *advStat) skip(outcome string, n int64) {
	s.mu.Lock()
	s.outcomes[outcome] += n
	s.mu.Unlock()
}

// held records how long the target kept a connection before it closed or reset it.
func (s *advStat) held(d time.Duration) {
	s.mu.Lock()
	s.heldN++
	s.heldSum += d
	s.heldMax = max(s.heldMax, d)
	s.mu.Unlock()
}

func (s *advStat) result(conns int, pct float64) AdversaryKindStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := AdversaryKindStat{Kind: s.kind, Conns: conns, Percent: pct, Opened: s.opened.Load(),
		Attempts: s.attempts.Load(), Outcomes: map[string]int64{}}
	for k, v := range s.outcomes {
		st.Outcomes[k] = v
	}
	if s.heldN > 0 {
		st.HeldCount = s.heldN
		st.HeldMeanMs = float64(s.heldSum) / float64(s.heldN) / 1e6
		st.HeldMaxMs = float64(s.heldMax) / 1e6
	}
	return st
}

// advRun runs an adversary beside one load run: the client kinds on their own connections,
// and the share of the workload's requests that carry an upstream fault.
type advRun struct {
	a     *Adversary
	addr  string
	clk   func() int64
	now   func() time.Time // the paced kinds' schedule clock: time.Now
	stats map[string]*advStat

	// Requests, built once: a streaming and a non-streaming chat completion, and the pieces
	// the slow kinds and the oversized heads are made of.
	sseReq, jsonReq []byte
	head            string // request line, Host, Content-Type
	jsonBody        []byte
	burst           []byte // pipelineBurst json requests back to back

	// Upstream kinds: a draw below cum[i] (per 10^6) picks upstreamKinds[i].
	cum [len(upstreamKinds)]int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startAdversary starts the client kinds of a against addr; they run until stop.
func startAdversary(ctx context.Context, a *Adversary, o *Options, addr, hostport string, clk func() int64) (*advRun, error) {
	g, err := newRequestGen(&Options{Workload: WorkloadJSON, Path: o.Path, Model: o.Model, MaxTokens: o.MaxTokens}, hostport, o.Seed)
	if err != nil {
		return nil, err
	}
	r := &advRun{a: a, addr: addr, clk: clk, now: time.Now, stats: map[string]*advStat{},
		sseReq: g.sseReq, jsonReq: g.jsonReq, head: g.head}
	r.jsonBody = g.chatBody(nil, `[{"role":"user","content":"Say hello in five words."}]`, false)
	for range pipelineBurst {
		r.burst = append(r.burst, r.jsonReq...)
	}
	for _, k := range AdversaryKinds() {
		r.stats[k] = &advStat{kind: k, outcomes: map[string]int64{}}
	}
	cum := 0
	for i, k := range upstreamKinds {
		cum += int(a.pct[k] * 1e4)
		r.cum[i] = cum
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	kinds := map[string]func(st *advStat, rng *rand.Rand){
		AdvSlowloris: r.slowloris, AdvSlowBody: r.slowBody, AdvNoRead: r.noRead, AdvReset: r.reset,
		AdvPipeline: r.pipeline, AdvBigHeader: r.bigHeader, AdvSegment: r.segment,
	}
	for ki, k := range clientKinds {
		for slot := range a.conns[k] {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(ki)<<32|uint64(slot)))
			run, st := kinds[k], r.stats[k]
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				run(st, rng)
			}()
		}
	}
	return r, nil
}

// stop ends every misbehaving connection and returns what happened.
func (r *advRun) stop() *AdversaryResult {
	r.cancel()
	r.wg.Wait()
	res := &AdversaryResult{Spec: r.a.String()}
	for _, k := range AdversaryKinds() {
		if r.a.conns[k] == 0 && r.a.pct[k] == 0 {
			continue
		}
		res.Kinds = append(res.Kinds, r.stats[k].result(r.a.conns[k], r.a.pct[k]))
	}
	return res
}

// upstreamFault draws whether the next workload request carries an upstream fault: the
// kind's stats and its fault header line, or nil.
func (r *advRun) upstreamFault(rng *rand.Rand) (*advStat, string) {
	if r.cum[len(r.cum)-1] == 0 {
		return nil, ""
	}
	x := rng.IntN(1_000_000)
	for i, c := range r.cum {
		if x < c {
			k := upstreamKinds[i]
			return r.stats[k], faultHeaderName + ": " + upstreamFault[k] + "\r\n"
		}
	}
	return nil, ""
}

// done reports whether the run has ended.
func (r *advRun) done() bool { return r.ctx.Err() != nil }

// sleep waits d or until the run ends; false means it ended.
func (r *advRun) sleep(d time.Duration) bool {
	if d <= 0 {
		return !r.done()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// dial opens a connection for st whose blocked reads and writes return at once when the run
// ends (release undoes that). A failed connect is counted and waits pause before it returns,
// so that a kind retrying at once does not spin on a closed port; a paced kind passes 0, its
// schedule paces it, and a wait would hold one of its slot's attempts.
func (r *advRun) dial(st *advStat, pause time.Duration) (h *httpConn, release func(), ok bool) {
	h = newHTTPConn(r.addr, r.clk)
	if err := h.connectCtx(r.ctx, dialTimeout); err != nil {
		if r.done() {
			st.add(outOpenAtEnd) // the run's end cut the connect short
		} else {
			st.add(outConnect)
		}
		r.sleep(pause)
		return nil, nil, false
	}
	st.opened.Add(1)
	stop := context.AfterFunc(r.ctx, h.abort)
	return h, func() { stop(); h.close() }, true
}

// deadline sets the connection's deadline d from now; false when the run has ended (a
// deadline set after the run's abort would undo it).
func (r *advRun) deadline(h *httpConn, d time.Duration) bool {
	_ = h.c.SetDeadline(time.Now().Add(d))
	return !r.done()
}

// connOutcome names what a failed read or write says about the target: closed (EOF, or a
// write after its close), reset, or timeout; "" for anything else.
func connOutcome(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, os.ErrDeadlineExceeded):
		return outTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return outClosed
	case errors.Is(err, syscall.ECONNRESET):
		return outReset
	}
	return ""
}

// outcomeOf names the outcome of one exchange: ok, status_NNN (also for a 2xx when status
// is set: the kinds that expect a refusal report what they got), the connection's end, or
// the workload error kind.
func outcomeOf(h *httpConn, ex exchange, status bool) string {
	switch ex.kind {
	case errNone:
		if status {
			return "status_" + strconv.Itoa(ex.status)
		}
		return outOK
	case ErrStatus4xx, ErrStatus5xx, ErrStatusOther:
		return "status_" + strconv.Itoa(ex.status)
	case ErrTimeout:
		return outTimeout
	case ErrClosed:
		return outClosed
	case ErrRead, ErrIncomplete:
		if o := connOutcome(h.lastErr); o != "" && o != outTimeout {
			return o
		}
	}
	return ex.kind.String()
}

// heldUntil records, for an outcome in which the target ended the connection, how long it
// kept it.
func heldUntil(st *advStat, outcome string, opened time.Time) {
	switch outcome {
	case outClosed, outReset:
		st.held(time.Since(opened))
	default:
		if len(outcome) > 7 && outcome[:7] == "status_" {
			st.held(time.Since(opened))
		}
	}
}

// trickle writes pieces one at a time, waiting gap after each for the target to answer,
// close or reset. It returns "" when every piece went out and nothing came back, or the
// outcome that ended the attempt.
func (r *advRun) trickle(h *httpConn, pieces [][]byte, gap time.Duration) string {
	for _, p := range pieces {
		if !r.deadline(h, advWriteTimeout) {
			return outOpenAtEnd
		}
		if _, err := h.c.Write(p); err != nil {
			if r.done() {
				return outOpenAtEnd
			}
			if o := connOutcome(err); o != "" {
				return o
			}
			return ErrWrite.String()
		}
		if !r.deadline(h, gap) {
			return outOpenAtEnd
		}
		if _, err := h.br.Peek(1); err != nil {
			if r.done() {
				return outOpenAtEnd
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // the target is still waiting for the rest: the next piece
			}
			if o := connOutcome(err); o != "" {
				return o
			}
			return ErrRead.String()
		}
		// The target answered before the request was complete (408, 400, 413, ...).
		if !r.deadline(h, advAnswerTimeout) {
			return outOpenAtEnd
		}
		h.sse.reset()
		return outcomeOf(h, h.readResponse(false), true)
	}
	return ""
}

// finish reads the answer to a request sent whole.
func (r *advRun) finish(h *httpConn, stream bool) string {
	if !r.deadline(h, advAnswerTimeout) {
		return outOpenAtEnd
	}
	h.sse.reset()
	ex := h.readResponse(stream)
	if r.done() && ex.kind == ErrTimeout {
		return outOpenAtEnd
	}
	return outcomeOf(h, ex, true)
}

// slowloris sends a streaming request one byte per second.
func (r *advRun) slowloris(st *advStat, _ *rand.Rand) {
	pieces := make([][]byte, len(r.sseReq))
	for i := range r.sseReq {
		pieces[i] = r.sseReq[i : i+1]
	}
	r.slowly(st, pieces, slowlorisGap, advSlowPause)
}

// slowBody sends a complete head, then the body one byte (Content-Length) or one 1-byte chunk
// (chunked) per 100 ms.
func (r *advRun) slowBody(st *advStat, rng *rand.Rand) {
	for !r.done() {
		var pieces [][]byte
		if rng.IntN(2) == 0 {
			pieces = append(pieces, []byte(r.head+"Accept: application/json\r\nContent-Length: "+strconv.Itoa(len(r.jsonBody))+"\r\n\r\n"))
			for i := range r.jsonBody {
				pieces = append(pieces, r.jsonBody[i:i+1])
			}
		} else {
			pieces = append(pieces, []byte(r.head+"Accept: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"))
			for _, c := range r.jsonBody {
				pieces = append(pieces, []byte{'1', '\r', '\n', c, '\r', '\n'})
			}
			pieces = append(pieces, []byte("0\r\n\r\n"))
		}
		if !r.slowOnce(st, pieces, slowBodyGap) || !r.sleep(advPause) {
			return
		}
	}
}

// slowly repeats slowOnce until the run ends.
func (r *advRun) slowly(st *advStat, pieces [][]byte, gap, pause time.Duration) {
	for r.slowOnce(st, pieces, gap) && r.sleep(pause) {
	}
}

// slowOnce sends pieces gap apart on a new connection and records what the target did;
// false when the run ended.
func (r *advRun) slowOnce(st *advStat, pieces [][]byte, gap time.Duration) bool {
	h, release, ok := r.dial(st, advPause)
	if !ok {
		return !r.done()
	}
	defer release()
	opened := time.Now()
	out := r.trickle(h, pieces, gap)
	if out == "" {
		out = r.finish(h, false)
	}
	st.add(out)
	heldUntil(st, out, opened)
	return !r.done()
}

// noRead sends a streaming request every second on a connection with a small receive buffer
// and never reads; at the end of the run it reads what is there to tell whether the target
// still held the connection.
func (r *advRun) noRead(st *advStat, _ *rand.Rand) {
	for !r.done() {
		h := newHTTPConn(r.addr, r.clk)
		if err := h.connect(dialTimeout); err != nil {
			if !r.done() {
				st.add(outConnect)
			}
			if !r.sleep(advSlowPause) {
				return
			}
			continue
		}
		st.opened.Add(1)
		if tc, ok := h.c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(noReadRcvBuf)
		}
		opened := time.Now()
		out := ""
		for sent := 0; out == "" && !r.done(); sent++ {
			if sent < noReadMaxRequests {
				_ = h.c.SetWriteDeadline(time.Now().Add(advWriteTimeout))
				if _, err := h.c.Write(r.sseReq); err != nil {
					if out = connOutcome(err); out == "" {
						out = ErrWrite.String()
					}
					break
				}
			}
			r.sleep(noReadGap)
		}
		if out == "" {
			out = r.drain(h)
		}
		st.add(out)
		heldUntil(st, out, opened)
		h.close()
		if !r.sleep(advSlowPause) {
			return
		}
	}
}

// drain reads what a noread connection holds, briefly: the target closed or reset it, or
// still held it open.
func (r *advRun) drain(h *httpConn) string {
	_ = h.c.SetReadDeadline(time.Now().Add(noReadDrain))
	buf := make([]byte, 32<<10)
	for {
		_, err := h.c.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return outOpenAtEnd
		}
		if o := connOutcome(err); o != "" {
			return o
		}
		return ErrRead.String()
	}
}

// reset sends a streaming request, reads a random part of the response (none a quarter of
// the time) and resets the connection (RST), on a connection of its own each advPeriod (paced).
func (r *advRun) reset(st *advStat, rng *rand.Rand) {
	r.paced(st, rng, func(rng *rand.Rand) {
		h, release, ok := r.dial(st, 0)
		if !ok {
			return
		}
		out := ""
		if !r.deadline(h, advAnswerTimeout) {
			release()
			st.add(outOpenAtEnd) // opened as the run ended
			return
		}
		if _, err := h.c.Write(r.sseReq); err != nil {
			if out = connOutcome(err); out == "" {
				out = ErrWrite.String()
			}
		} else if rng.IntN(4) == 0 {
			out = outResetBefore
		} else {
			out = r.readSome(h, make([]byte, 1+rng.IntN(resetMaxRead)))
		}
		if tc, ok := h.c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // Close sends RST
		}
		release()
		if r.done() {
			out = outOpenAtEnd // the run ended it, whatever the read saw then
		}
		st.add(out)
	})
}

// paced starts attempt on a fixed schedule, one start every advPeriod from a seeded phase,
// however long the earlier attempts take: every target meets the same attempts per second.
// (Waiting for each answer before the next attempt would send more of them to the target that
// answers sooner, as a refusal is quicker than a proxied stream.) At most advMaxInFlight of
// the slot's attempts run at once; a start that finds them all running is skipped and
// counted as outSkipped, so a report shows when a target held attempts that long. A start
// the slot only reaches a period or more after it was due (the harness's own goroutines were
// not run in time: too many slots for the machine) is not made up for by a burst, which would
// fill the slot at once and count the rest as outSkipped against a target that held nothing:
// the starts missed are counted as outLate and the schedule goes on from the next one due.
// Each attempt gets a generator seeded from rng, so a run is repeatable. paced returns when
// the run has ended and its attempts have returned.
func (r *advRun) paced(st *advStat, rng *rand.Rand, attempt func(rng *rand.Rand)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	running := make(chan struct{}, advMaxInFlight)
	next := r.now().Add(time.Duration(rng.Int64N(int64(advPeriod))))
	for r.sleep(next.Sub(r.now())) {
		if behind := r.now().Sub(next); behind >= advPeriod {
			missed := int64(behind / advPeriod)
			st.skip(outLate, missed)
			next = next.Add(time.Duration(missed) * advPeriod)
		}
		select {
		case running <- struct{}{}:
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-running }()
				attempt(rand.New(rand.NewPCG(seed, seed>>32)))
			}()
		default:
			st.skip(outSkipped, 1)
		}
		next = next.Add(advPeriod)
	}
}

// readSome reads into buf until it is full (the reset comes mid-response), the response is
// complete, or the target ends the connection, and names the outcome.
func (r *advRun) readSome(h *httpConn, buf []byte) string {
	n := 0
	for n < len(buf) {
		k, err := h.c.Read(buf[n:])
		n += k
		if o := resetOutcome(buf[:n], false); o != "" {
			return o
		}
		if err != nil {
			if r.done() {
				return outOpenAtEnd
			}
			if errors.Is(err, io.EOF) && resetOutcome(buf[:n], true) == outResetAfter {
				return outResetAfter // a body delimited by the close came whole
			}
			if o := connOutcome(err); o != "" {
				return o
			}
			return ErrRead.String()
		}
	}
	return outResetMid
}

// resetOutcome names what p, the bytes a reset attempt has read so far, show: the final
// response's status when it is not 200 (status_NNN, or bad_response for a malformed status
// line), outResetAfter when a 200 response is whole (eof: the target closed the connection
// after p), or "" while the response is still coming. Interim 1xx responses before the final
// one are skipped (RFC 9110 §15.2), and a 200 of any HTTP/1.x version is the target's answer.
func resetOutcome(p []byte, eof bool) string {
	resp, status := finalResponse(p)
	switch {
	case status < 0:
		return ErrBadResponse.String()
	case status == 0:
		return ""
	case status != 200:
		return "status_" + strconv.Itoa(status)
	case responseComplete(resp, eof):
		return outResetAfter
	}
	return ""
}

// finalResponse returns p from the start of its final response, past the interim (1xx)
// responses before it (RFC 9110 §15.2; 101 is final), with that response's status code: 0
// while p does not reach the status code of it (its first 13 bytes), -1 when a status line is
// malformed.
func finalResponse(p []byte) ([]byte, int) {
	for {
		line := p
		if eol := bytes.IndexByte(p, '\n'); eol >= 0 {
			line = p[:eol+1]
		} else if len(p) < len("HTTP/1.1 200 ") {
			return nil, 0
		}
		status := parseStatusLine(line)
		if status < 0 || status >= 200 || status == 101 {
			return p, status
		}
		end := bytes.Index(p, []byte("\r\n\r\n"))
		if end < 0 {
			return nil, 0
		}
		p = p[end+4:]
	}
}

var sseDone = []byte("data: [DONE]")

// responseComplete reports whether p, the start of a connection's bytes, holds a whole
// response: a stream through its [DONE] event, or a head and the body its framing delimits
// (RFC 9112 §6.3: a chunked body through its last chunk, Transfer-Encoding taking precedence;
// else a valid Content-Length's bytes). eof says the target closed the connection after p,
// which completes a body delimited by the close (no Transfer-Encoding or Content-Length).
func responseComplete(p []byte, eof bool) bool {
	if bytes.Contains(p, sseDone) {
		return true
	}
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	body := p[end+4:]
	var te, cl []byte
	for _, line := range bytes.Split(p[:end], []byte("\r\n"))[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch value = bytes.TrimSpace(value); {
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Transfer-Encoding")):
			te = value
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")):
			cl = value
		}
	}
	switch {
	case te != nil:
		return bytes.HasSuffix(bytes.ToLower(te), []byte("chunked")) && chunkedComplete(body)
	case cl != nil:
		n, ok := contentLength(cl)
		return ok && len(body) >= n
	}
	return eof
}

// chunkedComplete reports whether body holds a whole chunked body (RFC 9112 §7.1): chunks
// through the last (size 0) and the trailer section's end.
func chunkedComplete(body []byte) bool {
	for {
		line, rest, ok := bytes.Cut(body, []byte("\r\n"))
		if !ok {
			return false
		}
		size, _, _ := bytes.Cut(line, []byte(";")) // chunk extensions
		n, err := strconv.ParseUint(string(bytes.TrimSpace(size)), 16, 32)
		if err != nil {
			return false
		}
		if n == 0 {
			// Trailer fields, each ending in CRLF, then an empty line.
			return bytes.HasPrefix(rest, []byte("\r\n")) || bytes.Contains(rest, []byte("\r\n\r\n"))
		}
		if uint64(len(rest)) < n+2 {
			return false
		}
		body = rest[n+2:]
	}
}

// contentLength parses a Content-Length value: digits only (RFC 9110 §8.6), so that "-1" or
// "+5" frames nothing.
func contentLength(v []byte) (int, bool) {
	if len(v) == 0 || len(v) > 12 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// pipeline writes bursts of small requests without waiting for their answers (up to
// pipelineBursts unanswered) while a reader takes the answers, each counted by status.
func (r *advRun) pipeline(st *advStat, _ *rand.Rand) {
	for !r.done() {
		h, release, ok := r.dial(st, advPause)
		if !ok {
			continue
		}
		credit := make(chan struct{}, pipelineBursts)
		readerDone, writerDone := make(chan struct{}), make(chan struct{})
		c := h.c // release clears h.c while the writer may still be in Write
		go func() {
			defer close(writerDone)
			for {
				select {
				case credit <- struct{}{}:
				case <-readerDone:
					return
				}
				_ = c.SetWriteDeadline(time.Now().Add(advWriteTimeout))
				if _, err := c.Write(r.burst); err != nil {
					return
				}
			}
		}()
		out := ""
		for n := 1; ; n++ {
			_ = h.c.SetReadDeadline(time.Now().Add(advAnswerTimeout))
			if r.done() {
				out = outOpenAtEnd
				break
			}
			h.sse.reset()
			ex := h.readResponse(false)
			if ex.status != 0 {
				st.add("status_" + strconv.Itoa(ex.status))
			}
			if ex.kind != errNone && (ex.kind < ErrStatus4xx || ex.kind > ErrStatusOther) {
				// The connection ended or broke.
				if out = outcomeOf(h, ex, false); r.done() {
					out = outOpenAtEnd
				}
				break
			}
			if !ex.keepAlive {
				out = outClosed
				break
			}
			if n%pipelineBurst == 0 {
				<-credit
			}
		}
		close(readerDone)
		if out != outOpenAtEnd {
			st.add(out)
		}
		release()
		<-writerDone
		if !r.sleep(advPause) {
			return
		}
	}
}

// bigHeader sends one of three oversized heads (a 64 KiB field value, 2,000 fields, 200
// fields) and records the answer, on a connection of its own each advPeriod (paced).
func (r *advRun) bigHeader(st *advStat, rng *rand.Rand) {
	// A valid chat request otherwise, so that a target that accepts the head answers 200.
	end := "Content-Length: " + strconv.Itoa(len(r.jsonBody)) + "\r\n\r\n" + string(r.jsonBody)
	var heads [3][]byte
	big := append([]byte(r.head), "X-Big: "...)
	big = append(big, bytes.Repeat([]byte{'a'}, bigHeaderBytes)...)
	heads[0] = append(big, "\r\n"+end...)
	fields := func(n int) []byte {
		b := []byte(r.head)
		for i := range n {
			b = append(b, "X-F-"...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, ": v\r\n"...)
		}
		return append(b, end...)
	}
	heads[1], heads[2] = fields(bigHeaderFields), fields(someHeaderFields)
	r.paced(st, rng, func(rng *rand.Rand) {
		h, release, ok := r.dial(st, 0)
		if !ok {
			return
		}
		opened := time.Now()
		out := ""
		if !r.deadline(h, advWriteTimeout) {
			release()
			st.add(outOpenAtEnd) // opened as the run ended
			return
		}
		if _, err := h.c.Write(heads[rng.IntN(len(heads))]); err != nil {
			switch out = connOutcome(err); {
			case r.done():
				out = outOpenAtEnd // the run's end aborted the write
			case out == "":
				out = ErrWrite.String()
			}
		} else {
			out = r.finish(h, false)
		}
		release()
		st.add(out)
		heldUntil(st, out, opened)
	})
}

// segment sends valid requests, streaming or not, each written in 2..8 pieces cut at random
// points with up to 2 ms between pieces, on a keep-alive connection, and checks the answers
// as the workload does.
func (r *advRun) segment(st *advStat, rng *rand.Rand) {
	var cuts []int
	for !r.done() {
		h, release, ok := r.dial(st, advPause)
		if !ok {
			continue
		}
		for !r.done() {
			req, stream := r.jsonReq, false
			if rng.IntN(2) == 0 {
				req, stream = r.sseReq, true
			}
			n := 2 + rng.IntN(segmentMaxPieces-1)
			cuts = cuts[:0]
			for range n - 1 {
				cuts = append(cuts, 1+rng.IntN(len(req)-1))
			}
			sortInts(cuts)
			cuts = append(cuts, len(req))
			if !r.deadline(h, advAnswerTimeout) {
				break
			}
			out, prev := "", 0
			for _, c := range cuts {
				if c == prev {
					continue
				}
				if _, err := h.c.Write(req[prev:c]); err != nil {
					if out = connOutcome(err); out == "" {
						out = ErrWrite.String()
					}
					break
				}
				prev = c
				if c < len(req) {
					time.Sleep(time.Duration(rng.Int64N(int64(segmentMaxGap) + 1)))
				}
			}
			keep := false
			if out == "" {
				h.sse.reset()
				ex := h.readResponse(stream)
				out = outcomeOf(h, ex, false)
				keep = ex.kind == errNone && ex.keepAlive
			}
			if r.done() && (out == outTimeout || out == ErrWrite.String()) {
				break
			}
			st.add(out)
			if !keep || !r.sleep(segmentPause) {
				break
			}
		}
		release()
		r.sleep(advPause)
	}
}

// sortInts sorts a few ints in place (insertion sort: at most segmentMaxPieces).
func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
