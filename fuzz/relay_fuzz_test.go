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
		if fail && len(whole) > len(body) && !bytes.HasSuffix(whole, relayErrEvent) {
			t.Fatalf("failure added bytes that are not the error event: %q", whole[len(body):])
		}
	})
}
