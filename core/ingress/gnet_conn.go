package ingress

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/pool/goroutine"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Connection phases, owned by the event loop.
const (
	phaseHead   = iota // waiting for (the rest of) a request head
	phaseBody          // reading a request body
	phaseBusy          // a request is being proxied; later pipelined bytes wait in the inbound buffer
	phaseLinger        // the connection ends: what the client still sends is discarded (linger.go)
)

// maxKeptBodyBytes is the largest request body buffer a connection keeps between requests.
const maxKeptBodyBytes = 64 << 10

// maxSendQueue bounds the number of response writes queued for one connection: with the byte
// high-water mark it bounds the memory a slow client can pin.
const maxSendQueue = 64

var (
	errClientGone = errors.New("sluice: client connection closed")
	continue100   = []byte("HTTP/1.1 100 Continue\r\n\r\n")
)

// sendItem is one queued response write: the buffer to release and the bytes it carries.
type sendItem struct {
	bp *[]byte
	n  int
}

// gconn is the state of one client connection on the gnet engine. Most connections are idle
// most of the time, so it holds no request state between requests: the RequestCtx (with its
// buffers) comes from a pool when a request head is complete and goes back when the request
// ends, and what only a slow client needs (the queue of response writes) is made on first use.
type gconn struct {
	e *GnetEngine
	c gnet.Conn

	// Owned by the event loop (and by the worker while phase == phaseBusy). rc is the request
	// in flight, nil between requests: the loop takes it from the pool to parse a head
	// (takeCtx); it then belongs to whoever runs the request, and finishServe gives it back.
	phase        int
	rc           *pipeline.RequestCtx
	peer         netip.Addr
	bodyLeft     int64
	head         http1.HeadScan // where the search for the end of the head resumes
	dec          http1.ChunkedDecoder
	continueSent bool
	replyQueued  bool // the last reply waits behind queued response writes: the FIN must too
	// stepping: a loop-path write step is running (respond, relay); a client write that
	// fails inside it closes the connection at once (gnet's write), and closedInStep defers
	// what that close does to the request until the step has returned (loopClosed), so that
	// the step never touches a request the close gave back.
	stepping, closedInStep bool
	emptyLines             int32 // bytes of empty lines dropped before the request line being read (refused past max_header_bytes)
	lingerBytes            int64 // discarded while lingering
	loopX                        // the upstream exchange when the event loop drives it (gnet_loop.go)

	// Shared with the worker goroutine and the deadline sweep.
	busy         atomic.Bool  // a request is in flight
	finished     atomic.Bool  // the worker is done; the loop may parse the next request
	inputWaiting atomic.Bool  // the loop holds unparsed bytes that arrived while busy
	overflow     atomic.Bool  // more pipelined bytes came than the bound: the connection ends after the response in flight
	headSince    atomic.Int64 // unix ns when the current request's head clock started: the opening for the first request, the first byte for a later one; 0 when idle or busy
	headExpired  atomic.Bool  // the sweep found the request past read_header_timeout and woke the loop to answer 408
	fresh        atomic.Bool  // no byte has arrived yet on the connection, or since its response ended during a drain under a head that promised keep-alive (a drain gives it a grace)
	idleSince    atomic.Int64 // unix ns when the connection last became idle
	lingerSince  atomic.Int64 // unix ns when the lingering close began; 0 when not lingering
	lingerLast   atomic.Int64 // unix ns when the lingering connection last received bytes
	wrShut       atomic.Bool  // the sending side is closed (shutdown(SHUT_WR) done)
	closed       atomic.Bool

	// Response writes: buffers queued to AsyncWrite, released in order by the write callback.
	// sq is made by the first write the socket does not take at once (sendQueue).
	sq        atomic.Pointer[sendQueue]
	queued    atomic.Int64 // bytes handed to AsyncWrite and not yet written to the socket or outbound buffer
	outbound  atomic.Int64 // the loop's outbound buffer size at the last callback
	onWritten gnet.AsyncCallback
	onProbe   gnet.AsyncCallback
	onReplied gnet.AsyncCallback
	onEnd     gnet.AsyncCallback
	serveFn   func()

	// The client-stall clock (stall.go): stallSince is when the loop last saw the client take
	// nothing while gnet held response bytes for it (0: it takes what is sent); stallAcked and
	// stallOut are what the loop saw then (owned by the loop).
	stallSince atomic.Int64
	stallAcked uint64
	stallOut   int32 // bytes; the loop's outbound buffer stays far below 2 GiB (sendHighWaterBytes)

	// A WebSocket tunnel takes the socket off the event loop (websocket.go): detaching tells
	// OnClose that the close is the hand-over, not the client leaving, and leftover holds the
	// client bytes the loop had read and not parsed.
	detaching atomic.Bool
	leftover  []byte

	// Direct writes: while nothing is queued on the loop, the worker writes to the socket
	// itself, saving the loop wake-up per write. writeMu keeps the fd open during such a write:
	// gnet calls OnClose before it closes the fd, and OnClose takes writeMu. writeMu also
	// guards closedCh, made by the first goroutine that waits for the close (closedChan).
	fd       int
	writeMu  sync.Mutex
	fdClosed bool
	// answering: part of the response in flight went to the client (Send). Not guarded by
	// writeMu: only the goroutine running the request (a worker, or the loop) touches it.
	answering bool
	closedCh  chan struct{}
	// cancel cancels the request in flight when the client leaves (OnClose); guarded by
	// writeMu. OnClose uses it rather than rc, which a worker may be giving back meanwhile;
	// it is cleared when the request ends, so that an idle connection keeps no RequestCtx
	// from the garbage collector.
	cancel pipeline.CancelHandle
}

// sendQueue is what a connection needs once the worker queues response writes on the loop
// (the client reads slower than the worker writes): the buffers in flight, in order, and the
// signal that the loop wrote some. maxSendQueue items of 16 bytes make it ~1.2 KiB, which an
// idle connection does not carry: it is made on first use and dropped when a request ends with
// nothing queued.
type sendQueue struct {
	sent    chan sendItem
	drained chan struct{}
}

func newGconn(e *GnetEngine, c gnet.Conn) *gconn {
	gc := &gconn{e: e, c: c, peer: peerAddr(c.RemoteAddr())}
	gc.fd = c.Fd()
	gc.serveFn = gc.serve
	gc.onWritten = gc.written
	gc.onProbe = gc.probed
	gc.onReplied = gc.replied
	gc.onEnd = gc.endAfterResponse
	gc.endFn = gc.endOnWorker
	// The first request's head is due read_header_timeout after the connection opened, as
	// nginx's client_header_timeout: a connection that sends nothing is a stalled head, not an
	// idle keep-alive connection, or a client could hold connections open until idle_timeout
	// without sending a byte. A later request's clock starts at its first byte: between
	// requests idle_timeout governs.
	now := time.Now().UnixNano()
	gc.idleSince.Store(now)
	gc.headSince.Store(now)
	gc.fresh.Store(true)
	return gc
}

// takeCtx gives the connection a RequestCtx for its next request; on the event loop.
func (gc *gconn) takeCtx() *pipeline.RequestCtx {
	if gc.rc == nil {
		rc := pipeline.AcquireRequestCtx()
		rc.SetClientAddr(gc.peer)
		gc.rc = rc
		gc.setCancel(rc.CancelHandle())
	}
	return gc.rc
}

// releaseCtx gives the request's RequestCtx back to the pool once the request is over (Finish
// ran, or it never entered the pipeline). It runs on whichever goroutine owns rc; the loop
// reads gc.rc again only after the owner published the end of the request (finished, or the
// close).
func (gc *gconn) releaseCtx() {
	rc := gc.rc
	if rc == nil {
		return
	}
	gc.rc = nil
	gc.setCancel(pipeline.CancelHandle{})
	if cap(rc.Req.Body) > maxKeptBodyBytes {
		rc.Req.Body = nil // the pool does not keep a large body's buffer
	}
	pipeline.ReleaseRequestCtx(rc)
}

func (gc *gconn) setCancel(h pipeline.CancelHandle) {
	gc.writeMu.Lock()
	gc.cancel = h
	gc.writeMu.Unlock()
}

// queue returns the connection's send queue, making it on first use.
func (gc *gconn) queue() *sendQueue {
	if q := gc.sq.Load(); q != nil {
		return q
	}
	q := &sendQueue{sent: make(chan sendItem, maxSendQueue), drained: make(chan struct{}, 1)}
	if !gc.sq.CompareAndSwap(nil, q) {
		return gc.sq.Load()
	}
	return q
}

// closedChan returns a channel closed when the connection is (OnClose), making it on first
// use.
func (gc *gconn) closedChan() <-chan struct{} {
	gc.writeMu.Lock()
	defer gc.writeMu.Unlock()
	if gc.closedCh == nil {
		gc.closedCh = make(chan struct{})
		if gc.fdClosed {
			close(gc.closedCh)
		}
	}
	return gc.closedCh
}

// markClosed records the close (OnClose, on the loop) and cancels the request in flight, unless
// the close is a WebSocket hand-over.
func (gc *gconn) markClosed() {
	gc.writeMu.Lock()
	first := !gc.fdClosed
	gc.fdClosed = true
	if first {
		gc.closed.Store(true)
		if gc.closedCh != nil {
			close(gc.closedCh)
		}
	}
	cancel := gc.cancel
	gc.writeMu.Unlock()
	if first && !gc.detaching.Load() {
		// A no-op when that use of the RequestCtx ended meanwhile: it may serve another
		// connection by now.
		cancel.Cancel()
	}
}

// onTraffic runs on the event loop: it advances the request parser over the buffered bytes
// and dispatches a complete request to a worker goroutine.
func (gc *gconn) onTraffic() gnet.Action {
	c := gc.c
	lim := &gc.e.set.Limits
	for {
		switch gc.phase {
		case phaseLinger:
			return gc.onLinger()
		case phaseBusy:
			if gc.onLoop {
				gc.checkDeadline(time.Now().UnixNano())
			}
			if !gc.finished.Load() {
				// Pipelined bytes wait until the response in flight is done, but not without
				// bound: past it the connection takes no further request and discards what the
				// client sends (gnet cannot stop reading a socket); the response in flight still
				// goes out whole, then the connection closes lingering, and the client retries
				// the unanswered requests on a new one (RFC 9112 §9.3.2).
				if gc.overflow.Load() || int64(c.InboundBuffered()) > int64(lim.HeaderBytes())+lim.BodyBytes() {
					if !gc.overflow.Swap(true) {
						gc.e.m.Shed(metrics.ShedPipelineOverflow)
					}
					_, _ = c.Discard(-1)
				}
				// Tell the worker there is input to parse when it finishes; re-check after
				// publishing, so that one of the two sides always sees the other (finishServe).
				gc.inputWaiting.Store(true)
				if !gc.finished.Load() {
					return gnet.None
				}
			}
			gc.inputWaiting.Store(false)
			gc.finished.Store(false)
			if gc.overflow.Load() {
				// The worker kept the connection before it saw the overflow: the loop ends it,
				// behind the response writes still queued.
				if gc.queued.Load() > 0 {
					_ = c.AsyncWrite(nil, gc.onReplied)
					return gc.linger(true)
				}
				return gc.linger(false)
			}
			gc.phase = phaseHead
		case phaseHead:
			avail := c.InboundBuffered()
			if avail == 0 {
				// Nothing yet of the connection's first request, past its time: a head of no
				// bytes stalled. (headSince is 0 on an idle keep-alive connection, whatever
				// the sweep last found.)
				if gc.headExpired.Load() && gc.headSince.Load() != 0 {
					return gc.shedHeadTimeout(errHeadTimeout)
				}
				return gnet.None
			}
			if gc.headSince.Load() == 0 {
				gc.headExpired.Store(false)
				gc.headSince.Store(time.Now().UnixNano())
			}
			if gc.fresh.Load() {
				gc.fresh.Store(false)
			}
			buf, skip, n := gc.findHead(avail, lim)
			if n < 0 {
				if err := http1.CheckPartialHead(buf[skip:], lim); err != nil && err != http1.ErrNeedMore {
					return gc.reject(err)
				}
				if skip > 0 {
					// Empty lines before the request line are dropped as they come, so that a
					// client sending nothing else holds no buffer and costs no rescans; past
					// the header limit they are refused as an oversized head.
					gc.emptyLines += int32(skip)
					_, _ = c.Discard(skip)
					gc.head.Reset()
					if err := http1.CheckLeadingEmptyLines(int(gc.emptyLines), lim); err != nil {
						return gc.reject(err)
					}
				}
				if gc.headExpired.Load() {
					return gc.shedHeadTimeout(errHeadTimeout)
				}
				return gnet.None
			}
			if err := http1.CheckLeadingEmptyLines(int(gc.emptyLines)+skip, lim); err != nil {
				return gc.reject(err) // the empty lines came with the head, in one read
			}
			req := &gc.takeCtx().Req
			req.Reset()
			if err := req.ParseRequestHead(buf[skip:skip+n], lim); err != nil {
				return gc.reject(err)
			}
			_, _ = c.Discard(skip + n)
			gc.head.Reset()
			gc.emptyLines = 0
			gc.continueSent = false
			switch {
			case req.Chunked:
				gc.dec.Reset()
				// The decoder's bound is the body's: its route's when lower (overBound).
				gc.dec.MaxBodyBytes = lim.BodyBytes()
				if b := gc.bodyBound(req); b >= 0 {
					gc.dec.MaxBodyBytes = b
				}
				gc.phase = phaseBody
			case req.ContentLength > 0:
				if req.ContentLength > lim.BodyBytes() {
					return gc.reject(bodyTooLarge)
				}
				if b := gc.bodyBound(req); b >= 0 && req.ContentLength > b {
					// Refused by its route whatever the body: answered without it, and
					// without 100 Continue.
					gc.dispatchCut(req.ContentLength)
					return gnet.None
				}
				gc.bodyLeft = req.ContentLength
				gc.phase = phaseBody
			default:
				gc.dispatch()
				return gnet.None
			}
		case phaseBody:
			done, read, err := gc.readBody()
			if err == errBodyCut {
				gc.dispatchCut(max(int64(len(gc.rc.Req.Body)), gc.dec.MaxBodyBytes+1))
				return gnet.None
			}
			if err != nil {
				return gc.reject(err)
			}
			if !done {
				if gc.headExpired.Load() {
					return gc.shedHeadTimeout(errBodyTimeout)
				}
				if read > 0 {
					// The body is still arriving: read_header_timeout bounds a pause in it,
					// not the whole upload, as nginx's client_body_timeout does.
					gc.headSince.Store(time.Now().UnixNano())
				}
				if req := &gc.rc.Req; req.ExpectContinue && !gc.continueSent && req.Minor >= 1 {
					gc.continueSent = true
					gc.loopWrite(continue100)
				}
				return gnet.None
			}
			gc.dispatch()
			return gnet.None
		}
	}
}

// inputWindow is how many buffered bytes the parser first looks at, for a head or for the
// framing of a chunked body. A client that pipelines has its later requests buffered behind
// the one being read, and gnet copies what a Peek spans whenever its ring buffer has wrapped:
// peeking all of the input for each request would copy the whole backlog per request,
// quadratic work on the event loop that slows every connection it serves. A window of 4 KiB
// holds most heads; it widens only while a head may extend past it.
const inputWindow = 4 << 10

// findHead looks for the end of the head being read in the first bytes of the avail buffered
// ones. It returns the window it looked in and what HeadScan.Find found there: the head is
// buf[skip:skip+n], or n is -1 when buf holds all that may yet be the head, that is all of the
// input, or more than the header limit past the leading empty lines (CheckPartialHead then
// refuses it).
func (gc *gconn) findHead(avail int, lim *http1.Limits) (buf []byte, skip, n int) {
	// The window starts where the previous event's search stopped: HeadScan resumes there.
	want := min(avail, max(inputWindow, gc.head.Scanned()))
	for {
		buf, _ = gc.c.Peek(want)
		skip, n = gc.head.Find(buf)
		limit := skip + lim.HeaderBytes() + 1
		if n >= 0 || want == avail || want >= limit {
			return buf, skip, n
		}
		want = min(avail, want*4, limit)
	}
}

// readBody moves buffered body bytes into the request and discards them from the inbound
// buffer. It reports whether the body is complete and how many input bytes it consumed.
func (gc *gconn) readBody() (done bool, read int, err error) {
	req := &gc.rc.Req
	avail := gc.c.InboundBuffered()
	if !req.Chunked {
		// Read copies straight into the body, with no peeked copy between.
		take := int(min(int64(avail), gc.bodyLeft))
		n := len(req.Body)
		req.Body = slices.Grow(req.Body, take)[:n+take]
		_, _ = gc.c.Read(req.Body[n:])
		gc.bodyLeft -= int64(take)
		return gc.bodyLeft == 0, take, nil
	}
	for avail > 0 && !gc.dec.Done() {
		// The decoder keeps its state between calls and consumes every byte up to the end
		// of the body, so a window of any size makes progress.
		buf, _ := gc.c.Peek(min(avail, inputWindow))
		off, err := gc.decodeChunks(buf)
		if err != nil {
			return false, read, err
		}
		if off == 0 {
			break
		}
		_, _ = gc.c.Discard(off)
		read += off
		avail -= off
	}
	return gc.dec.Done(), read, nil
}

// decodeChunks appends the chunk data of buf to the request body and returns how many bytes of
// buf the chunked decoder consumed.
func (gc *gconn) decodeChunks(buf []byte) (int, error) {
	req := &gc.rc.Req
	off := 0
	for off < len(buf) && !gc.dec.Done() {
		data, k, err := gc.dec.Next(buf[off:])
		if err != nil {
			return off, gc.overBound(err)
		}
		req.Body = append(req.Body, data...)
		if int64(len(req.Body)) > gc.dec.MaxBodyBytes {
			return off, gc.overBound(bodyTooLarge)
		}
		off += k
		if k == 0 {
			break
		}
	}
	return off, nil
}

// errBodyCut stops reading a chunked body once it is longer than its route's bound.
var errBodyCut = errors.New("ingress: request body over its route's bound")

// overBound returns errBodyCut for err, a chunked body's refusal, when err is the body's
// length over the decoder's bound and that bound is its route's, below the entrypoint's.
func (gc *gconn) overBound(err error) error {
	if fe, ok := err.(*http1.Error); ok && fe.Status == 413 && gc.dec.MaxBodyBytes < gc.e.set.Limits.BodyBytes() {
		return errBodyCut
	}
	return err
}

// bodyBound returns the bound its route sets on the body of request head req when it is
// below the entrypoint's max_body_bytes, or -1.
func (gc *gconn) bodyBound(req *http1.Request) int64 {
	if b, ok := gc.e.pipe.BodyBound(req); ok && b < gc.e.set.Limits.BodyBytes() {
		return b
	}
	return -1
}

// dispatchCut sends the request being read on without the rest of its body, known to be at
// least n bytes long and over its route's bound (http1.Request.BodyCut): the route refuses it
// (413, or a stage before the bound its own answer) and nothing more of it is read. The
// connection ends after the answer, lingering, since the client may still be sending the body
// (as after more pipelined bytes than the bound, overflow): what it sends meanwhile is
// discarded.
func (gc *gconn) dispatchCut(n int64) {
	req := &gc.rc.Req
	req.BodyCut = n
	req.KeepAlive = false
	gc.overflow.Store(true)
	gc.inputWaiting.Store(true)
	gc.dispatch()
}

// reject answers a request that cannot be parsed or is over a limit and ends the connection
// (RFC 9112 §11.2: after a framing error the rest of the stream cannot be trusted). The client
// may still be sending the request, so the connection lingers (linger.go).
func (gc *gconn) reject(err error) gnet.Action {
	rc := gc.takeCtx()
	gc.e.pipe.Reject(rc, framingError(err, &gc.e.set.Limits))
	resp := rc.AppendHead(nil)
	// The request is over: its RequestCtx leaves the connection with the goroutine that
	// completes it. Completion (the access log) writes a file: never on the event loop.
	gc.rc = nil
	gc.setCancel(pipeline.CancelHandle{})
	finish := func() {
		defer func() {
			if v := recover(); v != nil {
				// A completion stage's bug: the request was finished all the same
				// (pipeline.StagePanic), and the reply is already on its way.
				gc.e.panics.report(gc.e.log, gc.e.set.Name, v)
			}
		}()
		rc.Finish()
		if cap(rc.Req.Body) > maxKeptBodyBytes {
			rc.Req.Body = nil
		}
		pipeline.ReleaseRequestCtx(rc)
	}
	if workers.Submit(finish) != nil {
		go finish()
	}
	if gc.queued.Load() > 0 {
		// The previous response is still queued for a slow client: the error goes behind it,
		// and the sending side closes once both are written.
		_ = gc.c.AsyncWrite(resp, gc.onReplied)
		return gc.linger(true)
	}
	_, _ = gc.c.Write(resp)
	return gc.linger(false)
}

// Answers to a request that did not complete within read_header_timeout (RFC 9110 §15.5.9),
// on both engines: each says whether the head or the body stalled.
var (
	errHeadTimeout = &http1.Error{Status: 408, Msg: "request head not complete within read_header_timeout"}
	errBodyTimeout = &http1.Error{Status: 408, Msg: "request body not complete within read_header_timeout"}
)

// shedHeadTimeout answers 408 to a request the sweep found past read_header_timeout, counts
// and logs the shed, and closes the connection lingering.
func (gc *gconn) shedHeadTimeout(err *http1.Error) gnet.Action {
	gc.e.m.Shed(metrics.ShedHeaderTimeout)
	gc.e.shed.headTimeout(gc.c.RemoteAddr(), err)
	return gc.reject(err)
}

// linger starts the lingering close on the event loop; replyQueued: the last response is still
// queued behind a worker's writes.
func (gc *gconn) linger(replyQueued bool) gnet.Action {
	now := time.Now().UnixNano()
	gc.phase = phaseLinger
	gc.replyQueued = replyQueued
	gc.lingerBytes = 0
	gc.headSince.Store(0)
	gc.lingerLast.Store(now)
	gc.lingerSince.Store(now)
	return gc.onLinger()
}

// onLinger runs on the event loop while the connection lingers: it discards what arrived and
// closes the sending side once the response has left the loop's buffers (the FIN must follow
// the last response byte). The sweep enforces the time bounds.
func (gc *gconn) onLinger() gnet.Action {
	if n, _ := gc.c.Discard(-1); n > 0 {
		gc.lingerBytes += int64(n)
		gc.lingerLast.Store(time.Now().UnixNano())
		if gc.lingerBytes > gc.e.set.linger.bytes {
			return gnet.Close
		}
	}
	if !gc.replyQueued && !gc.wrShut.Load() && gc.c.OutboundBuffered() == 0 {
		if shutdownWrite(gc.fd) != nil {
			return gnet.Close
		}
		gc.wrShut.Store(true)
	}
	return gnet.None
}

// replied runs on the event loop once a reply queued behind a worker's writes is written.
func (gc *gconn) replied(c gnet.Conn, err error) error {
	if err != nil || gc.closed.Load() {
		return nil
	}
	gc.replyQueued = false
	if gc.onLinger() == gnet.Close {
		return c.Close()
	}
	return nil
}

// endAfterResponse runs on the event loop when a worker ends the connection after its
// response and the loop may hold more of the client's bytes: when it does (a pipelined
// request), or discarded some past the bound on pipelined bytes (overflow), closing at once
// would reset the connection under the response, so it lingers. The connection stays busy
// until here, so that the sweep never takes it for an idle one.
func (gc *gconn) endAfterResponse(c gnet.Conn, err error) error {
	defer gc.busy.Store(false)
	switch {
	case gc.closed.Load():
		return nil
	case err != nil || (c.InboundBuffered() == 0 && !gc.overflow.Load()):
		return c.Close()
	case gc.linger(false) == gnet.Close:
		return c.Close()
	}
	return nil
}

// loopWrite writes p from the event loop, behind any response bytes still queued by a worker
// so that the order on the wire is kept. p must not change afterwards.
func (gc *gconn) loopWrite(p []byte) {
	if gc.queued.Load() == 0 {
		_, _ = gc.c.Write(p)
		return
	}
	_ = gc.c.AsyncWrite(p, nil)
}

func (gc *gconn) dispatch() {
	if gc.c.InboundBuffered() > 0 {
		gc.inputWaiting.Store(true) // a pipelined request is already here
	}
	if gc.e.set.UpstreamLoop && gc.startLoop() {
		return
	}
	// The worker writes straight to the socket only while the loop holds nothing for it: what
	// the loop wrote before (a response it relayed, a 100 Continue) may still be buffered.
	gc.outbound.Store(int64(gc.c.OutboundBuffered()))
	gc.answering = false
	gc.phase = phaseBusy
	gc.headSince.Store(0)
	gc.busy.Store(true)
	gc.e.counters.active.Add(1)
	// Pooled goroutines keep their grown stacks: a fresh goroutine per request would copy its
	// stack as the proxy path deepens.
	if workers.Submit(gc.serveFn) != nil {
		go gc.serve()
	}
}

// serve proxies gc.req; it runs on its own goroutine and must not touch loop-owned state
// other than the request.
func (gc *gconn) serve() {
	gc.finishServe(gc.guarded((*gconn).proxy), 0)
}

// guarded runs run, a request's handling on a worker goroutine, with a panic recovered
// (panicGuard): a client that got no byte of the response gets a 500 (as on engine fasthttp),
// the request gives back what it holds (pipeline.RequestCtx.FinishAfterPanic) and the
// connection closes. It returns run's keepAlive, false after a panic.
func (gc *gconn) guarded(run func(*gconn) bool) (keepAlive bool) {
	defer func() {
		if v := recover(); v != nil {
			gc.e.panics.report(gc.e.log, gc.e.set.Name, v)
			if !gc.answering {
				bp := pipeline.GetBuf()
				*bp = internalErrorResponse((*bp)[:0], &gc.rc.Req)
				_ = gc.Send(bp, 0, len(*bp))
			}
			gc.finishAfterPanic()
			keepAlive = false
		}
	}()
	return run(gc)
}

// finishAfterPanic gives back what a request whose handling panicked holds
// (pipeline.RequestCtx.FinishAfterPanic); after a panic of its own, the RequestCtx is left to
// the collector, its state unknown.
func (gc *gconn) finishAfterPanic() {
	if again := gc.rc.FinishAfterPanic(); again != nil {
		gc.e.panics.report(gc.e.log, gc.e.set.Name, again)
		gc.setCancel(pipeline.CancelHandle{})
		gc.rc = nil
	}
}

// internalErrorResponse appends the 500 that answers req when its handling failed before any
// byte of the response went out; the connection closes after it.
func internalErrorResponse(dst []byte, req *http1.Request) []byte {
	return pipeline.AppendErrorResponse(dst, pipeline.ErrInternal, 1, 1, false, string(req.Method) == "HEAD")
}

// finishServe ends the connection's request after its response: the connection waits for
// the next request, or closes once the response has left. It may wait (for a slow client's
// last bytes), except when keepAlive holds or the client is gone. now is the clock reading
// (unix ns) of the event that ended the response on an event loop; 0 reads the clock.
func (gc *gconn) finishServe(keepAlive bool, now int64) {
	gc.e.counters.active.Add(-1)
	gc.releaseCtx()
	if gc.queued.Load() == 0 {
		// Nothing is in flight on the loop: an idle connection does not keep the send queue
		// (a write callback that is still to run finds the queue empty either way).
		gc.sq.Store(nil)
	}
	if gc.overflow.Load() {
		keepAlive = false
	}
	if keepAlive && gc.e.draining.Load() {
		// The response's head went out before the drain began, without Connection: close, so
		// the client may reuse the connection, and one in a loop sends its next request at
		// once: closing now would lose that request (a POST is not sent again). The connection
		// waits for it as an idle one; it is served with Connection: close, or the sweep closes
		// the connection after freshDrainGrace.
		gc.fresh.Store(true)
	}
	if keepAlive && !gc.closed.Load() {
		if now == 0 {
			now = time.Now().UnixNano()
		}
		gc.idleSince.Store(now)
		gc.busy.Store(false)
		gc.finished.Store(true)
		if gc.inputWaiting.Load() {
			_ = gc.c.Wake(nil) // parse the pipelined bytes that arrived meanwhile
		}
		return
	}
	gc.flush()
	// The loop was woken while the request was in flight: only it can tell whether that brought
	// more of the client's bytes.
	if gc.inputWaiting.Load() && !gc.closed.Load() && gc.c.Wake(gc.onEnd) == nil {
		return
	}
	_ = gc.c.Close()
	gc.busy.Store(false)
}

// proxy runs the request through the pipeline and reports whether the client connection may
// stay open.
func (gc *gconn) proxy() bool {
	rc := gc.rc
	gc.e.pipe.Begin(rc)
	if rc.Upgraded() {
		gc.tunnel()
		rc.Finish()
		return false
	}
	if gc.e.draining.Load() {
		rc.CloseAfter() // the drain closes the connection after this response: say so
	}
	err := rc.WriteResponse(gc)
	rc.Finish()
	return err == nil && rc.KeepAlive()
}

// Send implements pipeline.Downstream: it queues (*bp)[lo:hi] for writing to the client and
// takes ownership of bp. It blocks while the client has more than sendHighWaterBytes pending
// (backpressure: the relay then stops reading the upstream); a client that reads nothing for
// ClientStallTimeout is closed meanwhile (stall.go).
func (gc *gconn) Send(bp *[]byte, lo, hi int) error {
	if gc.onLoop {
		if gc.closed.Load() {
			pipeline.ReleaseBuf(bp)
			return errClientGone
		}
		// On the event loop: gnet buffers what the socket does not take; the loop's relay
		// bounds that (gnet_loop.go).
		gc.answering = true
		_, err := gc.c.Write((*bp)[lo:hi])
		pipeline.ReleaseBuf(bp)
		if err != nil {
			return errClientGone
		}
		gc.noteStall(gc.c.OutboundBuffered())
		return nil
	}
	if lo == hi {
		// Nothing to write; an empty item would also make the queue look empty too early.
		pipeline.ReleaseBuf(bp)
		return nil
	}
	gc.answering = true
	if gc.queued.Load() == 0 && gc.outbound.Load() == 0 {
		n, err := gc.writeDirect((*bp)[lo:hi])
		if err != nil {
			pipeline.ReleaseBuf(bp)
			return err
		}
		if lo += n; lo == hi {
			pipeline.ReleaseBuf(bp)
			return nil
		}
		// The socket is full: queue the rest on the loop, which writes it when writable.
	}
	if err := gc.waitBelow(sendHighWaterBytes); err != nil {
		pipeline.ReleaseBuf(bp)
		return err
	}
	q := gc.queue()
	select {
	case q.sent <- sendItem{bp, hi - lo}:
	default:
		// maxSendQueue writes in flight: wait for the loop to take one.
		select {
		case q.sent <- sendItem{bp, hi - lo}:
		case <-gc.closedChan():
			pipeline.ReleaseBuf(bp)
			return errClientGone
		}
	}
	gc.queued.Add(int64(hi - lo))
	if err := gc.c.AsyncWrite((*bp)[lo:hi], gc.onWritten); err != nil {
		return errClientGone
	}
	return nil
}

// writeDirect writes p to the client socket from the calling goroutine until the socket
// would block; it returns how much was written.
func (gc *gconn) writeDirect(p []byte) (int, error) {
	gc.writeMu.Lock()
	defer gc.writeMu.Unlock()
	if gc.fdClosed {
		return 0, errClientGone
	}
	done := 0
	for done < len(p) {
		n, err := unix.Write(gc.fd, p[done:])
		if n > 0 {
			done += n
		}
		switch {
		case err == nil:
			if n == 0 {
				return done, nil
			}
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return done, nil
		default:
			_ = gc.c.Close()
			return done, errClientGone
		}
	}
	return done, nil
}

// written runs on the event loop after each AsyncWrite: the bytes are in the socket or in the
// loop's outbound buffer, so the buffer can go back to its pool.
func (gc *gconn) written(c gnet.Conn, _ error) error {
	if c != nil {
		// Before queued falls: a worker that finds nothing queued must also find what the
		// loop buffers, or its direct write would go ahead of those bytes.
		gc.outbound.Store(int64(c.OutboundBuffered()))
	}
	if q := gc.sq.Load(); q != nil {
		select {
		case it := <-q.sent:
			gc.queued.Add(-int64(it.n))
			pipeline.ReleaseBuf(it.bp)
		default:
		}
	}
	gc.noteOutbound(c)
	return nil
}

func (gc *gconn) probed(c gnet.Conn, _ error) error {
	gc.noteOutbound(c)
	return nil
}

func (gc *gconn) noteOutbound(c gnet.Conn) {
	if c != nil {
		out := c.OutboundBuffered()
		gc.outbound.Store(int64(out))
		gc.noteStall(out)
	}
	if q := gc.sq.Load(); q != nil {
		select {
		case q.drained <- struct{}{}:
		default:
		}
	}
}

// probeInterval is how often a blocked sender re-reads the loop's outbound buffer size: gnet
// has no writable callback.
const probeInterval = 5 * time.Millisecond

func (gc *gconn) pending() int64 { return gc.queued.Load() + gc.outbound.Load() }

// waitBelow blocks until fewer than limit bytes are pending for the client, or the client is
// gone (a client that takes nothing is closed by the stall clock, stall.go).
func (gc *gconn) waitBelow(limit int64) error {
	if gc.closed.Load() {
		return errClientGone
	}
	if gc.pending() < limit || (limit == 0 && gc.pending() == 0) {
		return nil
	}
	// The loop signals on the queue's drained channel only once the queue exists: look again
	// after making it, so that a signal sent before is not waited for.
	q := gc.queue()
	closed := gc.closedChan()
	if p := gc.pending(); p < limit || (limit == 0 && p == 0) {
		return nil
	}
	t := time.NewTimer(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-closed:
			return errClientGone
		case <-q.drained:
		case <-t.C:
			_ = gc.c.Wake(gc.onProbe)
			t.Reset(probeInterval)
		}
		p := gc.pending()
		if p < limit || (limit == 0 && p == 0) {
			return nil
		}
	}
}

// flush waits until every queued response byte has left for the socket, so that closing the
// connection does not cut the response short.
func (gc *gconn) flush() {
	_ = gc.c.Wake(gc.onProbe)
	_ = gc.waitBelow(0)
}

// workers runs the pipeline side of requests (gnet's ants-based goroutine pool).
var workers = goroutine.Default()
