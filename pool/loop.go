package pool

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// ErrWouldBlock is what the Read of a loop-driven connection returns when nothing more has
// arrived, and what PollHead and ReadBody then return: the caller's event loop calls again
// when the upstream sends more. It is never sticky.
var ErrWouldBlock = errors.New("sluice: upstream has sent nothing more yet")

// AttachLoop starts a loop-driven exchange on p: nc is an upstream connection whose reads and
// writes never block (an event loop's connection: Read returns ErrWouldBlock when its inbound
// buffer is empty, Write buffers what the socket does not take, deadlines are ignored, Close
// may be called from any goroutine). The caller dialled it (dialed is how long that took; 0
// for a reused one) and takes it back through release when the exchange is released:
// reusable says whether it may carry another request. Instead of RoundTrip, the caller then
// runs WriteRequest and PollHead, and ReadBody as bytes arrive; timeouts are the caller's.
func (x *Exchange) AttachLoop(p *Pool, nc net.Conn, dialed time.Duration, release func(reusable bool)) error {
	if x.p != nil {
		return errRoundTripTwice
	}
	x.p = p
	x.lc = conn{nc: nc, raw: nc, release: release, ownerTimed: true}
	x.mu.Lock()
	if x.aborted.Load() {
		x.mu.Unlock()
		release(false)
		x.lc = conn{}
		return x.fail(ErrAborted)
	}
	x.c = &x.lc
	x.mu.Unlock()
	p.active.Add(1) // until ReleaseExchange hands it back
	x.lo, x.hi = 0, 0
	x.rerr = nil
	x.got = false
	x.scan.Reset()
	x.interim = 0
	x.dialed = dialed
	return nil
}

// WriteRequest writes head and body to a loop-driven connection (AttachLoop).
func (x *Exchange) WriteRequest(head, body []byte) error {
	if x.c == nil {
		return errNoRoundTrip
	}
	if err := x.write(x.c, head, body); err != nil {
		return x.fail(x.ioErr(err, opWriteRequest))
	}
	return nil
}

// PollHead reads what arrived of the response head on a loop-driven connection. It returns
// ErrWouldBlock while the head is incomplete, nil once x.Resp holds the final response head
// (body bytes read with it stay buffered for ReadBody), or the error of the exchange. retry
// reports a failure RoundTrip would retry once on a fresh connection when the one used was
// reused: a reset or close before any response byte of an idempotent request (x.Idempotent).
// A request written whole to a loop-driven connection has left as far as the gateway can
// tell, so a failed write is never a retry by itself.
func (x *Exchange) PollHead(isHEAD bool) (retry bool, err error) {
	if x.err != nil {
		return false, x.err
	}
	if x.aborted.Load() {
		return false, x.fail(ErrAborted)
	}
	if x.c == nil {
		return false, errNoRoundTrip
	}
	retry, err = x.readHead(x.c)
	switch {
	case err == ErrWouldBlock:
		return false, err
	case err != nil:
		return retry, x.fail(err)
	}
	x.setMode(isHEAD)
	return false, nil
}

// GotResponseBytes reports whether any byte of a response arrived on the exchange's
// connection.
func (x *Exchange) GotResponseBytes() bool { return x.got }

// Timeout fails a loop-driven exchange whose response head or next body bytes took longer than
// the pool's ResponseHeaderTimeout or StreamIdleTimeout (the caller keeps the time), and
// closes its connection. It returns the error.
func (x *Exchange) Timeout(op string) error {
	x.detach()
	return x.fail(x.ioErr(errLoopTimeout, op))
}

// errLoopTimeout stands for a deadline an event loop enforces; it reads as a timeout.
var errLoopTimeout = loopTimeout{}

type loopTimeout struct{}

func (loopTimeout) Error() string   { return "i/o timeout" }
func (loopTimeout) Timeout() bool   { return true }
func (loopTimeout) Temporary() bool { return true }
func (loopTimeout) Is(target error) bool {
	return target == os.ErrDeadlineExceeded
}

// Handoff moves a loop-driven exchange onto a blocking connection to the same socket (nc reads
// first what the loop had buffered and not yet read, then the socket), for a worker goroutine
// to go on with ReadBody. The connection is closed at the end of the exchange rather than
// pooled: it has left its loop.
func (x *Exchange) Handoff(nc net.Conn) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.c == nil {
		_ = nc.Close()
		return
	}
	x.lc.nc, x.lc.raw = nc, nc
	x.lc.release = func(bool) { _ = nc.Close() }
	x.lc.ownerTimed = false
	x.broken = true
	x.armed = time.Time{}
	if x.aborted.Load() {
		_ = nc.Close()
	}
}

// StreamIdleTimeout returns how long a body may stay silent (Options.StreamIdleTimeout).
func (p *Pool) StreamIdleTimeout() time.Duration { return p.o.StreamIdleTimeout }

// ResponseHeaderTimeout returns how long a response head may take
// (Options.ResponseHeaderTimeout).
func (p *Pool) ResponseHeaderTimeout() time.Duration { return p.o.ResponseHeaderTimeout }

// IsTLS reports whether the pool's upstream is https.
func (p *Pool) IsTLS() bool { return p.tls != nil }

// Dial opens a new plain TCP connection to the pool's upstream within its DialTimeout (or
// until ctx ends), counted as a dial; failures wrap ErrDial. For loop-driven exchanges: the
// caller enrolls the socket on its event loop.
func (p *Pool) Dial(ctx context.Context) (net.Conn, time.Duration, error) {
	if p.isClosed() {
		return nil, 0, &UpstreamError{Addr: p.o.Addr, Kind: ErrDial, Err: ErrPoolClosed}
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
	defer cancel()
	start := time.Now()
	nc, err := p.connect(ctx)
	if err != nil {
		p.dialFailed(err)
		return nil, 0, &UpstreamError{Addr: p.o.Addr, Kind: ErrDial, Err: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	p.dials.Add(1)
	return nc, time.Since(start), nil
}

// ConnectsOnLoop reports whether ConnectStart can connect to the pool's upstream (an IP
// address, no TLS, a platform that has it, a pool not retired).
func (p *Pool) ConnectsOnLoop() bool {
	return connectStartAvailable && p.direct.IsValid() && p.tls == nil && !p.isClosed()
}

// DialTimeout returns how long a dial may take (Options.DialTimeout).
func (p *Pool) DialTimeout() time.Duration { return p.o.DialTimeout }

// IdleTimeout returns how long an idle connection may be kept (Options.IdleTimeout).
func (p *Pool) IdleTimeout() time.Duration { return p.o.IdleTimeout }

// LivenessCheckAfter returns the idle time from which a connection an event loop keeps idle is
// checked for an upstream close before it carries a request that must not be sent twice
// (Options.LivenessCheckAfter; negative: every such reuse).
func (p *Pool) LivenessCheckAfter() time.Duration { return p.o.LivenessCheckAfter }

// HoldIdle takes one of the pool's MaxIdleConns idle slots for a connection about to go idle,
// or reports false when they are all taken (the connection is then closed). The slots are
// shared by the pool's idle stack and every event loop's idle list, so the cap holds per
// server however many loops keep connections to it. Lock-free and allocation-free: an event
// loop calls it; DropIdle gives the slot back when the connection leaves its idle list
// (taken, swept, closed).
func (p *Pool) HoldIdle() bool {
	limit := int64(p.o.MaxIdleConns)
	for {
		n := p.idleN.Load()
		if n >= limit {
			return false
		}
		if p.idleN.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// InFlight returns the number of exchanges on the pool's connections now, on every path.
func (p *Pool) InFlight() int64 { return p.active.Load() }

// IdleRoom reports whether an idle slot is free now (HoldIdle would succeed, unless another
// connection takes it first).
func (p *Pool) IdleRoom() bool { return p.idleN.Load() < int64(p.o.MaxIdleConns) }

// DropIdle gives back a slot HoldIdle took.
func (p *Pool) DropIdle() { p.idleN.Add(-1) }

// Reused counts an exchange an event loop serves on one of its idle connections (Stats.Reuses),
// as taking a conn from the idle stack does.
func (p *Pool) Reused() { p.reuses.Add(1) }

// Closed reports whether Close was called: the pool's configuration was retired.
func (p *Pool) Closed() bool { return p.isClosed() }

// ConnectDone counts the end of a connect ConnectStart began: err nil is a dial (Stats.Dials);
// otherwise a failed dial (Stats.DialErrors), returned as an *UpstreamError of kind ErrDial
// naming the upstream, as Dial returns it. A connect abandoned because its request ended
// counts as neither: do not call ConnectDone for it.
func (p *Pool) ConnectDone(err error) error {
	if err == nil {
		p.dials.Add(1)
		return nil
	}
	p.dialFailed(err)
	return &UpstreamError{Addr: p.o.Addr, Kind: ErrDial, Err: dialError(p.direct, err)}
}
