package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/proxy"
	"github.com/sluice-gw/sluice/pool"
)

// FastEngine serves one entrypoint with fasthttp.Server: the engine for TLS entrypoints (gnet
// has no TLS, DESIGN.md §9), running the same core/proxy path as the gnet engine. fasthttp only
// notices a departed client when a write fails, so each in-flight request also watches its
// socket for EOF (disconnect_linux.go).
type FastEngine struct {
	set      Settings
	res      Resolver
	log      *slog.Logger
	srv      *fasthttp.Server
	ln       net.Listener
	done     chan struct{}
	draining atomic.Bool
	counters
	m    *metrics.Entrypoint
	elog errLog
}

// NewFast returns a fasthttp engine for the entrypoint described by set.
func NewFast(set Settings, res Resolver, log *slog.Logger) *FastEngine {
	set.fill()
	if log == nil {
		log = slog.Default()
	}
	e := &FastEngine{set: set, res: res, log: log, done: make(chan struct{})}
	e.m = newEntrypointMetrics(set.Name, &e.counters)
	e.elog.log = log
	e.srv = &fasthttp.Server{
		Handler:                       e.handle,
		Name:                          "",
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: true,
		DisablePreParseMultipartForm:  true,
		ReadTimeout:                   set.ReadHeaderTimeout,
		IdleTimeout:                   set.IdleTimeout,
		MaxRequestBodySize:            int(set.Limits.MaxBodyBytes),
		ReadBufferSize:                set.Limits.MaxHeaderBytes,
		Concurrency:                   set.MaxConnections,
		CloseOnShutdown:               true,
		StreamRequestBody:             false,
		ErrorHandler:                  e.onParseError,
		SecureErrorLogMessage:         true, // parse errors do not quote the request
		Logger:                        discardLogger{},
	}
	return e
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// Start implements Transport.
func (e *FastEngine) Start() error {
	ln, err := net.Listen("tcp", e.set.Address)
	if err != nil {
		return fmt.Errorf("sluice: entrypoint %s: %w", e.set.Name, err)
	}
	e.set.Address = ln.Addr().String()
	if e.set.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(e.set.TLSCertFile, e.set.TLSKeyFile)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("sluice: entrypoint %s: tls: %w", e.set.Name, err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	}
	sl := newServeListener(&countingListener{Listener: ln, n: &e.counters.conns})
	var serveErr error
	go func() {
		defer close(e.done)
		serveErr = e.srv.Serve(sl)
	}()
	// Return once Serve has registered the listener with the server, so that a Drain from now
	// on stops it (serveListener).
	select {
	case <-sl.accepting:
		e.ln = sl
		return nil
	case <-e.done:
		_ = sl.Close()
		return fmt.Errorf("sluice: entrypoint %s on %s: fasthttp stopped at once: %v", e.set.Name, e.set.Address, serveErr)
	}
}

// Addr implements Transport.
func (e *FastEngine) Addr() string { return e.set.Address }

// Stats implements Transport.
func (e *FastEngine) Stats() Stats { return e.counters.stats() }

// Drain implements Transport.
func (e *FastEngine) Drain(ctx context.Context) error {
	e.draining.Store(true)
	sl, _ := e.ln.(*serveListener)
	if sl == nil {
		return nil // not started, or Start failed: nothing runs
	}
	// Shutdown closes the listener and idle connections and waits for requests in flight.
	err := e.srv.ShutdownWithContext(ctx)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil // an error only if a connection has to be cut below
	}
	// Hijacked connections (bodies delimited by close) are outside Shutdown's count; and what
	// is left when ctx ends, fasthttp would keep serving: cut it.
	if !sl.waitGone(ctx.Done()) && sl.cutAll() > 0 {
		err = ctx.Err()
	}
	if !sl.stopped(e.done, stopTimeout) {
		err = errors.Join(err, errors.New("sluice: fasthttp engine did not stop in time"))
	}
	return err
}

// onParseError answers requests fasthttp itself could not parse.
func (e *FastEngine) onParseError(ctx *fasthttp.RequestCtx, err error) {
	var ge *proxy.GatewayError
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ge = &proxy.GatewayError{Status: 413, Type: proxy.InvalidRequest, Code: "request_too_large", Message: "request body larger than the limit"}
	case isSmallBuffer(err):
		ge = &proxy.GatewayError{Status: 431, Type: proxy.InvalidRequest, Code: "request_header_fields_too_large", Message: "request head larger than the limit"}
	case errors.As(err, &ne) && ne.Timeout():
		// fasthttp waits for CRLF CRLF: a head cut short, or ended with bare LFs, times out.
		ge = &proxy.GatewayError{Status: 408, Type: proxy.InvalidRequest, Code: "request_timeout",
			Message: "request head not complete within read_header_timeout (lines must end in CRLF, RFC 9112 §2.2)"}
	default:
		ge = &proxy.GatewayError{Status: 400, Type: proxy.InvalidRequest, Code: "bad_request", Message: "malformed request: " + parseCause(err)}
	}
	writeFastError(ctx, ge, false)
}

// parseCause returns fasthttp's innermost parse error, without the buffer dump it may carry,
// cut to 200 bytes: the reason, not a copy of the request.
func parseCause(err error) string {
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(err) {
		err = u
	}
	msg := err.Error()
	if i := strings.Index(msg, ": buffer size="); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

func isSmallBuffer(err error) bool {
	var sb *fasthttp.ErrSmallBuffer
	return errors.As(err, &sb) || errors.Is(err, fasthttp.ErrSmallReadBuffer)
}

func writeFastError(ctx *fasthttp.RequestCtx, ge *proxy.GatewayError, keepAlive bool) {
	ctx.Response.Reset()
	ctx.Response.SetStatusCode(ge.Status)
	ctx.Response.Header.SetContentType("application/json")
	if ge.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", fmt.Sprint(ge.RetryAfter))
	}
	ctx.Response.SetBody(proxy.AppendErrorBody(nil, ge))
	if !keepAlive {
		ctx.Response.SetConnectionClose()
	}
}

// fastExchange is the state of one request on the fasthttp engine; it lives until the
// response body stream is closed.
type fastExchange struct {
	e        *FastEngine
	req      http1.Request
	headBuf  []byte
	ip       []byte
	conn     net.Conn      // the client connection, for the stall deadline of streamed bodies
	stall    time.Duration // client_stall_timeout
	x        *pool.Exchange
	b        *proxy.Backend
	rt       *proxy.Route
	began    time.Time
	last     time.Time // previous body read of a streamed response
	bytes    int64
	status   int
	streamed bool
	// The disconnect watch starts watchDelay after the request goes upstream: a response that
	// comes sooner never pays for it (a goroutine, a peek and a deadline dance per request).
	watchMu    sync.Mutex
	watch      *disconnectWatch
	watchOff   bool
	watchConn  net.Conn
	watchTimer *time.Timer
	sse        bool
	tail       [2]byte
	failed     []byte // pending SSE error event after an upstream failure
	ended      bool
}

// fastExchanges recycles exchanges; tail starts as an event boundary (nothing sent yet).
var fastExchanges = sync.Pool{New: func() any { return &fastExchange{tail: [2]byte{'\n', '\n'}} }}

func (e *FastEngine) handle(ctx *fasthttp.RequestCtx) {
	fx := fastExchanges.Get().(*fastExchange)
	fx.e = e
	e.counters.active.Add(1)
	if !fx.start(ctx) {
		fx.release()
	}
}

// start proxies the request up to the response head and hands the body to fasthttp as a
// stream; it reports whether the stream owns fx (false: the caller releases it).
func (fx *fastExchange) start(ctx *fasthttp.RequestCtx) bool {
	e := fx.e
	req := &fx.req
	req.Reset()
	// Parse the head as received (fasthttp keeps the raw field block), so both engines apply
	// the same RFC 9112 framing and smuggling rules.
	h := &ctx.Request.Header
	fx.headBuf = append(fx.headBuf[:0], h.Method()...)
	fx.headBuf = append(fx.headBuf, ' ')
	fx.headBuf = append(fx.headBuf, h.RequestURI()...)
	fx.headBuf = append(fx.headBuf, ' ')
	fx.headBuf = append(fx.headBuf, h.Protocol()...)
	fx.headBuf = append(fx.headBuf, "\r\n"...)
	fx.headBuf = append(fx.headBuf, h.RawHeaders()...)
	if !bytes.HasSuffix(fx.headBuf, []byte("\r\n\r\n")) {
		fx.headBuf = append(fx.headBuf, "\r\n"...)
	}
	if err := req.ParseRequestHead(fx.headBuf, &e.set.Limits); err != nil {
		writeFastError(ctx, proxy.FramingGatewayError(err), false)
		return false
	}
	req.Body = append(req.Body[:0], ctx.Request.Body()...)
	keepAlive := req.KeepAlive && !e.draining.Load()
	fx.began = time.Now()
	e.m.Request()
	rt := e.res.Resolve(e.set.Name, req)
	if rt == nil {
		e.m.GatewayError(404)
		writeFastError(ctx, proxy.ErrNoRoute, keepAlive)
		return false
	}
	b := rt.Service.Pick()
	if b == nil {
		e.m.GatewayError(503)
		rt.M.Response(503, fx.began, 0)
		writeFastError(ctx, proxy.ErrNoBackend, keepAlive)
		return false
	}
	fx.b, fx.rt = b, rt
	fx.ip = fx.ip[:0]
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		fx.ip, _ = a.IP.AppendText(fx.ip)
	}
	fx.headBuf = proxy.AppendUpstreamHead(fx.headBuf[:0], req, rt, b, proxy.ClientInfo{IP: fx.ip, TLS: e.set.TLSCertFile != ""}) // ctx.IsTLS cannot see through the counting wrapper
	fx.x = pool.AcquireExchange()
	fx.armWatch(ctx.Conn())
	isHEAD := ctx.IsHead()
	if err := fx.x.RoundTrip(b.Pool, fx.headBuf, req.Body, isHEAD); err != nil {
		if fx.gone() {
			// The client left: answer nothing (a default empty 200 would be a lie).
			rt.M.Canceled()
			ctx.HijackSetNoResponse(true)
			ctx.Hijack(func(net.Conn) {})
			return false
		}
		ge := proxy.UpstreamGatewayError(err)
		rt.M.UpstreamError(proxy.UpstreamReason(err))
		rt.M.Response(ge.Status, fx.began, 0)
		e.elog.upstreamFailed(rt.Name, b.URL, "response head", err)
		writeFastError(ctx, ge, keepAlive)
		return false
	}
	resp := &fx.x.Resp
	if resp.Status == 101 {
		// No upgrade was asked for (WebSocket support comes later): a protocol error.
		rt.M.UpstreamError(metrics.ReasonProtocol)
		rt.M.Response(502, fx.began, 0)
		writeFastError(ctx, proxy.ErrUnexpectedUpgrade, false)
		return false
	}
	mode, ka := proxy.PlanResponse(resp, isHEAD, req)
	fx.conn = ctx.Conn()
	fx.stall = e.set.ClientStallTimeout
	keepAlive = keepAlive && ka
	rh := &ctx.Response.Header
	rh.DisableNormalizing()
	rh.SetNoDefaultContentType(true)
	ctx.Response.SetStatusCode(resp.Status)
	for i := range resp.Headers {
		f := &resp.Headers[i]
		if resp.IsHopByHop(f.Key) || bytes.EqualFold(f.Key, []byte("Content-Length")) || bytes.EqualFold(f.Key, []byte("Transfer-Encoding")) {
			continue
		}
		rh.AddBytesKV(f.Key, f.Value)
	}
	if !keepAlive {
		ctx.Response.SetConnectionClose()
	}
	fx.status = resp.Status
	fx.streamed = mode != proxy.OutLength
	switch mode {
	case proxy.OutNone:
		rt.M.Response(resp.Status, fx.began, 0)
		if isHEAD && resp.ContentLength >= 0 {
			ctx.Response.Header.SetContentLength(int(resp.ContentLength))
			ctx.Response.SkipBody = true
		}
		return false
	case proxy.OutLength:
		ctx.Response.SetBodyStream(fx, int(resp.ContentLength))
	case proxy.OutClose:
		// An HTTP/1.0 client cannot take chunked coding, and fasthttp streams bodies of unknown
		// length only chunked: take the connection over and delimit the body by closing it.
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(fx.relayUntilClose)
	default:
		fx.sse = proxy.IsEventStream(resp)
		// Headers go out at once, before the first token (zero buffering).
		ctx.Response.ImmediateHeaderFlush = true
		ctx.Response.SetBodyStream(fx, -1)
	}
	return true
}

// Read implements io.Reader for fasthttp's body stream: one upstream read per call, which
// fasthttp flushes to the client at once.
func (fx *fastExchange) Read(p []byte) (int, error) {
	if len(fx.failed) > 0 {
		n := copy(p, fx.failed)
		fx.failed = fx.failed[n:]
		return n, nil
	}
	if fx.ended {
		return 0, io.EOF
	}
	// fasthttp writes what Read returns right away: a client that takes none of it for
	// client_stall_timeout fails that write and ends the exchange, upstream included.
	if fx.conn != nil {
		_ = fx.conn.SetWriteDeadline(time.Now().Add(fx.stall))
	}
	n, err := fx.x.ReadBody(p, false)
	if n > 0 {
		fx.bytes += int64(n)
		if fx.streamed {
			now := time.Now()
			if fx.last.IsZero() {
				fx.rt.M.FirstByte(fx.began)
			} else {
				fx.rt.M.Gap(now.Sub(fx.last))
			}
			fx.last = now
		}
	}
	if err != nil && !errors.Is(err, io.EOF) && !fx.ended {
		if fx.gone() {
			fx.rt.M.Canceled()
		} else {
			fx.rt.M.UpstreamError(metrics.ReasonStream)
			fx.e.elog.upstreamFailed(fx.rt.Name, fx.b.URL, "body", err)
		}
	}
	if errors.Is(err, io.EOF) {
		fx.rt.M.Response(fx.status, fx.began, fx.bytes)
	}
	if n >= 2 {
		fx.tail[0], fx.tail[1] = p[n-2], p[n-1]
	} else if n == 1 {
		fx.tail[0], fx.tail[1] = fx.tail[1], p[0]
	}
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	if fx.sse && !fx.gone() && fx.tail == [2]byte{'\n', '\n'} {
		// DESIGN.md §5: end the client's stream with an SSE error event, never [DONE].
		fx.failed = proxy.AppendSSEError(fx.failed[:0], proxy.ErrUpstreamStream)
		fx.ended = true
		return n, nil
	}
	return n, err
}

// watchDelay is how long a request may wait for its upstream before the client's socket is
// watched for a disconnect. The cancellation bound is 50 ms; most JSON answers come sooner.
const watchDelay = 2 * time.Millisecond

// armWatch schedules the disconnect watch of c for this exchange.
func (fx *fastExchange) armWatch(c net.Conn) {
	fx.watchMu.Lock()
	fx.watchConn, fx.watchOff = c, false
	fx.watchMu.Unlock()
	if fx.watchTimer == nil {
		fx.watchTimer = time.AfterFunc(watchDelay, fx.beginWatch)
	} else {
		fx.watchTimer.Reset(watchDelay)
	}
}

func (fx *fastExchange) beginWatch() {
	fx.watchMu.Lock()
	defer fx.watchMu.Unlock()
	if !fx.watchOff && fx.watch == nil && fx.watchConn != nil {
		fx.watch = watchDisconnect(fx.watchConn, fx.x)
	}
}

// stopWatch cancels a pending watch or ends a running one (waiting for its goroutine).
func (fx *fastExchange) stopWatch() {
	if fx.watchTimer != nil {
		fx.watchTimer.Stop()
	}
	fx.watchMu.Lock()
	fx.watchOff = true
	w := fx.watch
	fx.watch, fx.watchConn = nil, nil
	fx.watchMu.Unlock()
	if w != nil {
		w.stop()
	}
}

// gone reports whether the watch saw the client leave.
func (fx *fastExchange) gone() bool {
	fx.watchMu.Lock()
	w := fx.watch
	fx.watchMu.Unlock()
	return w != nil && w.gone()
}

// relayUntilClose writes the response head and body straight to the hijacked client
// connection; fasthttp closes the connection when it returns.
func (fx *fastExchange) relayUntilClose(c net.Conn) {
	defer fx.release()
	fx.headBuf = proxy.AppendClientHead(fx.headBuf[:0], &fx.x.Resp, &fx.req, proxy.OutClose, false)
	if _, err := c.Write(fx.headBuf); err != nil {
		return
	}
	bp := pool.GetBuf()
	defer pool.PutBuf(bp)
	for {
		n, err := fx.Read(*bp)
		if n > 0 {
			if _, werr := c.Write((*bp)[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Close implements io.Closer: fasthttp calls it when the body is written or the client failed.
func (fx *fastExchange) Close() error {
	fx.release()
	return nil
}

func (fx *fastExchange) release() {
	if fx.conn != nil {
		_ = fx.conn.SetWriteDeadline(time.Time{})
		fx.conn = nil
	}
	fx.stopWatch()
	if fx.x != nil {
		pool.ReleaseExchange(fx.x)
		fx.x = nil
	}
	if fx.b != nil {
		fx.b.Release()
		fx.b = nil
	}
	fx.sse, fx.ended, fx.failed, fx.tail = false, false, fx.failed[:0], [2]byte{'\n', '\n'}
	fx.rt, fx.last, fx.bytes, fx.status, fx.streamed = nil, time.Time{}, 0, 0, false
	fx.e.counters.active.Add(-1)
	fx.e = nil
	fastExchanges.Put(fx)
}

// countingListener counts open client connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.Add(1)
	return &countedConn{Conn: c, n: l.n}, nil
}

type countedConn struct {
	net.Conn
	n    *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.n.Add(-1) })
	return c.Conn.Close()
}

// NetConn returns the wrapped connection (for the disconnect watch).
func (c *countedConn) NetConn() net.Conn { return c.Conn }
