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
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/relay"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// FastEngine serves one entrypoint with fasthttp.Server: the engine for TLS entrypoints (gnet
// has no TLS), running the same request pipeline as the gnet engine. fasthttp only
// notices a departed client when a write fails, so each in-flight request also watches its
// socket for EOF (disconnect_unix.go).
type FastEngine struct {
	set      Settings
	pipe     *pipeline.Entrypoint
	log      *slog.Logger
	panics   panicGuard // requests whose handling panicked
	srv      *fasthttp.Server
	tcp      net.Listener // the bound listener (Listen), before TLS
	ln       net.Listener // the listener being served (Start)
	done     chan struct{}
	draining atomic.Bool
	donated  atomic.Bool    // ListenerFile gave the socket to a transport taking over the address
	certs    *tlscert.Store // TLS entrypoints: the certificates, reloaded when their files change
	counters
	m       *metrics.Entrypoint
	release func()  // of the entrypoint's gauges, once it serves (Start)
	shed    shedLog // "client connection shed" lines
}

// NewFast returns a fasthttp engine for the entrypoint described by set.
func NewFast(set Settings, res pipeline.Resolver, log *slog.Logger) *FastEngine {
	set.fill()
	if log == nil {
		log = slog.Default()
	}
	e := &FastEngine{set: set, log: log, done: make(chan struct{})}
	e.shed.log, e.shed.entrypoint = log, set.Name
	e.m = metrics.ForEntrypoint(set.Name)
	e.pipe = pipeline.NewEntrypoint(set.Name, set.TLS != nil, res, e.m, log)
	e.pipe.TrustedIPs = set.TrustedIPs
	e.srv = &fasthttp.Server{
		Handler:                       e.handle,
		Name:                          "",
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		NoDefaultDate:                 false, // Date on every response (RFC 9110 §6.6.1); fasthttp sets it and drops any other
		DisableHeaderNamesNormalizing: true,
		DisablePreParseMultipartForm:  true,
		ReadTimeout:                   set.ReadHeaderTimeout,
		IdleTimeout:                   set.IdleTimeout,
		MaxRequestBodySize:            int(set.Limits.MaxBodyBytes),
		ReadBufferSize:                set.Limits.HeaderBytes(),
		Concurrency:                   set.MaxConnections,
		ConnState:                     e.connState,
		StreamRequestBody:             false,
		ErrorHandler:                  e.onParseError,
		ExpectHandler:                 e.onExpectContinue,
		SecureErrorLogMessage:         true, // parse errors do not quote the request
		Logger:                        discardLogger{},
	}
	return e
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// Listen implements Transport.
func (e *FastEngine) Listen() error {
	if e.tcp != nil {
		return nil
	}
	ln := e.set.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", e.set.Address); err != nil {
			return fmt.Errorf("sluice: entrypoint %s: %w", e.set.Name, err)
		}
	}
	if t := e.set.TLS; t != nil {
		certs, err := tlscert.NewStore(e.set.Name, t.Certificates, e.log)
		if err == nil && t.Watch {
			err = certs.Watch()
		}
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("sluice: entrypoint %s: tls: %w", e.set.Name, err)
		}
		e.certs = certs
	}
	e.tcp = ln
	e.set.Address = ln.Addr().String()
	e.pipe.Port = listenPort(ln.Addr())
	return nil
}

// Refusing implements Transport.
func (e *FastEngine) Refusing() <-chan struct{} {
	if sl, _ := e.ln.(*serveListener); sl != nil {
		return sl.closed
	}
	return closedChan
}

// closedChan is a closed channel: a transport that never served refuses from the start.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ListenerFile implements Transport.
func (e *FastEngine) ListenerFile() (*os.File, error) {
	f, err := listenerFile(e.tcp)
	if err == nil {
		e.donated.Store(true)
	}
	return f, err
}

// Start implements Transport.
func (e *FastEngine) Start() error {
	if err := e.Listen(); err != nil {
		return err
	}
	ln := net.Listener(&backlogListener{Listener: e.tcp, donated: &e.donated})
	if t := e.set.TLS; t != nil {
		ln = &tlsListener{Listener: ln, e: e, config: &tls.Config{GetCertificate: e.certs.GetCertificate, MinVersion: max(t.MinVersion, tls.VersionTLS12), NextProtos: []string{"http/1.1", "http/1.0"}}}
	}
	sl := newServeListener(&countingListener{Listener: ln, n: &e.counters.conns, max: int64(e.set.MaxConnections), sndbuf: e.set.SendBufferBytes, m: e.m, shed: &e.shed}, e.set.linger, &e.set.Limits, e.m, &e.shed)
	sl.bodyIdle = e.set.ReadHeaderTimeout
	sl.bound = e.pipe.BodyBound
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
		e.release = e.counters.publish(e.set.Name, e.m)
		return nil
	case <-e.done:
		_ = sl.Close()
		e.tcp = nil
		if e.certs != nil {
			e.certs.Close()
		}
		return fmt.Errorf("sluice: entrypoint %s on %s: fasthttp stopped at once: %v", e.set.Name, e.set.Address, serveErr)
	}
}

// Addr implements Transport.
func (e *FastEngine) Addr() string { return e.set.Address }

// ReloadCertificates loads a TLS entrypoint's certificate files again (a configuration reload
// does, also when watch is off); on an error the certificates in use stay. A no-op without
// TLS.
func (e *FastEngine) ReloadCertificates() error {
	if e.certs == nil {
		return nil
	}
	return e.certs.Reload()
}

// Stats implements Transport.
func (e *FastEngine) Stats() Stats { return e.counters.stats() }

// Drain implements Transport.
func (e *FastEngine) Drain(ctx context.Context) error {
	e.draining.Store(true)
	if e.certs != nil {
		e.certs.Close()
	}
	defer func() { releaseGauges(e.release) }()
	sl, _ := e.ln.(*serveListener)
	if sl == nil {
		if e.tcp != nil && e.ln == nil { // bound (Listen) and never served
			_ = e.tcp.Close()
			e.tcp = nil
		}
		return nil // not started, or Start failed: nothing runs
	}
	// The engine drains rather than fasthttp's Shutdown, which ends a connection the moment
	// its response is written: also one whose head went out before the drain began, without
	// Connection: close, under the next request its client had every reason to send (a POST,
	// which clients do not send again). Closing the listener ends Serve; the connections go on
	// being served, each response now saying Connection: close (handle), and those between
	// requests are closed as serveListener.drain says. What is left when ctx ends is cut.
	err := sl.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // an earlier Drain closed it
	}
	// The connections taken from the backlog at the close reach Serve's Accept after it:
	// they are drained with the others.
	select {
	case <-sl.acceptEnded:
	case <-e.done:
	case <-ctx.Done():
	}
	if !sl.drain(ctx.Done()) && sl.cutAll() > 0 {
		err = ctx.Err()
	}
	if !sl.stopped(e.done, stopTimeout) {
		err = errors.Join(err, errors.New("sluice: fasthttp engine did not stop in time"))
	}
	return err
}

// onParseError answers requests fasthttp itself could not parse.
func (e *FastEngine) onParseError(ctx *fasthttp.RequestCtx, err error) {
	var ge *pipeline.GatewayError
	var ne net.Error
	var fe *http1.Error
	var refused error
	if sc := servedConnOf(ctx.Conn()); sc != nil {
		refused = sc.refusal()
	}
	switch {
	case refused == errBodyCut:
		// Its body is over the bound of its route, which answers it without the body.
		e.handle(ctx)
		return
	case refused != nil:
		// The gateway's parser refused the request (fasthttp_framing.go): its status and
		// message, as on the gnet engine.
		ge = framingError(refused, &e.set.Limits)
	case errors.As(err, &fe):
		ge = framingError(fe, &e.set.Limits)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ge = framingError(bodyTooLarge, &e.set.Limits)
	case isSmallBuffer(err) && headTooLarge(ctx.Conn()) != nil:
		ge = framingError(headTooLarge(ctx.Conn()), &e.set.Limits)
	case isSmallBuffer(err):
		ge = &pipeline.GatewayError{Status: 431, Type: pipeline.InvalidRequest, Code: "request_header_fields_too_large", Message: overHeaderBytes(431, &e.set.Limits)}
	case errors.As(err, &ne) && ne.Timeout():
		// A head cut short (one that is malformed is refused by the framing check at once).
		e.m.Shed(metrics.ShedHeaderTimeout)
		stalled := errHeadTimeout
		if stalledInBody(ctx.Conn()) {
			stalled = errBodyTimeout
		}
		e.shed.headTimeout(ctx.RemoteAddr(), stalled)
		ge = pipeline.FramingGatewayError(stalled)
	default:
		ge = &pipeline.GatewayError{Status: 400, Type: pipeline.InvalidRequest, Code: "bad_request", Message: "malformed request: " + parseCause(err)}
	}
	e.refuse(ctx, ge)
}

// refuse sets on ctx the gateway's own answer ge to a request that goes no further: the JSON
// error body and an X-Request-Id, counted in the metrics and seen by the completion stages
// like any refused request (pipeline.Entrypoint.Reject), on a connection that then closes.
func (e *FastEngine) refuse(ctx *fasthttp.RequestCtx, ge *pipeline.GatewayError) {
	rc := pipeline.AcquireRequestCtx()
	rc.SetClientAddr(peerAddr(ctx.RemoteAddr()))
	e.pipe.Reject(rc, ge)
	var fx fastExchange
	fx.writeReply(ctx, rc)
	defer func() {
		if v := recover(); v != nil {
			// A completion stage's bug, raised once rc is finished (pipeline.StagePanic):
			// fasthttp recovers nothing in its error handler.
			e.panics.report(e.log, e.set.Name, v)
			return
		}
		pipeline.ReleaseRequestCtx(rc)
	}()
	rc.Finish()
}

// onExpectContinue answers a request that asked for 100 Continue (RFC 9110 §10.1.1) and will
// be refused whatever its body, before fasthttp sends 100 Continue, so that the client never
// starts sending that body: a Content-Length over the body limit gets 413, a head the
// framing check refused its refusal, both the gateway's own answer as the gnet engine gives
// it; a Content-Length over the bound of the request's route goes through the route without
// its body (the route's 413, or a stage's answer before it), as on the gnet engine. fasthttp
// then sets the returned status on the response as it stands, writes it (the handler does
// not run) and closes the connection.
func (e *FastEngine) onExpectContinue(ctx *fasthttp.RequestCtx) int {
	var ge *pipeline.GatewayError
	if sc := servedConnOf(ctx.Conn()); sc != nil {
		switch err := sc.refusal(); {
		case err == errBodyCut:
			e.handle(ctx)
			return ctx.Response.StatusCode()
		case err != nil:
			ge = framingError(err, &e.set.Limits)
		}
	}
	if cl := ctx.Request.Header.ContentLength(); ge == nil && cl > 0 && int64(cl) > e.set.Limits.BodyBytes() {
		ge = framingError(bodyTooLarge, &e.set.Limits)
	}
	if ge == nil {
		return fasthttp.StatusContinue
	}
	e.refuse(ctx, ge)
	return ge.Status
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

// fastExchange is the state of one request on the fasthttp engine; it lives until the
// response body stream is closed.
type fastExchange struct {
	e       *FastEngine
	rc      *pipeline.RequestCtx
	headBuf []byte
	conn    net.Conn // the client connection, for the stall deadline of streamed bodies
	// The disconnect watch starts watchDelay after the request enters the pipeline: a response
	// that comes sooner never pays for it (a goroutine, a peek and a deadline dance per request).
	watchMu    sync.Mutex
	watch      *disconnectWatch
	watchOff   bool
	watchConn  net.Conn
	watchTimer *time.Timer
	addTo      *fasthttp.ResponseHeader // target of addField while the head is built
	client     *servedConn              // the connection the request came on (nil: not a served one)
	begun      bool                     // the request entered the pipeline: Finish it
	direct     bool                     // WriteTo writes the body to the connection, not to fasthttp
	abandoned  bool                     // a panic left its state unknown: it goes back to no pool
}

// internalErrorBody is the body of the 500 that answers a request whose handling panicked.
var internalErrorBody = pipeline.AppendErrorBody(nil, pipeline.ErrInternal)

// errAbandoned ends a body that a panic cut short: fasthttp closes the connection.
var errAbandoned = errors.New("sluice: the response was abandoned after a panic")

// abandon ends fx's request after a panic v out of the pipeline, on whichever of fasthttp's
// goroutines it came (the handler's, the body writer's, a hijacked connection's): the request
// gives back what it held (pipeline.RequestCtx.FinishAfterPanic), and release then puts
// neither fx nor its RequestCtx back into a pool.
func (fx *fastExchange) abandon(v any) {
	e := fx.e
	e.panics.report(e.log, e.set.Name, v)
	if again := fx.rc.FinishAfterPanic(); again != nil {
		e.panics.report(e.log, e.set.Name, again)
	}
	fx.begun, fx.abandoned = false, true
}

// recoverPanic, deferred on a goroutine of fx's that fasthttp does not guard (a hijacked
// connection's), abandons fx on a panic instead of ending the process.
func (fx *fastExchange) recoverPanic() {
	if v := recover(); v != nil {
		fx.abandon(v)
	}
}

var fastExchanges = sync.Pool{New: func() any { return &fastExchange{} }}

func (e *FastEngine) handle(ctx *fasthttp.RequestCtx) {
	fx := fastExchanges.Get().(*fastExchange)
	fx.e = e
	fx.rc = pipeline.AcquireRequestCtx()
	sc := servedConnOf(ctx.Conn())
	fx.client = sc
	e.counters.active.Add(1)
	defer func() {
		if v := recover(); v != nil {
			// fasthttp recovers nothing here: the process would end.
			fx.abandon(v)
			ctx.Hijack(nil)
			ctx.Response.Reset() // closes a body stream set already: that releases fx
			fx.release()         // when none was
			ctx.SetStatusCode(fasthttp.StatusInternalServerError)
			ctx.SetContentType("application/json")
			ctx.SetBody(internalErrorBody)
			ctx.SetConnectionClose()
		}
	}()
	// fasthttp leaves a response in its writer, unflushed, while the client's next request is
	// already read (pipelined), so that it goes out with the next response: a response ready
	// now would wait for the next request's upstream. It flushes after every response of a
	// handler that set a write deadline; setting none (the zero time) changes nothing else.
	_ = ctx.SetWriteDeadline(time.Time{})
	if !fx.start(ctx) {
		fx.release()
	}
	if e.draining.Load() || (sc != nil && sc.ending.Load()) {
		// A response whose head goes out during a drain ends its connection, also when its
		// request came before the drain began; so does one whose completion panicked.
		ctx.Response.SetConnectionClose()
	}
}

// connState follows fasthttp's view of each connection for the drain (servedConn.phase): a
// request has begun (StateActive, also one read before with the last, pipelined), or a response
// has been written (StateIdle).
func (e *FastEngine) connState(c net.Conn, st fasthttp.ConnState) {
	sc, ok := c.(*servedConn)
	if !ok {
		return
	}
	switch st {
	case fasthttp.StateActive:
		sc.begin()
	case fasthttp.StateIdle:
		sc.answered(e.draining.Load())
	}
}

// start parses the request, runs it through the pipeline up to the response head and hands
// the body to fasthttp as a stream; it reports whether the stream owns fx (false: the caller
// releases it).
func (fx *fastExchange) start(ctx *fasthttp.RequestCtx) bool {
	e, rc := fx.e, fx.rc
	req := &rc.Req
	req.Reset()
	// Parse the head as received (fasthttp keeps the raw field block), so both engines apply
	// the same RFC 9112 framing and smuggling rules.
	h := &ctx.Request.Header
	fx.headBuf = append(fx.headBuf[:0], h.Method()...)
	fx.headBuf = append(fx.headBuf, ' ')
	fx.headBuf = append(fx.headBuf, h.RequestURI()...)
	fx.headBuf = append(fx.headBuf, ' ')
	ver := len(fx.headBuf)
	fx.headBuf = append(fx.headBuf, h.Protocol()...)
	fx.headBuf = append(fx.headBuf, "\r\n"...)
	fx.headBuf = append(fx.headBuf, h.RawHeaders()...)
	if !bytes.HasSuffix(fx.headBuf, []byte("\r\n\r\n")) {
		fx.headBuf = append(fx.headBuf, "\r\n"...)
	}
	rc.SetClientAddr(peerAddr(ctx.RemoteAddr()))
	var err error
	if sc := fx.client; sc != nil {
		if sc.ending.Load() {
			// A request pipelined behind one whose completion panicked: the connection ends
			// after that response, as on the gnet engine, and this request goes unanswered.
			ctx.HijackSetNoResponse(true)
			ctx.Hijack(func(net.Conn) {})
			return false
		}
		err = sc.refusal()
		sc.served++
		// fasthttp was shown a later HTTP/1 minor version as 1 (raiseMinor): the head is
		// parsed with the digit the client wrote, as the gnet engine parses it.
		if d := sc.check.sentMinor(sc.served); d != 0 && len(fx.headBuf) >= ver+8 && string(fx.headBuf[ver:ver+8]) == "HTTP/1.1" {
			fx.headBuf[ver+7] = d
		}
	}
	cut := err == errBodyCut
	if cut {
		// Not a framing error: the route answers the request without its body. fasthttp
		// forgets the head of a request whose body it failed to read: the check kept it.
		err = nil
		fx.headBuf = append(fx.headBuf[:0], fx.client.check.cutHead...)
	}
	if err == nil {
		err = req.ParseRequestHead(fx.headBuf, &e.set.Limits)
	}
	if err != nil {
		e.pipe.Reject(rc, framingError(err, &e.set.Limits))
		fx.begun = true
		fx.writeReply(ctx, rc)
		return false
	}
	req.Body = append(req.Body[:0], ctx.Request.Body()...)
	if cut {
		req.BodyCut = fx.client.check.cutAt
		req.KeepAlive = false // the rest of the body may still come: the connection ends
	}
	if e.draining.Load() {
		req.KeepAlive = false
	}
	rc.FramesBodies = true
	fx.armWatch(ctx.Conn())
	fx.begun = true
	e.pipe.Begin(rc)
	// A short body that began with the head is read whole before the response starts, so
	// that a cut in it is answered as the gateway's error (the pipeline says why).
	_ = rc.CollectBody()
	if rc.ClientGone() {
		// The client left: answer nothing (a default empty 200 would be a lie).
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(net.Conn) {})
		return false
	}
	if rc.Replied() {
		fx.writeReply(ctx, rc)
		return false
	}
	if rc.Upgraded() {
		// The tunnel reads the client itself: the disconnect watch must not peek under it.
		fx.stopWatch()
		raw := ctx.Conn()
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			defer fx.release()
			defer fx.recoverPanic()
			_ = fx.rc.Tunnel(tunnelClient(hijacked{Conn: c, raw: raw}), nil)
		})
		return true
	}
	resp := &ctx.Response
	rh := fx.startHead(ctx, rc)
	fx.conn = ctx.Conn()
	armStall(fx.conn, e.set.ClientStallTimeout)
	switch rc.Framing() {
	case relay.None:
		if cl := rc.ContentLength(); rc.IsHEAD() && cl >= 0 {
			rh.SetContentLength(int(cl))
			resp.SkipBody = true
		}
		return false
	case relay.Length:
		if body, ok := rc.TakeWholeBody(); ok {
			resp.SetBody(body) // written with the head, in one write
			return false
		}
		// The head goes out at once, as on the gnet engine, and the body straight after it
		// as it comes (WriteTo).
		resp.ImmediateHeaderFlush = true
		fx.direct = true
		resp.SetBodyStream(fx, int(rc.ContentLength()))
	case relay.Close:
		// An HTTP/1.0 client cannot take chunked coding, and fasthttp streams bodies of unknown
		// length only chunked: take the connection over and write the response raw.
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(fx.writeRaw)
	default:
		// Headers go out at once, before the first token (zero buffering).
		resp.ImmediateHeaderFlush = true
		resp.SetBodyStream(fx, -1)
	}
	return true
}

// startHead sets the status and fields of rc's response on ctx (not the body or its framing).
func (fx *fastExchange) startHead(ctx *fasthttp.RequestCtx, rc *pipeline.RequestCtx) *fasthttp.ResponseHeader {
	resp := &ctx.Response
	rh := &resp.Header
	fx.addTo = rh
	rh.DisableNormalizing()
	rh.SetNoDefaultContentType(true)
	resp.SetStatusCode(rc.Status())
	rc.VisitResponseFields(fx.addField)
	// A request that asked for an upgrade and is answered without one ends the connection:
	// the framing check stopped following the stream at it (what comes after may be another
	// protocol's), so fasthttp's parser alone would read what follows.
	if !rc.KeepAlive() || rc.Req.Upgrade {
		// fasthttp closes the connection after this response, and the client may still be
		// sending: a refused request's body, or a pipelined request.
		resp.SetConnectionClose()
		lingerOnClose(ctx.Conn())
	}
	return rh
}

// writeReply sets the gateway's own reply of rc on ctx; fasthttp writes it (without a body
// for HEAD).
func (fx *fastExchange) writeReply(ctx *fasthttp.RequestCtx, rc *pipeline.RequestCtx) {
	ctx.Response.Reset()
	// fasthttp leaves out the body of a HEAD answer only for handler responses, not for the
	// answers to requests it could not read (RFC 9110 §9.3.2).
	ctx.Response.SkipBody = ctx.IsHead()
	rh := fx.startHead(ctx, rc)
	// The reason phrase the gnet engine writes (RFC 9110 §15's names: "Content Too Large",
	// where fasthttp still writes RFC 7231's "Request Entity Too Large").
	rh.SetStatusMessage([]byte(http1.StatusText(rc.Status())))
	if ct := rc.ReplyContentType(); ct != "" {
		rh.SetContentType(ct)
	}
	if ra := rc.ReplyRetryAfter(); ra > 0 {
		rh.Set("Retry-After", strconv.Itoa(ra))
	}
	fx.headBuf = rc.ReplyBody(fx.headBuf[:0])
	if ctx.Response.SkipBody {
		rc.OmitReplyBody() // a HEAD request rc may not know as one (refuse)
	}
	ctx.Response.SetBody(fx.headBuf)
	fx.addTo = nil
}

// addField copies one response field into fasthttp's response header.
func (fx *fastExchange) addField(k, v []byte) { fx.addTo.AddBytesKV(k, v) }

// Read implements io.Reader, which fasthttp's body streams must; fasthttp never calls it here,
// since SupportsBodyWriteTo says to call WriteTo instead.
func (fx *fastExchange) Read([]byte) (int, error) { return 0, errBodyWrittenByWriteTo }

var errBodyWrittenByWriteTo = errors.New("ingress: the response body is written by WriteTo, not read")

// SupportsBodyWriteTo implements fasthttp.BodyWriterTo: fasthttp calls WriteTo instead of Read.
func (fx *fastExchange) SupportsBodyWriteTo() bool { return true }

// WriteTo implements io.WriterTo for fasthttp's body stream: the pipeline relays the body
// through the same steps as on the gnet engine (RequestCtx.WriteBody), one write per upstream
// read, so an event stream keeps the same bound on an event's start held back.
//
// A body of unknown length goes to w, fasthttp's chunked body writer, which frames each write
// as one chunk and flushes it; fasthttp writes the last chunk when WriteTo returns nil (the
// body ended, or ended with the gateway's SSE error event) and cuts the connection on an error.
// A client that takes nothing for client_stall_timeout fails a write (servedConn.Write) and
// ends the exchange, upstream included.
//
// A Content-Length body (direct) goes to the client connection itself rather than into w,
// fasthttp's buffered writer: fasthttp copies such a body into that buffer and writes it out
// only when the buffer is full, and drops what it holds when the stream fails, so a body cut
// short would reach the client without the bytes the upstream did send. The buffer is empty
// when WriteTo runs (the head was flushed, ImmediateHeaderFlush), so the bytes written here
// follow the head in order, and fasthttp, told that all of the body was written, adds
// nothing of its own.
func (fx *fastExchange) WriteTo(w io.Writer) (n int64, err error) {
	defer func() {
		// fasthttp would recover it but never close the body stream: fx would not be
		// released.
		if v := recover(); v != nil {
			fx.abandon(v)
			n, err = 0, errAbandoned
		}
	}()
	if fx.direct {
		w = fx.conn
	}
	if err := fx.rc.WriteBody(writerDownstream{w}); err != nil {
		return 0, err
	}
	if fx.direct {
		return fx.rc.ContentLength(), nil
	}
	return 0, nil
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
		fx.watch = watchDisconnect(fx.watchConn, fx.rc.CancelHandle())
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

// writeRaw writes the response head and body straight to the hijacked client connection;
// fasthttp closes the connection when it returns.
func (fx *fastExchange) writeRaw(c net.Conn) {
	defer fx.release()
	defer fx.recoverPanic()
	_ = fx.rc.WriteResponse(writerDownstream{c})
}

// writerDownstream writes each Send to w in one Write, blocking for backpressure: a plain
// connection (a hijacked one, or fasthttp's for a Content-Length body), or fasthttp's chunked
// body writer.
type writerDownstream struct{ w io.Writer }

func (d writerDownstream) Send(bp *[]byte, lo, hi int) error {
	_, err := d.w.Write((*bp)[lo:hi])
	pipeline.ReleaseBuf(bp)
	return err
}

// Close implements io.Closer: fasthttp calls it when the body is written or the client failed.
func (fx *fastExchange) Close() error {
	fx.release()
	return nil
}

// finish runs the request's Finish from release, which fasthttp calls where it recovers
// nothing (closing a body stream): a completion stage's panic, which Finish raises once the
// request is finished (pipeline.StagePanic), is reported rather than ending the process. It
// reports false after such a panic.
func (fx *fastExchange) finish() (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			fx.e.panics.report(fx.e.log, fx.e.set.Name, v)
			ok = false
		}
	}()
	fx.rc.Finish()
	return true
}

func (fx *fastExchange) release() {
	if fx.e == nil {
		return // an abandoned exchange, released already
	}
	fx.direct = false
	if fx.conn != nil {
		armStall(fx.conn, 0)
		_ = fx.conn.SetWriteDeadline(time.Time{})
		fx.conn = nil
	}
	fx.stopWatch()
	if fx.begun {
		if !fx.finish() && fx.client != nil {
			// A bug ran where the response is completed, in a state no one can vouch for:
			// the connection ends after the response (whole, as it went out or is about to),
			// as the gnet engines end theirs.
			fx.client.endAfterResponse()
		}
		fx.begun = false
	}
	fx.client = nil
	fx.e.counters.active.Add(-1)
	fx.e = nil
	if fx.abandoned {
		return // its state unknown: left to the collector
	}
	pipeline.ReleaseRequestCtx(fx.rc)
	fx.rc = nil
	fx.addTo = nil
	fastExchanges.Put(fx)
}

// hijacked is a connection fasthttp handed over (reading first what it had buffered) whose
// Close really closes it: fasthttp's own hijacked connection ignores Close and closes only
// when the handler returns, and a tunnel must close the client the moment the upstream left.
type hijacked struct {
	net.Conn
	raw net.Conn
}

func (h hijacked) Close() error { return h.raw.Close() }

// NetConn returns the connection fasthttp read from, through which a tunnel reaches the TCP
// socket to half-close it.
func (h hijacked) NetConn() net.Conn { return h.raw }

// countingListener counts open connections in n and closes at once, without an answer, one
// accepted while max (when > 0) are open: the gnet engine's rule, ahead of fasthttp's own
// Concurrency refusal (a plain-text 503). It caps the send buffer of the connections it
// keeps at sndbuf bytes (when > 0, sendbuf.go).
type countingListener struct {
	net.Listener
	n      *atomic.Int64
	max    int64
	sndbuf int
	m      *metrics.Entrypoint
	shed   *shedLog
}

func (l *countingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.n.Load() >= l.max {
			l.m.Shed(metrics.ShedMaxConnections)
			l.shed.maxConnections(c.RemoteAddr(), int(l.max))
			_ = c.Close()
			continue
		}
		if tc := unwrapTCP(c); tc != nil {
			capSendBuffer(tc, l.sndbuf)
		}
		l.n.Add(1)
		return &countedConn{Conn: c, n: l.n}, nil
	}
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
