package ingress

import (
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/pool/goroutine"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/proxy"
	"github.com/sluice-gw/sluice/pool"
)

// Connection phases, owned by the event loop.
const (
	phaseHead = iota // waiting for (the rest of) a request head
	phaseBody        // reading a request body
	phaseBusy        // a request is being proxied; later pipelined bytes wait in the inbound buffer
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

// gconn is the state of one client connection on the gnet engine.
type gconn struct {
	e  *GnetEngine
	c  gnet.Conn
	ip []byte

	// Owned by the event loop (and by the worker while phase == phaseBusy).
	phase        int
	req          http1.Request
	bodyLeft     int64
	dec          http1.ChunkedDecoder
	continueSent bool

	// Shared with the worker goroutine and the deadline sweep.
	busy         atomic.Bool  // a request is in flight
	finished     atomic.Bool  // the worker is done; the loop may parse the next request
	inputWaiting atomic.Bool  // the loop holds unparsed bytes that arrived while busy
	headSince    atomic.Int64 // unix ns when the current request's first byte arrived; 0 when idle or busy
	idleSince    atomic.Int64 // unix ns when the connection last became idle
	closed       atomic.Bool
	closedCh     chan struct{}
	closeOnce    sync.Once
	xMu          sync.Mutex       // guards xh and xSet
	xh           pool.AbortHandle // aborts the upstream exchange in flight when the client leaves
	xSet         bool

	// Response writes: buffers queued to AsyncWrite, released in order by the write callback.
	sent      chan sendItem
	queued    atomic.Int64 // bytes handed to AsyncWrite and not yet written to the socket or outbound buffer
	outbound  atomic.Int64 // the loop's outbound buffer size at the last callback
	drained   chan struct{}
	onWritten gnet.AsyncCallback
	onProbe   gnet.AsyncCallback
	serveFn   func()

	headBuf []byte // upstream request head, reused

	// Direct writes: while nothing is queued on the loop, the worker writes to the socket
	// itself, saving the loop wake-up per write. writeMu keeps the fd open during such a write:
	// gnet calls OnClose before it closes the fd, and OnClose takes writeMu.
	fd       int
	writeMu  sync.Mutex
	fdClosed bool
}

func newGconn(e *GnetEngine, c gnet.Conn) *gconn {
	gc := &gconn{e: e, c: c, closedCh: make(chan struct{}), sent: make(chan sendItem, maxSendQueue), drained: make(chan struct{}, 1)}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		gc.ip = []byte(a.IP.String())
	}
	gc.fd = c.Fd()
	gc.serveFn = gc.serve
	gc.onWritten = gc.written
	gc.onProbe = gc.probed
	gc.idleSince.Store(time.Now().UnixNano())
	return gc
}

func (gc *gconn) markClosed() {
	gc.writeMu.Lock()
	gc.fdClosed = true
	gc.writeMu.Unlock()
	gc.closeOnce.Do(func() {
		gc.closed.Store(true)
		close(gc.closedCh)
		gc.xMu.Lock()
		if gc.xSet {
			gc.xh.Abort()
		}
		gc.xMu.Unlock()
	})
}

// watch arms the abort of x on client disconnect; it reports false (and aborts) when the
// client has already left.
func (gc *gconn) watch(x *pool.Exchange) bool {
	gc.xMu.Lock()
	gc.xh, gc.xSet = x.AbortHandle(), true
	gc.xMu.Unlock()
	if gc.closed.Load() {
		x.Abort()
		return false
	}
	return true
}

func (gc *gconn) unwatch() {
	gc.xMu.Lock()
	gc.xSet = false
	gc.xMu.Unlock()
}

// onTraffic runs on the event loop: it advances the request parser over the buffered bytes
// and dispatches a complete request to a worker goroutine.
func (gc *gconn) onTraffic() gnet.Action {
	c := gc.c
	lim := &gc.e.set.Limits
	for {
		switch gc.phase {
		case phaseBusy:
			if !gc.finished.Load() {
				// Pipelined bytes wait until the response in flight is done, but not without bound.
				if int64(c.InboundBuffered()) > int64(lim.HeaderBytes())+lim.BodyBytes() {
					return gnet.Close
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
			gc.phase = phaseHead
		case phaseHead:
			buf, _ := c.Peek(-1)
			if len(buf) == 0 {
				return gnet.None
			}
			if gc.headSince.Load() == 0 {
				gc.headSince.Store(time.Now().UnixNano())
			}
			skip, n := http1.FindHeadEnd(buf)
			if n < 0 {
				if err := http1.CheckPartialHead(len(buf)-skip, lim); err != nil && err != http1.ErrNeedMore {
					return gc.reject(err)
				}
				return gnet.None
			}
			gc.req.Reset()
			if err := gc.req.ParseRequestHead(buf[skip:skip+n], lim); err != nil {
				return gc.reject(err)
			}
			_, _ = c.Discard(skip + n)
			gc.continueSent = false
			switch {
			case gc.req.Chunked:
				gc.dec.Reset()
				gc.dec.MaxBodyBytes = lim.BodyBytes()
				gc.phase = phaseBody
			case gc.req.ContentLength > 0:
				if gc.req.ContentLength > lim.BodyBytes() {
					return gc.reject(&http1.Error{Status: 413, Msg: "request body larger than the limit"})
				}
				gc.bodyLeft = gc.req.ContentLength
				gc.phase = phaseBody
			default:
				gc.dispatch()
				return gnet.None
			}
		case phaseBody:
			buf, _ := c.Peek(-1)
			done, err := gc.readBody(buf)
			if err != nil {
				return gc.reject(err)
			}
			if !done {
				if gc.req.ExpectContinue && !gc.continueSent && gc.req.Minor >= 1 {
					gc.continueSent = true
					gc.loopWrite(continue100, false)
				}
				return gnet.None
			}
			gc.dispatch()
			return gnet.None
		}
	}
}

// readBody moves body bytes from buf into the request and discards them from the inbound
// buffer; it reports whether the body is complete.
func (gc *gconn) readBody(buf []byte) (bool, error) {
	req := &gc.req
	if !req.Chunked {
		take := int64(len(buf))
		if take > gc.bodyLeft {
			take = gc.bodyLeft
		}
		req.Body = append(req.Body, buf[:take]...)
		_, _ = gc.c.Discard(int(take))
		gc.bodyLeft -= take
		return gc.bodyLeft == 0, nil
	}
	off := 0
	for off < len(buf) && !gc.dec.Done() {
		data, k, err := gc.dec.Next(buf[off:])
		if err != nil {
			return false, err
		}
		req.Body = append(req.Body, data...)
		if int64(len(req.Body)) > gc.e.set.Limits.BodyBytes() {
			return false, &http1.Error{Status: 413, Msg: "request body larger than the limit"}
		}
		off += k
		if k == 0 {
			break
		}
	}
	_, _ = gc.c.Discard(off)
	return gc.dec.Done(), nil
}

// reject answers a request that cannot be parsed and closes the connection (RFC 9112 §11.2:
// after a framing error the rest of the stream cannot be trusted).
func (gc *gconn) reject(err error) gnet.Action {
	ge := proxy.FramingGatewayError(err)
	gc.e.m.GatewayError(ge.Status)
	if gc.queued.Load() > 0 {
		// The previous response is still queued for a slow client: the error goes behind it,
		// and the connection closes once both are written.
		gc.loopWrite(proxy.AppendErrorResponse(nil, ge, 1, 1, false), true)
		return gnet.None
	}
	bp := getBuf()
	*bp = proxy.AppendErrorResponse((*bp)[:0], ge, 1, 1, false)
	_, _ = gc.c.Write(*bp)
	putBuf(bp)
	return gnet.Close
}

// loopWrite writes p from the event loop, behind any response bytes still queued by a worker
// so that the order on the wire is kept; closeAfter closes the connection once p is written.
// p must not change afterwards.
func (gc *gconn) loopWrite(p []byte, closeAfter bool) {
	if gc.queued.Load() == 0 {
		_, _ = gc.c.Write(p)
		if closeAfter {
			_ = gc.c.Close()
		}
		return
	}
	var cb gnet.AsyncCallback
	if closeAfter {
		cb = func(c gnet.Conn, _ error) error { return c.Close() }
	}
	_ = gc.c.AsyncWrite(p, cb)
}

func (gc *gconn) dispatch() {
	if gc.c.InboundBuffered() > 0 {
		gc.inputWaiting.Store(true) // a pipelined request is already here
	}
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
	keepAlive := gc.proxy()
	gc.e.counters.active.Add(-1)
	if cap(gc.req.Body) > maxKeptBodyBytes {
		gc.req.Body = nil // an idle connection does not keep a large body's buffer
	}
	if gc.e.draining.Load() {
		keepAlive = false
	}
	if keepAlive && !gc.closed.Load() {
		gc.idleSince.Store(time.Now().UnixNano())
		gc.busy.Store(false)
		gc.finished.Store(true)
		if gc.inputWaiting.Load() {
			_ = gc.c.Wake(nil) // parse the pipelined bytes that arrived meanwhile
		}
		return
	}
	gc.flush()
	_ = gc.c.Close()
	gc.busy.Store(false)
}

// proxy runs one exchange and reports whether the client connection may stay open.
func (gc *gconn) proxy() bool {
	req := &gc.req
	keepAlive := req.KeepAlive
	start := time.Now()
	gc.e.m.Request()
	rt := gc.e.res.Resolve(gc.e.set.Name, req)
	if rt == nil {
		gc.e.m.GatewayError(404)
		return gc.sendError(proxy.ErrNoRoute, keepAlive)
	}
	b := rt.Service.Pick()
	if b == nil {
		gc.e.m.GatewayError(503)
		rt.M.Response(503, start, 0)
		return gc.sendError(proxy.ErrNoBackend, keepAlive)
	}
	defer b.Release()
	gc.headBuf = proxy.AppendUpstreamHead(gc.headBuf[:0], req, rt, b, proxy.ClientInfo{IP: gc.ip})
	x := pool.AcquireExchange()
	defer pool.ReleaseExchange(x)
	if !gc.watch(x) {
		return false
	}
	defer gc.unwatch()
	isHEAD := len(req.Method) == 4 && string(req.Method) == "HEAD"
	if err := x.RoundTrip(b.Pool, gc.headBuf, req.Body, isHEAD); err != nil {
		if gc.closed.Load() {
			rt.M.Canceled()
			return false
		}
		ge := proxy.UpstreamGatewayError(err)
		rt.M.UpstreamError(proxy.UpstreamReason(err))
		rt.M.Response(ge.Status, start, 0)
		gc.e.elog.upstreamFailed(rt.Name, b.URL, "response head", err)
		return gc.sendError(ge, keepAlive)
	}
	if x.Resp.Status == 101 {
		// No upgrade was asked for (WebSocket support comes later): a protocol error.
		rt.M.UpstreamError(metrics.ReasonProtocol)
		rt.M.Response(502, start, 0)
		return gc.sendError(proxy.ErrUnexpectedUpgrade, false)
	}
	mode, keepAlive := proxy.PlanResponse(&x.Resp, isHEAD, req)
	sseStream := proxy.IsEventStream(&x.Resp)
	if sseStream && mode == proxy.OutChunkedRaw {
		// Frame SSE chunks ourselves so that a mid-stream failure can still end the client's
		// stream on a chunk and event boundary (DESIGN.md §5).
		mode = proxy.OutChunk
	}
	hb := getBuf()
	*hb = proxy.AppendClientHead((*hb)[:0], &x.Resp, req, mode, keepAlive)
	var early int64
	if k := x.Buffered(); k > 0 && mode.Raw() && k <= 64<<10 {
		// The body (or its start) came with the head: one write for both saves a syscall and a
		// wake-up of the client per short response.
		h := len(*hb)
		*hb = slices.Grow(*hb, k)[:h+k]
		n, err := x.ReadBody((*hb)[h:], true)
		*hb = (*hb)[:h+n]
		early = int64(n)
		if err != nil && !errors.Is(err, io.EOF) {
			*hb = (*hb)[:h]
		}
	}
	if err := gc.send(hb, 0, len(*hb)); err != nil {
		rt.M.Canceled()
		return false
	}
	if mode == proxy.OutNone {
		rt.M.Response(x.Resp.Status, start, 0)
		return keepAlive
	}
	n, err := gc.relay(x, mode, sseStream, rt.M, start)
	n += early
	switch {
	case err == nil:
		rt.M.Response(x.Resp.Status, start, n)
		return keepAlive
	case gc.closed.Load():
		rt.M.Canceled()
	default:
		rt.M.UpstreamError(metrics.ReasonStream)
		rt.M.Response(x.Resp.Status, start, n)
		gc.e.elog.upstreamFailed(rt.Name, b.URL, "body", err)
	}
	return false
}

// chunkHeadroom is the space kept before each relay read for a chunk-size line.
const chunkHeadroom = 18

// relay copies the response body from the upstream to the client, one AsyncWrite per upstream
// read (zero buffering), stopping the upstream reads while the client is slow.
// It returns the body bytes relayed; streamed responses (not Content-Length ones) feed the TTFT
// and inter-token latency metrics, one observation per upstream read.
func (gc *gconn) relay(x *pool.Exchange, mode proxy.OutMode, sseStream bool, m *metrics.Route, start time.Time) (int64, error) {
	chunked := mode == proxy.OutChunk
	streamed := mode != proxy.OutLength
	tail := [2]byte{'\n', '\n'} // last two payload bytes sent: is the client at an SSE event boundary?
	var total int64
	var last time.Time
	for {
		bp := getRelayBuf()
		b := *bp
		n, err := x.ReadBody(b[chunkHeadroom:len(b)-2], mode.Raw())
		if n > 0 {
			total += int64(n)
			if streamed {
				now := time.Now()
				if last.IsZero() {
					m.FirstByte(start)
				} else {
					m.Gap(now.Sub(last))
				}
				last = now
			}
			lo, hi := chunkHeadroom, chunkHeadroom+n
			if n >= 2 {
				tail[0], tail[1] = b[hi-2], b[hi-1]
			} else {
				tail[0], tail[1] = tail[1], b[hi-1]
			}
			if chunked {
				lo = frameChunk(b, lo, n)
				b[hi], b[hi+1] = '\r', '\n'
				hi += 2
			}
			if serr := gc.send(bp, lo, hi); serr != nil {
				return total, serr
			}
		} else {
			putRelayBuf(bp)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			if chunked {
				return total, gc.sendBytes(http1.LastChunk)
			}
			return total, nil
		default:
			if gc.closed.Load() {
				return total, errClientGone
			}
			// The upstream failed mid-body. An SSE client at an event boundary gets an error
			// event and a clean end of the chunked body, never [DONE]; anything else is cut off
			// by closing the connection so the client sees the truncation.
			if sseStream && chunked && tail == [2]byte{'\n', '\n'} {
				var evb [512]byte
				body := proxy.AppendSSEError(evb[:0], proxy.ErrUpstreamStream)
				ev := getBuf()
				out := strconv.AppendInt((*ev)[:0], int64(len(body)), 16)
				out = append(out, "\r\n"...)
				out = append(out, body...)
				*ev = append(out, "\r\n0\r\n\r\n"...)
				_ = gc.send(ev, 0, len(*ev))
			}
			return total, err
		}
	}
}

// frameChunk writes the chunk-size line for n payload bytes ending just before b[lo] and
// returns the new start (RFC 9112 §7.1).
func frameChunk(b []byte, lo, n int) int {
	lo -= 2
	b[lo], b[lo+1] = '\r', '\n'
	for {
		lo--
		b[lo] = "0123456789abcdef"[n&0xf]
		n >>= 4
		if n == 0 {
			return lo
		}
	}
}

// sendError writes a gateway error response and reports whether the connection stays open.
func (gc *gconn) sendError(ge *proxy.GatewayError, keepAlive bool) bool {
	bp := getBuf()
	*bp = proxy.AppendErrorResponse((*bp)[:0], ge, gc.req.Major, gc.req.Minor, keepAlive)
	if gc.send(bp, 0, len(*bp)) != nil {
		return false
	}
	return keepAlive
}

func (gc *gconn) sendBytes(p []byte) error {
	bp := getBuf()
	*bp = append((*bp)[:0], p...)
	return gc.send(bp, 0, len(*bp))
}

// send queues (*bp)[lo:hi] for writing to the client and takes ownership of bp. It blocks while
// the client has more than sendHighWaterBytes pending (backpressure: the relay then stops
// reading the upstream), and closes a client that reads nothing for ClientStallTimeout.
func (gc *gconn) send(bp *[]byte, lo, hi int) error {
	if gc.queued.Load() == 0 && gc.outbound.Load() == 0 {
		n, err := gc.writeDirect((*bp)[lo:hi])
		if err != nil {
			putBufAny(bp)
			return err
		}
		if lo += n; lo == hi {
			putBufAny(bp)
			return nil
		}
		// The socket is full: queue the rest on the loop, which writes it when writable.
	}
	if err := gc.waitBelow(sendHighWaterBytes); err != nil {
		putBufAny(bp)
		return err
	}
	select {
	case gc.sent <- sendItem{bp, hi - lo}:
	case <-gc.closedCh:
		putBufAny(bp)
		return errClientGone
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
	select {
	case it := <-gc.sent:
		gc.queued.Add(-int64(it.n))
		putBufAny(it.bp)
	default:
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
		gc.outbound.Store(int64(c.OutboundBuffered()))
	}
	select {
	case gc.drained <- struct{}{}:
	default:
	}
}

// probeInterval is how often a blocked sender re-reads the loop's outbound buffer size: gnet
// has no writable callback.
const probeInterval = 5 * time.Millisecond

func (gc *gconn) pending() int64 { return gc.queued.Load() + gc.outbound.Load() }

// waitBelow blocks until fewer than limit bytes are pending for the client.
func (gc *gconn) waitBelow(limit int64) error {
	if gc.closed.Load() {
		return errClientGone
	}
	if gc.pending() < limit || (limit == 0 && gc.pending() == 0) {
		return nil
	}
	start := time.Now()
	t := time.NewTimer(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-gc.closedCh:
			return errClientGone
		case <-gc.drained:
		case <-t.C:
			_ = gc.c.Wake(gc.onProbe)
			t.Reset(probeInterval)
		}
		p := gc.pending()
		if p < limit || (limit == 0 && p == 0) {
			return nil
		}
		if time.Since(start) > gc.e.set.ClientStallTimeout {
			_ = gc.c.Close()
			return errClientGone
		}
	}
}

// flush waits until every queued response byte has left for the socket, so that closing the
// connection does not cut the response short.
func (gc *gconn) flush() {
	_ = gc.c.Wake(gc.onProbe)
	_ = gc.waitBelow(0)
}

// workers runs the proxy side of requests (gnet's ants-based goroutine pool).
var workers = goroutine.Default()

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
	relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufBytes+chunkHeadroom+2); return &b }}
)

func getBuf() *[]byte { return smallBufs.Get().(*[]byte) }
func putBuf(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		*bp = (*bp)[:0]
		smallBufs.Put(bp)
	}
}
func getRelayBuf() *[]byte { return relayBufs.Get().(*[]byte) }
func putRelayBuf(bp *[]byte) {
	*bp = (*bp)[:cap(*bp)]
	relayBufs.Put(bp)
}

// putBufAny returns bp to the pool it came from, told apart by capacity.
func putBufAny(bp *[]byte) {
	if cap(*bp) == relayBufBytes+chunkHeadroom+2 {
		putRelayBuf(bp)
		return
	}
	putBuf(bp)
}
