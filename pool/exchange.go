package pool

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
)

// Exchange is one request/response on an upstream connection. Acquire it with AcquireExchange,
// run RoundTrip once, read the body with ReadBody, and release it with ReleaseExchange (pooled
// object: zero allocations per exchange once warm). RoundTrip and ReadBody belong to one
// goroutine; Abort (or an AbortHandle) may be called from any goroutine.
type Exchange struct {
	// Idempotent allows RoundTrip to send the request again on a fresh connection after a
	// reused one closed without a response byte, though the upstream may have received it
	// (RFC 9112 §9.3.1: only idempotent requests are retried automatically). Set it before
	// RoundTrip; a request that never fully left is retried either way.
	Idempotent bool
	// Resp is the final (non-1xx, or 101) response head; valid after RoundTrip returns nil and
	// until ReleaseExchange. Its slices point into Resp's own buffer.
	Resp http1.Response

	mu         sync.Mutex // guards c (against Abort), seq, released, dialCancel
	seq        uint64     // bumped by ReleaseExchange; AbortHandles from older uses are no-ops
	released   bool
	c          *conn
	dialCancel context.CancelFunc
	aborted    atomic.Bool

	p       *Pool
	hbuf    []byte // response head buffer; hbuf[lo:hi] are received bytes not yet consumed
	lo, hi  int
	mode    http1.BodyMode
	remain  int64         // BodyLength: body bytes still to read
	armed   time.Time     // when the stream idle deadline was last set (ReadBody)
	dialed  time.Duration // how long the last dial of this exchange took; 0 when none
	dec     http1.ChunkedDecoder
	framing int64          // BodyChunked: chunk framing among the bytes raw ReadBody calls returned
	done    bool           // body fully read (io.EOF reached or BodyNone)
	broken  bool           // conn must not be reused (until-close body, extra bytes, upgrade, error)
	err     error          // sticky error of RoundTrip/ReadBody
	rerr    error          // read error that arrived together with bytes, reported on the next read
	got     bool           // a response byte arrived on the current conn (readHead resumes on a loop)
	scan    http1.HeadScan // where the search for the end of the response head resumes (hbuf[lo:])
	interim int            // 1xx interim responses skipped before the final head (maxInterimResponses)
	lc      conn           // the conn of a loop-driven exchange (AttachLoop), kept to save an allocation
}

var exchangePool = sync.Pool{New: func() any {
	return &Exchange{hbuf: make([]byte, headBufInitBytes)}
}}

// AcquireExchange returns an empty Exchange from a sync.Pool.
func AcquireExchange() *Exchange {
	x := exchangePool.Get().(*Exchange)
	x.mu.Lock()
	x.released = false
	x.mu.Unlock()
	return x
}

// ReleaseExchange returns the upstream conn to its pool when the response was keep-alive
// (RFC 9112 §9.3), its body was fully read (ReadBody returned io.EOF, or there was none) and no
// error or Abort happened; otherwise it closes the conn. x must not be used afterwards; Abort
// calls racing with or following the release are no-ops.
func ReleaseExchange(x *Exchange) {
	x.mu.Lock()
	c := x.c
	x.c = nil
	x.seq++
	x.released = true
	aborted := x.aborted.Load()
	x.aborted.Store(false)
	x.dialCancel = nil
	x.mu.Unlock()
	if c != nil {
		reusable := !aborted && x.done && !x.broken && x.err == nil && x.rerr == nil &&
			x.lo == x.hi && x.Resp.KeepAlive
		switch {
		case c.release != nil:
			c.release(reusable) // a loop-driven conn goes back to its loop
			x.lc = conn{}
			x.p.active.Add(-1)
		case reusable:
			x.p.put(c)
		default:
			x.p.discard(c)
		}
	}
	x.Resp.Reset()
	x.p = nil
	x.lo, x.hi = 0, 0
	x.mode = http1.BodyNone
	x.remain = 0
	x.armed = time.Time{}
	x.dialed = 0
	x.dec.Reset()
	x.framing = 0
	x.done, x.broken, x.got = false, false, false
	x.scan.Reset()
	x.interim = 0
	x.err, x.rerr = nil, nil
	x.Idempotent = false
	exchangePool.Put(x)
}

// Abort closes the upstream connection at once (the upstream sees FIN/RST immediately, no TLS
// close_notify), or cancels a dial in progress. A blocked or later RoundTrip/ReadBody returns
// ErrAborted. Safe from any goroutine, idempotent, and a no-op after ReleaseExchange. A
// goroutine that may outlive the exchange (a client-disconnect callback) should hold an
// AbortHandle instead of x, so that it cannot abort a later reuse of the pooled object.
func (x *Exchange) Abort() {
	x.mu.Lock()
	if !x.released {
		x.abortLocked()
	}
	x.mu.Unlock()
}

func (x *Exchange) abortLocked() {
	if x.aborted.Swap(true) {
		return
	}
	if x.c != nil {
		x.c.close()
	}
	if x.dialCancel != nil {
		x.dialCancel()
	}
}

// AbortHandle aborts one use of a pooled Exchange: it is a no-op once that use was released,
// even if the Exchange object was acquired again. A value (no allocation); the zero value is a
// no-op.
type AbortHandle struct {
	x   *Exchange
	seq uint64
}

// AbortHandle returns a handle that aborts this use of x (see Exchange.Abort).
func (x *Exchange) AbortHandle() AbortHandle {
	x.mu.Lock()
	h := AbortHandle{x: x, seq: x.seq}
	x.mu.Unlock()
	return h
}

// Abort aborts the exchange if it is still the same use (see Exchange.Abort).
func (h AbortHandle) Abort() {
	if h.x == nil {
		return
	}
	h.x.mu.Lock()
	if h.x.seq == h.seq && !h.x.released {
		h.x.abortLocked()
	}
	h.x.mu.Unlock()
}

// Aborted reports whether Abort was called on this use of x.
func (x *Exchange) Aborted() bool { return x.aborted.Load() }

// BodyMode returns how the response body is delimited (RFC 9112 §6.3), valid after RoundTrip.
// A 101 Switching Protocols response reports BodyUntilClose (the upgraded stream).
func (x *Exchange) BodyMode() http1.BodyMode { return x.mode }

// ConnectTime returns how long opening the upstream connection took (TCP connect, plus the
// TLS handshake for https) when RoundTrip opened one (the later, if it opened two); 0 when it
// reused a pooled connection or no dial succeeded. Valid after RoundTrip, until
// ReleaseExchange.
func (x *Exchange) ConnectTime() time.Duration { return x.dialed }

// Done reports whether the response body has been read to its end (or there was none).
func (x *Exchange) Done() bool { return x.done }

// RoundTrip takes a conn from p (the most recently used idle one, or a new dial), writes head
// (the full serialized request head, built by the caller) and body, and reads the response head
// into x.Resp, skipping 1xx interim responses except 101 (RFC 9110 §15.2). Call it once per
// acquired Exchange.
//
// If a reused conn fails before the request fully left (a write error) it retries once on a
// freshly dialled conn: the keep-alive race, where the upstream closed the idle conn just as it
// was reused. After the request left, an EOF or reset before any response byte is retried the
// same way only when x.Idempotent: the upstream may have received and acted on it. A fresh conn
// that fails is not retried.
//
// Errors wrap ErrDial (502), ErrTimeout (504, Options.ResponseHeaderTimeout), ErrUpstreamProto
// (502, malformed or oversized response head), ErrAborted (Abort was called) or
// ErrUpstreamClosed (502).
func (x *Exchange) RoundTrip(p *Pool, head, body []byte, isHEAD bool) error {
	if x.p != nil {
		return errRoundTripTwice // the conn of the first one stays attached and is released
	}
	x.p = p
	if x.aborted.Load() {
		return x.fail(ErrAborted)
	}
	reused, err := x.attach(p, false)
	if err != nil {
		return x.fail(err)
	}
	retry, err := x.send(head, body)
	if err != nil && retry && reused && !x.aborted.Load() {
		x.detach()
		if _, err = x.attach(p, true); err != nil {
			return x.fail(err)
		}
		_, err = x.send(head, body)
	}
	if err != nil {
		return x.fail(err)
	}
	x.setMode(isHEAD)
	return nil
}

// setMode records how the body of the response head just read is delimited.
func (x *Exchange) setMode(isHEAD bool) {
	x.mode = x.Resp.BodyMode(isHEAD)
	switch {
	case x.Resp.Status == 101:
		x.mode = http1.BodyUntilClose
		x.broken = true
	case x.mode == http1.BodyNone:
		x.done = true
	case x.mode == http1.BodyLength:
		x.remain = x.Resp.ContentLength
		if x.remain == 0 {
			x.done = true
		}
	case x.mode == http1.BodyChunked:
		x.dec.Reset()
		x.framing = 0
	case x.mode == http1.BodyUntilClose:
		x.broken = true
	}
}

func (x *Exchange) fail(err error) error {
	x.err = err
	x.broken = true
	return err
}

// attach puts a conn on x: a pooled one unless fresh, else a new dial.
func (x *Exchange) attach(p *Pool, fresh bool) (reused bool, err error) {
	var c *conn
	if !fresh {
		c = p.getIdle()
	}
	if c == nil {
		if c, err = x.dial(p); err != nil {
			return false, err
		}
	} else {
		reused = true
	}
	x.mu.Lock()
	if x.aborted.Load() {
		x.mu.Unlock()
		p.discard(c)
		return reused, ErrAborted
	}
	x.c = c
	x.mu.Unlock()
	x.lo, x.hi = 0, 0
	x.rerr = nil
	x.got = false
	x.scan.Reset()
	x.interim = 0
	return reused, nil
}

// detach closes x's conn (after a failure on it).
func (x *Exchange) detach() {
	x.mu.Lock()
	c := x.c
	x.c = nil
	x.mu.Unlock()
	if c != nil {
		x.p.discard(c)
	}
}

func (x *Exchange) dial(p *Pool) (*conn, error) {
	if p.isClosed() {
		return nil, &UpstreamError{Addr: p.o.Addr, Kind: ErrDial, Err: ErrPoolClosed}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.o.DialTimeout)
	defer cancel()
	x.mu.Lock()
	if x.aborted.Load() {
		x.mu.Unlock()
		return nil, ErrAborted
	}
	x.dialCancel = cancel
	x.mu.Unlock()
	start := time.Now()
	c, err := p.dial(ctx)
	x.mu.Lock()
	x.dialCancel = nil
	x.mu.Unlock()
	if err != nil {
		if x.aborted.Load() {
			return nil, ErrAborted
		}
		p.dialFailed(err)
		return nil, &UpstreamError{Addr: p.o.Addr, Kind: ErrDial, Err: err}
	}
	x.dialed = time.Since(start)
	return c, nil
}

// smallWriteBytes is the largest request written without a write deadline: far below the
// kernel's minimum socket send buffer on an idle keep-alive connection.
const smallWriteBytes = 16 << 10

// send writes the request and reads the response head. retry reports a failure that may be the
// keep-alive race: a write error, or EOF/reset before any response byte.
func (x *Exchange) send(head, body []byte) (retry bool, err error) {
	c := x.c
	// A request that fits in the socket buffer cannot stall on write: skip the deadline (a timer
	// update per request). A larger one gets one, cleared again after the write.
	big := len(head)+len(body) > smallWriteBytes
	if big {
		if err := c.nc.SetWriteDeadline(time.Now().Add(x.p.o.StreamIdleTimeout)); err != nil {
			return false, x.ioErr(err, "set write deadline")
		}
	}
	werr := x.write(c, head, body)
	if big && werr == nil {
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	if werr != nil {
		if isTimeout(werr) || x.aborted.Load() {
			return false, x.ioErr(werr, opWriteRequest)
		}
		// The upstream may have answered early and closed without reading the whole body
		// (a 413 or 401 before a large body, RFC 9112 §9.6): relay that response if it is there.
		_ = c.nc.SetReadDeadline(time.Now().Add(min(x.p.o.ResponseHeaderTimeout, earlyResponseWait)))
		if _, herr := x.readHead(c); herr == nil {
			x.broken = true // the request was not fully sent: never reuse the conn
			return false, nil
		}
		return true, x.ioErr(werr, opWriteRequest)
	}
	if err := c.nc.SetReadDeadline(time.Now().Add(x.p.o.ResponseHeaderTimeout)); err != nil {
		return false, x.ioErr(err, "set read deadline")
	}
	return x.readHead(c)
}

// write sends head and body in one write when they fit a pooled 32 KiB buffer.
func (x *Exchange) write(c *conn, head, body []byte) error {
	if len(body) == 0 {
		_, err := c.nc.Write(head)
		return err
	}
	if len(head)+len(body) <= BufSize {
		b := GetBuf()
		n := copy(*b, head)
		n += copy((*b)[n:], body)
		_, err := c.nc.Write((*b)[:n])
		PutBuf(b)
		return err
	}
	if _, err := c.nc.Write(head); err != nil {
		return err
	}
	_, err := c.nc.Write(body)
	return err
}

// readHead reads until a final response head is parsed into x.Resp; body bytes read with it
// stay in hbuf[lo:hi].
func (x *Exchange) readHead(c *conn) (retry bool, err error) {
	lim := x.p.o.Limits
	maxBuf := x.p.o.maxHeadBuf()
	// The scan resumes where it stopped when more bytes arrive, in this call or, on a loop,
	// in the next (x.scan); its offsets are relative to hbuf[lo:], which compaction and growth
	// keep.
	for {
		if x.hi > x.lo {
			skip, n := x.scan.Find(x.hbuf[x.lo:x.hi])
			if n >= 0 {
				x.scan.Reset()
				start := x.lo + skip
				x.Resp.Reset()
				if perr := x.Resp.ParseResponseHead(x.hbuf[start:start+n], lim); perr != nil {
					return false, x.protoErr(perr, opParseHead)
				}
				x.lo = start + n
				if x.lo == x.hi {
					x.lo, x.hi = 0, 0
				}
				if st := x.Resp.Status; st >= 100 && st < 200 && st != 101 {
					x.interim++
					if x.interim > maxInterimResponses {
						return false, x.protoErr(nil, "too many 1xx interim responses")
					}
					continue
				}
				return false, nil
			}
		}
		// Need more bytes: compact, then grow up to the head size limit.
		if x.lo > 0 {
			x.hi = copy(x.hbuf, x.hbuf[x.lo:x.hi])
			x.lo = 0
		}
		if x.hi == len(x.hbuf) {
			if len(x.hbuf) >= maxBuf {
				return false, x.protoErr(nil, fmt.Sprintf("response head larger than %d bytes", maxBuf))
			}
			nb := make([]byte, min(2*len(x.hbuf), maxBuf))
			copy(nb, x.hbuf[:x.hi])
			x.hbuf = nb
		}
		if x.rerr != nil {
			rerr := x.rerr
			x.rerr = nil
			return false, x.ioErr(rerr, OpReadHead)
		}
		n, rerr := c.nc.Read(x.hbuf[x.hi:])
		x.hi += n
		if n > 0 {
			x.got = true
			if rerr != nil {
				x.rerr = rerr
			}
			continue
		}
		if rerr != nil {
			if rerr == ErrWouldBlock {
				return false, rerr // a loop-driven conn: the rest of the head has not arrived yet
			}
			return !x.got && x.Idempotent && isConnDrop(rerr), x.ioErr(rerr, OpReadHead)
		}
	}
}

// Upgraded hands over the connection of a 101 Switching Protocols response (RFC 9110 §15.2.2)
// for a tunnel: conn is the upgraded stream (the tls.Conn for https) and early the bytes of
// it that arrived together with the response head. The caller reads and writes conn directly
// (and sets its deadlines); Abort still closes it at once, and ReleaseExchange closes it, never
// pooling it. ok is false when the response is not a 101 or the exchange failed.
func (x *Exchange) Upgraded() (conn net.Conn, early []byte, ok bool) {
	if x.err != nil || x.c == nil || x.Resp.Status != 101 {
		return nil, nil, false
	}
	early = x.hbuf[x.lo:x.hi]
	x.lo, x.hi = 0, 0
	return x.c.nc, early, true
}
