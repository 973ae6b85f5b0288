package pool

import (
	"io"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
)

// Buffered returns how many body bytes (wire bytes, framing included) arrived together with the
// response head and are not read yet: a ReadBody of at most that many bytes in raw mode returns
// without waiting on the upstream. The relay uses it to send a short response's head and body
// in one write.
func (x *Exchange) Buffered() int {
	if x.done || x.err != nil {
		return 0
	}
	return x.hi - x.lo
}

// ReadBody reads the next bytes of the response body into buf and returns how many it wrote.
//
// raw=true returns the body's wire bytes, chunked framing and trailer section included (for
// pass-through relay to an HTTP/1.1 client); raw=false returns payload only (chunked decoded,
// RFC 9112 §7.1). Bytes read together with the response head are served first. It returns
// (0, io.EOF) once the whole body has been returned and never reads past the end of this
// response, so the conn stays reusable; an until-close body (RFC 9112 §6.3 rule 8) ends at the
// upstream's close and makes the conn non-reusable. The raw/decoded choice must not change in
// the middle of a chunked body.
//
// Each read waits at most Options.StreamIdleTimeout (then ErrTimeout). After Abort it returns
// ErrAborted at once. Other errors: ErrUpstreamProto (bad chunked framing), ErrUpstreamClosed
// (the upstream closed before the end of a length or chunked body). Errors are sticky.
// FramingBytes returns how many of the bytes that raw ReadBody calls returned for this
// response were chunk framing (chunk sizes and extensions, line endings, the last chunk and
// the trailer section) rather than payload: 0 for a body that is not chunked or was read
// decoded.
func (x *Exchange) FramingBytes() int64 { return x.framing }

func (x *Exchange) ReadBody(buf []byte, raw bool) (n int, err error) {
	if x.err != nil {
		return 0, x.err
	}
	if x.aborted.Load() {
		return 0, x.fail(ErrAborted)
	}
	if x.done {
		return 0, io.EOF
	}
	if x.c == nil {
		return 0, errNoRoundTrip
	}
	if len(buf) == 0 {
		return 0, nil
	}
	for {
		n, err := x.fill(buf)
		if n > 0 {
			switch x.mode {
			case http1.BodyLength:
				x.remain -= int64(n)
				if x.remain == 0 {
					x.done = true
				}
				return n, nil
			case http1.BodyChunked:
				out, cerr := x.chunked(buf[:n], raw)
				if cerr != nil {
					return 0, x.fail(x.protoErr(cerr, opChunked))
				}
				if out > 0 {
					return out, nil
				}
				if x.done {
					return 0, io.EOF
				}
				continue // framing only: read more
			default: // BodyUntilClose
				return n, nil
			}
		}
		if err == nil {
			continue
		}
		if err == ErrWouldBlock {
			return 0, err // a loop-driven conn with nothing more to read yet
		}
		if x.aborted.Load() {
			return 0, x.fail(ErrAborted)
		}
		if x.mode == http1.BodyUntilClose && err == io.EOF {
			x.done = true
			x.broken = true
			return 0, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, x.fail(x.ioErr(err, OpReadBody))
	}
}

// CutByClose turns the end of a body delimited by the upstream's close (RFC 9112 §6.3 rule 8),
// which ReadBody returned as io.EOF, into the failure of a body cut short, and returns that
// failure: for a caller that finds in the body itself that it was not complete (an event stream
// closed inside an event), the close cut it as a reset would have. The error wraps
// ErrUpstreamClosed ("closed the connection before the response was complete", as a length or
// chunked body cut short) with io.ErrUnexpectedEOF (ErrAborted after Abort), and is sticky:
// ReadBody and CutByClose return it from then on. The conn is never reused (an until-close
// body's never is). It returns nil and changes nothing for any other body, or before the body
// ended.
func (x *Exchange) CutByClose() error {
	switch {
	case x.mode != http1.BodyUntilClose:
		return nil
	case x.err != nil:
		return x.err
	case !x.done:
		return nil
	}
	return x.fail(x.ioErr(io.ErrUnexpectedEOF, OpReadBody))
}

// fill puts the next available body bytes into buf: leftover bytes from the head read first,
// then one socket read with the stream idle deadline. A BodyLength read is capped at the bytes
// remaining, so it never reads past the end of the response.
func (x *Exchange) fill(buf []byte) (int, error) {
	if x.mode == http1.BodyLength && int64(len(buf)) > x.remain {
		buf = buf[:x.remain]
	}
	if x.lo < x.hi {
		n := copy(buf, x.hbuf[x.lo:x.hi])
		x.lo += n
		if x.lo == x.hi {
			x.lo, x.hi = 0, 0
		}
		return n, nil
	}
	if x.rerr != nil {
		err := x.rerr
		x.rerr = nil
		return 0, err
	}
	c := x.c
	if c.ownerTimed {
		return x.readInto(c, buf)
	}
	// Re-arm the idle deadline only when a noticeable part of it has passed: a stream reads
	// every few milliseconds, and a timer update per read costs more than the read's own work.
	// The deadline then fires between 15/16 of StreamIdleTimeout and all of it after the last
	// byte.
	now := time.Now()
	if now.Sub(x.armed) > x.p.o.StreamIdleTimeout/16 {
		if err := c.nc.SetReadDeadline(now.Add(x.p.o.StreamIdleTimeout)); err != nil {
			return 0, err
		}
		x.armed = now
	}
	return x.readInto(c, buf)
}

// readInto makes the one socket read of fill. An error that comes with bytes is kept for the
// next call, so that the bytes are relayed first.
func (x *Exchange) readInto(c *conn, buf []byte) (int, error) {
	n, err := c.nc.Read(buf)
	if n > 0 && err != nil {
		x.rerr = err
		err = nil
	}
	return n, err
}

// chunked runs the chunked decoder over b (bytes just read into the caller's buffer). raw: it
// returns how many of b's bytes belong to the body (all of them, unless the body ended inside
// b). Decoded: it moves the payload runs to the front of b and returns their total length.
// Bytes after the end of the chunked body are garbage from the upstream: the conn is marked
// non-reusable.
func (x *Exchange) chunked(b []byte, raw bool) (int, error) {
	off, w := 0, 0
	for off < len(b) && !x.dec.Done() {
		data, c, err := x.dec.Next(b[off:])
		if err != nil {
			return 0, err
		}
		if !raw && len(data) > 0 {
			w += copy(b[w:], data)
		}
		if raw {
			x.framing += int64(c - len(data))
		}
		off += c
		if c == 0 && len(data) == 0 {
			break
		}
	}
	if x.dec.Done() {
		x.done = true
		if off < len(b) || x.lo < x.hi {
			x.broken = true // bytes after the end of the response
		}
	} else if off < len(b) {
		// The decoder is incremental and consumes partial framing; anything left is a bug.
		return 0, errDecoderStalled
	}
	if raw {
		return off, nil
	}
	return w, nil
}
