package fuzz

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/relay"
)

var relayErrEvent = []byte("event: error\ndata: {\"error\":{}}\n\n")

// relayed runs body through a Relay split into the given read sizes (cycled) and returns the
// client bytes; fail ends with an upstream failure instead of a clean end.
func relayed(f relay.Framing, sse bool, body []byte, sizes []byte, fail bool) []byte {
	var r relay.Relay
	t0 := time.Unix(0, 0)
	r.Reset(f, sse, t0)
	var out []byte
	for i, off := 0, 0; off < len(body); i++ {
		n := 1
		if len(sizes) > 0 {
			n = int(sizes[i%len(sizes)])%64 + 1
		}
		n = min(n, len(body)-off)
		buf := make([]byte, relay.Headroom+n+relay.Tailroom)
		copy(buf[relay.Headroom:], body[off:off+n])
		lo, hi, _ := r.Frame(buf, n, t0.Add(time.Duration(i)))
		out = append(out, buf[lo:hi]...)
		off += n
	}
	if fail {
		return r.Fail(out, relayErrEvent)
	}
	return r.End(out)
}

// dechunk decodes a chunked body and reports whether it ended with the last chunk.
func dechunk(t *testing.T, b []byte) ([]byte, bool) {
	var d http1.ChunkedDecoder
	var out []byte
	for len(b) > 0 && !d.Done() {
		data, k, err := d.Next(b)
		if err != nil {
			t.Fatalf("the relay wrote invalid chunked framing: %v", err)
		}
		out = append(out, data...)
		b = b[k:]
		if k == 0 {
			break
		}
	}
	if len(b) > 0 {
		t.Fatalf("%d bytes after the end of the chunked body", len(b))
	}
	return out, d.Done()
}

// relayCost bounds the work of relaying a body in every framing: five framings, each with
// the SSE line search (up to two searches per piece, each counting the bytes it looks at and
// one more) beside the pass over the bytes, so about 6 steps per byte per framing when the
// body comes one byte at a time.
var relayCost = linearCost{PerByte: 32, Fixed: 256}

// FuzzRelaySplits checks that any split of the same upstream bytes gives the same client body
// in every framing, that Chunk framing is valid chunked coding, that the error event after
// a failure depends only on the bytes, never on how they were split, and that the work grows
// linearly with the body.
func FuzzRelaySplits(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n"), []byte{1, 2, 3}, true, false)
	f.Add([]byte("data: a\r\rdata: b\r"), []byte{5}, true, true)
	f.Add([]byte("{\"x\":1}"), []byte{0}, false, true)
	f.Add([]byte(": c\r\n\n"), []byte{7, 1}, true, true)
	f.Fuzz(func(t *testing.T, body, sizes []byte, sse, fail bool) {
		checkCost(t, relayCost, body, func(body []byte) {
			for _, fr := range []relay.Framing{relay.Length, relay.ChunkedRaw, relay.Chunk, relay.Close, relay.Payload} {
				relayed(fr, sse, body, sizes, fail)
			}
		})
		whole := relayed(relay.Payload, sse, body, []byte{255}, fail)
		for _, fr := range []relay.Framing{relay.Length, relay.ChunkedRaw, relay.Close, relay.Payload} {
			got := relayed(fr, sse, body, sizes, fail)
			want := whole
			if fr.Raw() {
				want = body // raw framings never add bytes
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: split changed the client bytes:\n got %q\nwant %q", fr, got, want)
			}
		}
		chunked := relayed(relay.Chunk, sse, body, sizes, fail)
		payload, ended := dechunk(t, chunked)
		if !bytes.Equal(payload, whole) {
			t.Fatalf("chunk: payload %q, want %q", payload, whole)
		}
		if ended != (!fail || len(whole) > len(body)) {
			t.Fatalf("chunk: last chunk present=%v (fail=%v, event added=%v)", ended, fail, len(whole) > len(body))
		}
		if fail && len(whole) > len(body) && !bytes.Equal(whole[len(body):], failTail(body)) {
			t.Fatalf("failure added %q after %q, want %q", whole[len(body):], body, failTail(body))
		}
	})
}

// keptRelay runs body through a Relay as the pipeline's relay step does with relay.Keep:
// reads of the given sizes (cycled) land after the bytes kept back by the last one, and the
// rest goes out. check, when not nil, sees the bytes read so far, sent so far and kept after
// each read. It returns the client payload (Payload framing) and what the upstream's failure,
// when fail, added after it (the error event, or nothing).
func keptRelay(body, sizes []byte, limit int, fail bool, check func(read, sent, kept []byte)) (out, added []byte) {
	var r relay.Relay
	t0 := time.Unix(0, 0)
	r.Reset(relay.Payload, true, t0)
	var kept []byte
	for i, off := 0, 0; off < len(body); i++ {
		n := 1
		if len(sizes) > 0 {
			n = int(sizes[i%len(sizes)])%64 + 1
		}
		n = min(n, len(body)-off)
		buf := make([]byte, relay.Headroom+len(kept)+n+relay.Tailroom)
		copy(buf[relay.Headroom:], kept)
		copy(buf[relay.Headroom+len(kept):], body[off:off+n])
		tail := r.Keep(body[off:off+n], limit)
		send := len(kept) + n - tail
		kept = append(kept[:0], buf[relay.Headroom+send:relay.Headroom+send+tail]...)
		lo, hi, _ := r.FrameKept(buf, send, t0.Add(time.Duration(i)))
		out = append(out, buf[lo:hi]...)
		off += n
		if check != nil {
			check(body[:off], out, kept)
		}
	}
	if fail {
		r.Drop()
		return out, r.Fail(nil, relayErrEvent)
	}
	return append(out, kept...), nil
}

// endsBlankLine reports whether a blank line ends anywhere in b, read from a line start
// (line endings CRLF, LF or CR, WHATWG HTML "event stream interpretation"): a reference
// independent of the relay's own line scan.
func endsBlankLine(b []byte) bool {
	lineLen := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\r', '\n':
			if lineLen == 0 {
				return true
			}
			lineLen = 0
			if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
		default:
			lineLen++
		}
	}
	return false
}

// FuzzRelayKeep checks the relay's holding back of an open SSE event (relay.Keep) over any
// split of any bytes: the client gets every byte in order and, on a clean end, all of them;
// what is held back never exceeds the limit and never holds an event that ended (so no event
// waits for the next read); an upstream failure drops only the open event and adds the error
// event exactly when what went out ended on an event boundary, in the stream's line endings
// (failTail); and the work grows linearly.
func FuzzRelayKeep(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n"), []byte{1}, uint8(64), false)
	f.Add([]byte("data: a\r\rdata: bb\r\n\r"), []byte{0, 3}, uint8(4), true)
	f.Add([]byte(": c\r\n\ndata: x"), []byte{7, 1}, uint8(255), true)
	f.Fuzz(func(t *testing.T, body, sizes []byte, limit uint8, fail bool) {
		checkCost(t, relayCost, body, func(body []byte) { keptRelay(body, sizes, int(limit), fail, nil) })
		got, added := keptRelay(body, sizes, int(limit), fail, func(read, sent, kept []byte) {
			if !bytes.Equal(append(append([]byte(nil), sent...), kept...), read) {
				t.Fatalf("sent %q + kept %q is not what was read, %q", sent, kept, read)
			}
			if len(kept) > int(limit) {
				t.Fatalf("kept %d bytes, more than the limit %d", len(kept), limit)
			}
			open := kept
			if len(open) > 0 && open[0] == '\n' && len(sent) > 0 && sent[len(sent)-1] == '\r' {
				open = open[1:] // the LF of a CRLF whose CR went out with its event
			}
			if endsBlankLine(open) {
				t.Fatalf("kept %q after sending %q: an event that ended waits", kept, sent)
			}
		})
		if !fail {
			if !bytes.Equal(got, body) {
				t.Fatalf("the client got %q, the upstream sent %q", got, body)
			}
			return
		}
		sent := got
		if !bytes.HasPrefix(body, sent) {
			t.Fatalf("the client got %q, not a prefix of what the upstream sent, %q", sent, body)
		}
		if event := len(added) > 0; event != endsOnBoundary(sent) {
			t.Fatalf("error event added=%v after %q (ends on an event boundary: %v)", event, sent, !event)
		}
		if len(added) > 0 && !bytes.Equal(added, failTail(sent)) {
			t.Fatalf("failure added %q after %q, want %q", added, sent, failTail(sent))
		}
	})
}

// failTail is what the relay adds after sent, an SSE stream from its start that ends on an
// event boundary, when its upstream fails: the error event with its line endings turned into
// the last whole one of sent (LF when there is none), after an LF that completes a final CR
// unless the stream ends its lines with a lone CR. A reference independent of the relay's
// scan.
func failTail(sent []byte) []byte {
	end := []byte("\n")
	for i := 0; i < len(sent); i++ {
		switch {
		case sent[i] == '\n':
			end = []byte("\n")
		case sent[i] == '\r' && i+1 < len(sent) && sent[i+1] == '\n':
			end = []byte("\r\n")
			i++
		case sent[i] == '\r' && i+1 < len(sent):
			end = []byte("\r")
		}
	}
	var out []byte
	if len(sent) > 0 && sent[len(sent)-1] == '\r' && string(end) != "\r" {
		out = append(out, '\n')
	}
	return append(out, bytes.ReplaceAll(relayErrEvent, []byte("\n"), end)...)
}

// endsOnBoundary reports whether b, an SSE stream from its start, ends where an event may
// start: nothing yet, or a blank line last (a reference independent of the relay's scan).
func endsOnBoundary(b []byte) bool {
	at, lineLen := true, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\r', '\n':
			at, lineLen = lineLen == 0, 0
			if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
		default:
			at, lineLen = false, lineLen+1
		}
	}
	return at
}
