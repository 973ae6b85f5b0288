package pipeline

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
)

// DefaultWebSocketIdleTimeout is how long a WebSocket tunnel may carry no byte in either
// direction before both sides are closed, when its service sets no websocket_idle_timeout.
const DefaultWebSocketIdleTimeout = 5 * time.Minute

// wsGUID is the GUID of RFC 6455 §1.3 that Sec-WebSocket-Accept is derived with.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

var (
	hdrUpgrade      = []byte("Upgrade")
	hdrConnection   = []byte("Connection")
	hdrWSKey        = []byte("Sec-WebSocket-Key")
	hdrWSVersion    = []byte("Sec-WebSocket-Version")
	hdrWSAccept     = []byte("Sec-WebSocket-Accept")
	tokWebSocket    = []byte("websocket")
	tokUpgrade      = []byte("upgrade")
	wsUpgradeFields = []byte("Connection: Upgrade\r\nUpgrade: websocket\r\n")
)

// wsHandshakeError is a 400 refusing a malformed WebSocket opening handshake.
func wsHandshakeError(msg string) *GatewayError {
	return &GatewayError{Status: 400, Type: InvalidRequest, Code: "invalid_websocket_handshake", Message: msg}
}

// Answers to WebSocket opening handshakes (RFC 6455 §4.2.1, §4.2.2, §4.1).
var (
	// ErrWSMethod refuses a handshake that is not a GET over HTTP/1.1 or later.
	ErrWSMethod = wsHandshakeError("a WebSocket opening handshake must be a GET request over HTTP/1.1 (RFC 6455 §4.2.1)")
	// ErrWSKey refuses a handshake without exactly one Sec-WebSocket-Key of 16 bytes.
	ErrWSKey = wsHandshakeError("a WebSocket opening handshake needs one Sec-WebSocket-Key of 16 bytes in base64 (RFC 6455 §4.2.1)")
	// ErrWSBody refuses a handshake with a body.
	ErrWSBody = wsHandshakeError("a WebSocket opening handshake has no body")
	// ErrWSVersion answers a Sec-WebSocket-Version other than 13, with
	// Sec-WebSocket-Version: 13 in the response (RFC 6455 §4.2.2).
	ErrWSVersion = &GatewayError{Status: 426, Type: InvalidRequest, Code: "unsupported_websocket_version", Message: "Sec-WebSocket-Version must be 13 (RFC 6455 §4.2.2)"}
	// ErrWSUpstreamAccept is the answer when an upstream accepted a WebSocket handshake with a
	// 101 whose Upgrade, Connection or Sec-WebSocket-Accept is wrong (RFC 6455 §4.1).
	ErrWSUpstreamAccept = &GatewayError{Status: 502, Type: UpstreamError, Code: "upstream_protocol_error", Message: "the upstream accepted the WebSocket handshake with a malformed 101 response"}
)

// wsVersion13 is the only WebSocket version there is (RFC 6455 §4.1).
var wsVersion13 = []byte("13")

// asksWebSocket reports whether req asks for a WebSocket: an HTTP/1.1 upgrade (Connection
// lists "upgrade", RFC 9110 §7.8) whose Upgrade field lists "websocket", both compared
// case-insensitively in comma-separated lists (RFC 6455 §4.2.1 items 3 and 4). Any other
// request is an ordinary one, whose Upgrade is hop-by-hop and dropped: an Upgrade without
// Connection: upgrade, or one that names other protocols only (h2c).
func asksWebSocket(req *http1.Request) bool {
	return req.Upgrade && hasToken(req.Headers, hdrUpgrade, tokWebSocket)
}

// wsKeyLen is the length of a Sec-WebSocket-Key: 16 random bytes in base64 (RFC 6455 §4.1
// item 7).
const wsKeyLen = 24

// checkWebSocket validates the opening handshake of RFC 6455 §4.2.1 in req.
func checkWebSocket(req *http1.Request) *GatewayError {
	if string(req.Method) != "GET" || req.Major != 1 || req.Minor < 1 {
		return ErrWSMethod
	}
	if len(req.Body) > 0 || req.ContentLength > 0 || req.Chunked {
		return ErrWSBody
	}
	var key, version []byte
	keys, versions := 0, 0
	for i := range req.Headers {
		h := &req.Headers[i]
		switch {
		case bytes.EqualFold(h.Key, hdrWSKey):
			keys++
			key = h.Value
		case bytes.EqualFold(h.Key, hdrWSVersion):
			versions++
			version = h.Value
		}
	}
	// Sixteen bytes in base64 are exactly 24 characters, the last two "=" padding; checking
	// the length first also keeps Decode inside raw for any key.
	if keys != 1 || len(key) != wsKeyLen {
		return ErrWSKey
	}
	var raw [18]byte
	// Strict: a key whose padding bits are set is not the base64 of any 16 bytes.
	if n, err := base64.StdEncoding.Strict().Decode(raw[:], key); err != nil || n != 16 {
		return ErrWSKey
	}
	if versions != 1 || !bytes.Equal(bytes.TrimSpace(version), wsVersion13) {
		return ErrWSVersion
	}
	return nil
}

// wsAccept is Sec-WebSocket-Accept for key (RFC 6455 §4.2.2 item 5.4).
func wsAccept(key []byte) []byte {
	h := sha1.New()
	h.Write(key)
	h.Write([]byte(wsGUID))
	out := make([]byte, base64.StdEncoding.EncodedLen(sha1.Size))
	base64.StdEncoding.Encode(out, h.Sum(nil))
	return out
}

// checkWebSocketAccept validates the upstream's 101 against the client's key (RFC 6455 §4.1,
// what a client checks): Upgrade lists websocket, Connection lists Upgrade and
// Sec-WebSocket-Accept is the key's.
func checkWebSocketAccept(resp *http1.Response, key []byte) bool {
	if !hasToken(resp.Headers, hdrUpgrade, tokWebSocket) || !hasToken(resp.Headers, hdrConnection, tokUpgrade) {
		return false
	}
	var accept []byte
	for i := range resp.Headers {
		if bytes.EqualFold(resp.Headers[i].Key, hdrWSAccept) {
			if accept != nil {
				return false
			}
			accept = resp.Headers[i].Value
		}
	}
	return bytes.Equal(bytes.TrimSpace(accept), wsAccept(bytes.TrimSpace(key)))
}

// hasToken reports whether a field named name lists token in its comma-separated value,
// over every line of the field, ignoring ASCII case and optional whitespace (RFC 9110 §5.6.1).
func hasToken(fields []http1.HeaderField, name, token []byte) bool {
	for i := range fields {
		if !bytes.EqualFold(fields[i].Key, name) {
			continue
		}
		for rest := fields[i].Value; len(rest) > 0; {
			el := rest
			if j := bytes.IndexByte(rest, ','); j >= 0 {
				el, rest = rest[:j], rest[j+1:]
			} else {
				rest = nil
			}
			if bytes.EqualFold(bytes.TrimSpace(el), token) {
				return true
			}
		}
	}
	return false
}

// beginWebSocket checks a request that asks for a WebSocket and marks it for the upgrade, or
// returns the answer refusing it.
func (rc *RequestCtx) beginWebSocket() error {
	if ge := checkWebSocket(&rc.Req); ge != nil {
		if ge == ErrWSVersion {
			rc.AddResponseHeader(hdrWSVersion, wsVersion13)
		}
		return ge
	}
	rc.websocket = true
	return nil
}

// acceptWebSocket takes the upstream's 101 for a WebSocket request; it returns the answer
// when the 101 is malformed.
func (rc *RequestCtx) acceptWebSocket() error {
	key, _ := rc.Req.HeaderValue("Sec-WebSocket-Key")
	if !checkWebSocketAccept(&rc.x.Resp, key) {
		rc.outcome.UpstreamError = metrics.ReasonProtocol
		backend := ""
		if rc.backend != nil {
			backend = rc.backend.URL
		}
		rc.ep.elog.upstreamFailed(rc.route.Name, backend, "websocket handshake", errors.New("malformed 101 response"))
		return ErrWSUpstreamAccept
	}
	rc.upgraded = true
	rc.outcome.Status = 101
	return nil
}

// Upgraded reports whether the upstream accepted the request's WebSocket handshake: the engine
// then hands the client connection to Tunnel instead of writing a response.
func (rc *RequestCtx) Upgraded() bool { return rc.upgraded && !rc.replied }

// appendUpgradeHead appends the 101 response head to the client: the upstream's end-to-end
// fields (Sec-WebSocket-Accept, -Protocol, -Extensions, cookies), the gateway's own, and the
// upgrade itself.
func (rc *RequestCtx) appendUpgradeHead(dst []byte) []byte {
	resp := &rc.x.Resp
	dst = http1.AppendStatusLine(dst, 1, 1, 101, resp.Reason)
	for i := range resp.Headers {
		if h := &resp.Headers[i]; passToClient(resp, h.Key) && !bytes.EqualFold(h.Key, hdrRequestID) {
			dst = appendField(dst, h.Key, h.Value)
		}
	}
	dst = rc.appendOwnFields(dst)
	dst = append(dst, wsUpgradeFields...)
	return append(dst, "\r\n"...)
}

// Tunnel writes the 101 response to client and then relays bytes both ways between client
// and the upgraded upstream connection, opaquely (WebSocket frames of any size pass as bytes),
// until both sides have ended, or either resets or fails, or no byte moved either way for the
// service's websocket_idle_timeout; then it closes both at once. early are client bytes the
// engine read past the request (sent upstream first). Each direction writes what it read
// before it reads more, so a side that does not read holds back the other (backpressure both
// ways, one 16 KiB buffer per direction). Both connections are closed when Tunnel returns or
// panics, and its relay goroutine has ended; the engine calls Finish afterwards. The error is
// nil when the sides ended normally.
//
// A side that ends its sending (a TCP FIN, or a TLS close_notify) half-closes the tunnel, as
// HAProxy and Envoy relay it: the write side toward the other is shut (close_notify over TLS,
// then the FIN) and the other direction goes on until its source ends too, bounded by the same
// idle timeout. The half-closed side is watched meanwhile: a reset of it, or its connection
// closed by the engine (a drain's cut), ends the tunnel. A connection whose TCP socket Tunnel
// cannot reach (NetConn) cannot be half-closed: an end of either side then closes both.
//
// A panic in either direction (a bug in code the tunnel runs) ends the tunnel and goes on to
// the engine, which recovers it as any other of the request's (FinishAfterPanic): one on the
// relay goroutine is raised again on the caller's as a *StagePanic with the stack where it
// happened. When no write of the 101 to client had begun, client gets the gateway's 500
// (ErrInternal) first; after one had, some of the 101 may be out and client is just closed.
func (rc *RequestCtx) Tunnel(client net.Conn, early []byte) error {
	up, upEarly, ok := rc.x.Upgraded()
	if !ok {
		_ = client.Close()
		return errClientGone
	}
	idle := DefaultWebSocketIdleTimeout
	if rc.service != nil && rc.service.WebSocketIdleTimeout > 0 {
		idle = rc.service.WebSocketIdleTimeout
	}
	t := &tunnel{idle: idle, client: client, abort: rc.x.AbortHandle(), clientTCP: tcpUnder(client), upTCP: tcpUnder(up)}
	t.touch()
	rc.route.M.WebSocketStarted()
	var wg sync.WaitGroup
	defer func() {
		v := recover()
		if v != nil && !t.wrote.Load() {
			t.answerInternalError()
			rc.outcome.Status = 500
		}
		t.closeBoth()
		wg.Wait() // the relay goroutine uses both connections and t until it ends
		rc.route.M.WebSocketEnded(t.fromClient.Load())
		rc.ended = true
		rc.tunnelOut = t.fromUpstream.Load()
		rc.outcome.TunnelIn = t.fromClient.Load()
		if v != nil {
			panic(stagePanicOf(v))
		}
	}()
	hb := GetBuf()
	*hb = rc.appendUpgradeHead((*hb)[:0])
	*hb = append(*hb, upEarly...)
	t.fromUpstream.Add(int64(len(upEarly)))
	_, err := t.write(client, *hb)
	ReleaseBuf(hb)
	if err != nil {
		rc.outcome.Canceled = true
		return errClientGone
	}
	t.touch()
	if len(early) > 0 {
		if _, err := t.write(up, early); err != nil {
			t.failed(sideUpstream, err)
			return rc.tunnelEnded(t)
		}
		t.fromClient.Add(int64(len(early)))
	}
	wg.Add(1)
	var clientPanic *StagePanic
	go func() {
		defer wg.Done()
		// Nothing recovers a panic on this goroutine but this: it would end the process.
		defer func() {
			clientPanic = recovered(nil, recover())
			t.closeBoth()
		}()
		t.end(up, sideClient, t.pump(up, client, sideClient, &t.fromClient))
	}()
	t.end(client, sideUpstream, t.pump(client, up, sideUpstream, &t.fromUpstream))
	wg.Wait()
	if clientPanic != nil {
		panic(clientPanic) // on the goroutine the engine recovers a request's panics on
	}
	return rc.tunnelEnded(t)
}

// tunnelEnded sets the outcome of the request whose tunnel t ended and returns why it ended:
// nil when both sides ended normally, errTunnelIdle at the idle timeout, else the first
// failure, blamed on the connection it happened on. A reset of either side also fails the
// other direction's I/O on that side (a write to a client that reset fails as its read does),
// and the close of both that follows fails the rest with net.ErrClosed, which blames no one:
// so a client that left mid-flow is a cancellation, and an upstream that died an upstream
// failure, whichever direction noticed first.
func (rc *RequestCtx) tunnelEnded(t *tunnel) error {
	if t.idleOut.Load() {
		return errTunnelIdle
	}
	t.failMu.Lock()
	side, err := t.failSide, t.failErr
	t.failMu.Unlock()
	switch {
	case err == nil:
	case side == sideUpstream:
		rc.outcome.UpstreamError = metrics.ReasonStream
	default:
		rc.outcome.Canceled = true
	}
	return err
}

// errTunnelIdle ends a tunnel that carried nothing for its idle timeout.
var errTunnelIdle = errors.New("sluice: websocket idle timeout")

// tunnel is the state of one WebSocket relay.
type tunnel struct {
	idle         time.Duration
	client       net.Conn
	abort        interface{ Abort() }
	last         atomic.Int64 // unix ns of the last byte moved either way
	fromClient   atomic.Int64
	fromUpstream atomic.Int64
	idleOut      atomic.Bool
	// clientTCP and upTCP are the TCP sockets under client and the upstream connection, nil
	// when one does not show it (tcpUnder): the tunnel then cannot be half-closed.
	clientTCP, upTCP *net.TCPConn
	ended            atomic.Int32 // directions that ended at their source's EOF
	once             sync.Once
	// wrote: a write began on either connection. The first is the 101's to the client: until
	// then no byte of it is out.
	wrote atomic.Bool
	// failMu guards the tunnel's first failure: the side whose connection failed, and how.
	failMu   sync.Mutex
	failSide tunnelSide
	failErr  error
}

// tunnelSide names one of a tunnel's two connections.
type tunnelSide uint8

const (
	sideClient tunnelSide = iota
	sideUpstream
)

// other is the tunnel's other side.
func (s tunnelSide) other() tunnelSide { return 1 - s }

// failed records that I/O on side's connection failed with err, when it is the tunnel's
// first failure: an end of the stream (EOF) and the tunnel's own close (net.ErrClosed) are
// none.
func (t *tunnel) failed(side tunnelSide, err error) {
	if err == nil || isClosedErr(err) {
		return
	}
	t.failMu.Lock()
	if t.failErr == nil {
		t.failSide, t.failErr = side, err
	}
	t.failMu.Unlock()
}

func (t *tunnel) touch() { t.last.Store(time.Now().UnixNano()) }

// idleDeadline is when the tunnel turns idle if no byte moves either way before: the idle
// timeout after the last byte moved, not after the deadline that found the tunnel still active
// (which would let a quiet tunnel live up to twice the timeout).
func (t *tunnel) idleDeadline() time.Time { return time.Unix(0, t.last.Load()).Add(t.idle) }

// closeBoth closes the client connection and the upstream one (without TLS close_notify:
// the peer sees the close at once).
func (t *tunnel) closeBoth() {
	t.once.Do(func() {
		_ = t.client.Close()
		t.abort.Abort()
	})
}

// answerInternalError writes the gateway's 500 to the client of a tunnel that failed before
// any byte of its 101 went out. A panic doing so is dropped: the one that ended the tunnel goes
// on, and the client is closed all the same.
func (t *tunnel) answerInternalError() {
	defer func() { _ = recover() }()
	bp := GetBuf()
	*bp = AppendErrorResponse((*bp)[:0], ErrInternal, 1, 1, false, false)
	_, _ = t.write(t.client, *bp)
	ReleaseBuf(bp)
}

// writeWakes is how many times per idle timeout a write that its peer holds up wakes to note
// the bytes it moved meanwhile (a peer that reads slowly takes a buffer in parts): the other
// direction's idle check then never finds a tunnel idle while a write still moves bytes.
const writeWakes = 4

// write writes p to c within the idle timeout, re-armed while bytes move: the other
// direction's, or those of p that c took. Callers touch the tunnel just before, so the first
// deadline is the idle timeout from now at the latest.
func (t *tunnel) write(c net.Conn, p []byte) (int, error) {
	done := 0
	for done < len(p) {
		deadline := t.idleDeadline()
		if wake := time.Now().Add(t.idle / writeWakes); wake.Before(deadline) {
			deadline = wake
		}
		_ = c.SetWriteDeadline(deadline)
		if !t.wrote.Load() {
			t.wrote.Store(true)
		}
		n, err := c.Write(p[done:])
		done += n
		if err == nil {
			break
		}
		if n > 0 {
			// Bytes moved before the deadline (a peer that reads slowly): not idle.
			t.touch()
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || !t.stillActive() {
			return done, err
		}
	}
	return done, nil
}

// stillActive reports whether a byte moved either way within the idle timeout; when not, the
// tunnel is idle and ends.
func (t *tunnel) stillActive() bool {
	if time.Since(time.Unix(0, t.last.Load())) < t.idle {
		return true
	}
	t.idleOut.Store(true)
	return false
}

// pump copies src to dst until src ends or either fails; srcSide is the side src is, and a
// failure is recorded (failed) on the side whose connection failed.
func (t *tunnel) pump(dst, src net.Conn, srcSide tunnelSide, count *atomic.Int64) error {
	bp := getRelayBuf()
	defer ReleaseBuf(bp)
	buf := *bp
	armed := time.Time{}
	for {
		// Re-arm the read deadline at most every 1/16 of the timeout: a deadline per read
		// costs a timer update.
		if now := time.Now(); now.Sub(armed) > t.idle/16 {
			_ = src.SetReadDeadline(now.Add(t.idle))
			armed = now
		}
		n, err := src.Read(buf)
		if n > 0 {
			t.touch()
			if _, werr := t.write(dst, buf[:n]); werr != nil {
				if !t.idleOut.Load() {
					t.failed(srcSide.other(), werr)
				}
				return werr
			}
			count.Add(int64(n))
			t.touch()
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && t.stillActive() {
				// The other direction moved bytes since this deadline was armed.
				armed = time.Now()
				_ = src.SetReadDeadline(t.idleDeadline())
				continue
			}
			if err == io.EOF {
				return nil
			}
			if !t.idleOut.Load() {
				t.failed(srcSide, err)
			}
			return err
		}
	}
}

// end ends the direction from srcSide that relayed to dst, once its pump returned err, and
// returns when the tunnel is over. An EOF of the source (err nil) while the other direction
// still runs half-closes: dst's write side is shut (closeWrite) and the source's socket is
// watched until it fails (its peer reset it: a failure of srcSide) or is closed (the other
// direction ended, the idle timeout, a drain's cut). Otherwise, when either socket is unknown,
// or dst's write side cannot be shut, both connections are closed at once.
func (t *tunnel) end(dst net.Conn, srcSide tunnelSide, err error) {
	dstTCP, srcTCP := t.clientTCP, t.upTCP
	if srcSide == sideClient {
		dstTCP, srcTCP = srcTCP, dstTCP
	}
	if err != nil || dstTCP == nil || srcTCP == nil || t.ended.Add(1) == 2 || closeWrite(dst, dstTCP) != nil {
		t.closeBoth()
		return
	}
	t.failed(srcSide, awaitEnd(srcTCP))
	t.closeBoth()
}

// maxConnWraps bounds the layers (TLS, counting and engine wrappers) tcpUnder looks through.
const maxConnWraps = 8

// tcpUnder returns the TCP socket under c, through the layers that show the connection they
// wrap (NetConn, as *tls.Conn does), or nil when there is none.
func tcpUnder(c net.Conn) *net.TCPConn {
	for i := 0; i < maxConnWraps && c != nil; i++ {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// closeWrite shuts the write side of c, whose TCP socket is tcp: the outermost layer above tcp
// that can (a TLS connection, which sends its close_notify alert and leaves the socket open)
// first, then tcp itself, which sends its FIN once what was written before has gone.
func closeWrite(c net.Conn, tcp *net.TCPConn) error {
	for i := 0; i < maxConnWraps && c != nil && c != net.Conn(tcp); i++ {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			if err := cw.CloseWrite(); err != nil {
				return err
			}
			break
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	return tcp.CloseWrite()
}

// awaitEnd waits, once tcp's peer ended its sending and nothing reads tcp any more, until
// tcp's socket fails (the peer reset it: socketError) or tcp is closed. It parks in Go's
// netpoller, which wakes it on either; it returns the socket's error, or the close's
// (net.ErrClosed).
func awaitEnd(tcp *net.TCPConn) error {
	raw, err := tcp.SyscallConn()
	if err != nil {
		return err
	}
	// The read deadline is the pump's, which no longer reads: left, it would end the wait.
	_ = tcp.SetReadDeadline(time.Time{})
	var serr error
	err = raw.Read(func(fd uintptr) bool {
		serr = socketError(fd)
		return serr != nil
	})
	if serr != nil {
		return serr
	}
	return err
}

// isClosedErr reports an error that only says the tunnel was closed (by closeBoth or a peer).
func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}
