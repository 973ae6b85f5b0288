package pipeline

import (
	"errors"
	"io"
	"time"

	"github.com/sluice-gw/sluice/core/relay"
)

// Encoder applies a content coding (RFC 9110 §8.4) to a response body on its way to the
// client: gzip, zstd, br. A response stage sets one with RequestCtx.SetEncoder; the pipeline
// then relays the upstream's payload through it, one upstream read at a time, each flushed,
// so that a body that arrives piece by piece (NDJSON, a slow download) leaves piece by piece.
type Encoder interface {
	// Encode appends the coded form of p to dst and flushes, so that the client can decode
	// everything given so far.
	Encode(dst, p []byte) []byte
	// Close appends the end of the coded stream to dst.
	Close(dst []byte) []byte
	// Release returns the encoder to its pool; the pipeline calls it once per request, last.
	Release()
}

// SetEncoder makes e code the response body: call it from a response stage, with the
// Content-Encoding field added (AddResponseHeader). The body then goes out chunked (or framed
// by the engine), its Content-Length dropped; a response to HEAD, which has no body, keeps
// the fields the GET's would have and announces no length either. It must not be used for an
// event stream (SSE events must reach the client as they come, and the relay tracks their
// boundaries), a response without content (204, 304), or an HTTP/1.0 client (who cannot take
// chunked coding); the compress middleware checks all of these. Coding costs CPU per byte, so a
// stage that calls it must not report LoopSafe: the event loop's relay does not code, and
// SetEncoder on an event loop releases e and panics (a bug of the stage's, which the engine
// answers with a 500) rather than send a body that is not what its Content-Encoding says.
func (rc *RequestCtx) SetEncoder(e Encoder) {
	if rc.onLoop {
		e.Release()
		panic(errEncoderOnLoop)
	}
	if rc.enc != nil {
		rc.enc.Release()
	}
	rc.enc = e
}

// Encoded reports whether a response stage has set an encoder for the response
// (SetEncoder), so that its body goes out coded: a later stage's SetEncoder would replace
// that encoder, whose Content-Encoding the response already names.
func (rc *RequestCtx) Encoded() bool { return rc.enc != nil }

var errEncoderOnLoop = errors.New("pipeline: SetEncoder on an event loop: a stage that codes bodies must not report LoopSafe")

// releaseEncoder releases the request's encoder, if any.
func (rc *RequestCtx) releaseEncoder() {
	if rc.enc != nil {
		rc.enc.Release()
		rc.enc = nil
	}
	if rc.encIn != nil {
		ReleaseBuf(rc.encIn)
		rc.encIn = nil
	}
}

// encodedFraming is the framing of a coded body: re-chunked, or framed by the engine.
func (rc *RequestCtx) encodedFraming(f relay.Framing) relay.Framing {
	if f == relay.None {
		return f
	}
	if rc.FramesBodies {
		return relay.Payload
	}
	return relay.Chunk
}

// readEncoded reads the next upstream payload and codes it into rc.pending; at the end it
// appends the coded stream's end and sets rc.ended.
func (rc *RequestCtx) readEncoded() error {
	if rc.encIn == nil {
		rc.encIn = getRelayBuf()
	}
	in := *rc.encIn
	n, err := rc.x.ReadBody(in, false)
	if n > 0 {
		rc.observe(rc.relay.Pass(in[:n], time.Now()))
		rc.route.Chain.onBody(rc, in[:n])
		rc.pending = rc.enc.Encode(rc.pending, in[:n])
	}
	if errors.Is(err, io.EOF) {
		rc.pending = rc.enc.Close(rc.pending)
		rc.ended = true
		return nil
	}
	return err
}

// relayEncoded is relayTo for a coded body: each upstream read goes out as one chunk of coded
// bytes, framed here (Chunk) or by the engine (Payload).
func (rc *RequestCtx) relayEncoded(ds Downstream) error {
	for {
		err := rc.readEncoded()
		if err != nil {
			if rc.Canceled() {
				return rc.clientLeft()
			}
			rc.bodyFailed(err)
			return err
		}
		if len(rc.pending) > 0 {
			bp := GetBuf()
			if rc.framing == relay.Chunk {
				*bp = appendChunk((*bp)[:0], rc.pending)
			} else {
				*bp = append((*bp)[:0], rc.pending...)
			}
			rc.pending = rc.pending[:0]
			if ds.Send(bp, 0, len(*bp)) != nil {
				return rc.clientLeft()
			}
		}
		if rc.ended {
			return rc.sendTail(ds, rc.relay.End)
		}
	}
}

// appendChunk appends p as one chunk of chunked coding (RFC 9112 §7.1).
func appendChunk(dst, p []byte) []byte {
	const hex = "0123456789abcdef"
	var size [16]byte
	i := len(size)
	for n := len(p); ; n >>= 4 {
		i--
		size[i] = hex[n&0xf]
		if n < 16 {
			break
		}
	}
	dst = append(dst, size[i:]...)
	dst = append(dst, "\r\n"...)
	dst = append(dst, p...)
	return append(dst, "\r\n"...)
}
