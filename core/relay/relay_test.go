package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/relay"
)

var errEvent = []byte("event: error\ndata: {}\n\n")

// run relays the upstream reads through a fresh Relay and returns the client bytes; failed
// makes the upstream fail after the last read.
func run(f relay.Framing, sse bool, reads []string, failed bool) string {
	var r relay.Relay
	t0 := time.Unix(0, 0)
	r.Reset(f, sse, t0)
	var out []byte
	for i, p := range reads {
		buf := make([]byte, relay.Headroom+len(p)+relay.Tailroom)
		copy(buf[relay.Headroom:], p)
		lo, hi, _ := r.Frame(buf, len(p), t0.Add(time.Duration(i+1)*time.Millisecond))
		out = append(out, buf[lo:hi]...)
	}
	if failed {
		return string(r.Fail(out, errEvent))
	}
	return string(r.End(out))
}

func TestFramingOfEachMode(t *testing.T) {
	reads := []string{"hello ", "world"}
	cases := []struct {
		f    relay.Framing
		want string
	}{
		{relay.Length, "hello world"},
		{relay.ChunkedRaw, "hello world"}, // wire bytes pass through as read
		{relay.Chunk, "6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n"},
		{relay.Close, "hello world"},
		{relay.Payload, "hello world"},
	}
	for _, c := range cases {
		t.Run(c.f.String(), func(t *testing.T) {
			require.Equal(t, c.want, run(c.f, false, reads, false))
		})
	}
}

func TestChunkSizeLineIsHex(t *testing.T) {
	p := string(make([]byte, 300))
	out := run(relay.Chunk, false, []string{p}, false)
	require.Equal(t, "12c\r\n"+p+"\r\n0\r\n\r\n", out)
}

func TestEndIsWrittenOnce(t *testing.T) {
	var r relay.Relay
	r.Reset(relay.Chunk, false, time.Now())
	require.Equal(t, "0\r\n\r\n", string(r.End(nil)))
	require.Empty(t, r.End(nil))
}

// Every line ending the SSE format allows ends an event on a blank line; the error event
// follows in the line ending the stream used last.
func TestErrorEventAfterEveryEventBoundaryForm(t *testing.T) {
	boundaries := map[string]struct{ stream, event string }{
		"LF LF":           {"data: a\n\n", string(errEvent)},
		"CRLF CRLF":       {"data: a\r\n\r\n", errEventCRLF},
		"CR CR":           {"data: a\r\r", errEventCR},
		"CRLF LF":         {"data: a\r\n\n", string(errEvent)},
		"LF CRLF":         {"data: a\n\r\n", errEventCRLF},
		"comment then LF": {": keep-alive\n\n", string(errEvent)},
		"two events CRLF": {"data: a\r\n\r\ndata: b\r\n\r\n", errEventCRLF},
		"nothing yet":     {"", string(errEvent)},
	}
	for name, c := range boundaries {
		t.Run(name, func(t *testing.T) {
			reads := []string{}
			if c.stream != "" {
				reads = append(reads, c.stream)
			}
			out := run(relay.Close, true, reads, true)
			require.Equal(t, c.stream+c.event, out)
			chunked := run(relay.Chunk, true, reads, true)
			require.Contains(t, chunked, c.event)
			require.True(t, len(chunked) > 5 && chunked[len(chunked)-5:] == "0\r\n\r\n", "ends with the last chunk: %q", chunked)
		})
	}
}

// Inside an event the error event would merge into it: the client gets a cut instead.
func TestNoErrorEventInsideAnEvent(t *testing.T) {
	for name, stream := range map[string]string{
		"mid line":           "data: a",
		"line ended LF":      "data: a\n",
		"line ended CRLF":    "data: a\r\n",
		"line ended CR":      "data: a\r",
		"second line opened": "data: a\n\ndata: b",
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, stream, run(relay.Close, true, []string{stream}, true))
			require.NotContains(t, run(relay.Chunk, true, []string{stream}, true), "event: error")
		})
	}
}

func TestBoundaryIsTheSameForEverySplit(t *testing.T) {
	stream := "data: a\r\n\r\ndata: b\r\r: c\n\n"
	for cut := 0; cut <= len(stream); cut++ {
		for cut2 := cut; cut2 <= len(stream); cut2++ {
			reads := []string{stream[:cut], stream[cut:cut2], stream[cut2:]}
			require.Equal(t, stream+string(errEvent), run(relay.Payload, true, reads, true), "split %d/%d", cut, cut2)
		}
	}
}

func TestRawFramingsNeverInjectAnEvent(t *testing.T) {
	for _, f := range []relay.Framing{relay.Length, relay.ChunkedRaw} {
		require.Equal(t, "data: a\n\n", run(f, true, []string{"data: a\n\n"}, true), f.String())
	}
}

func TestNonSSEFailureGetsNoEvent(t *testing.T) {
	require.Equal(t, "5\r\n{\"a\":\r\n", run(relay.Chunk, false, []string{"{\"a\":"}, true), "the body is cut, no last chunk")
	require.NotContains(t, run(relay.Chunk, false, []string{"x\n\n"}, true), "event: error")
}

func TestTimingObservations(t *testing.T) {
	var r relay.Relay
	t0 := time.Unix(100, 0)
	r.Reset(relay.Chunk, true, t0)
	buf := make([]byte, relay.Headroom+8+relay.Tailroom)
	_, _, o := r.Frame(buf, 0, t0.Add(time.Second))
	require.Equal(t, relay.ObsNone, o.Kind, "an empty read is no observation")
	_, _, o = r.Frame(buf, 8, t0.Add(300*time.Millisecond))
	require.Equal(t, relay.Obs{Kind: relay.ObsFirst, D: 300 * time.Millisecond}, o)
	_, _, o = r.Frame(buf, 8, t0.Add(350*time.Millisecond))
	require.Equal(t, relay.Obs{Kind: relay.ObsGap, D: 50 * time.Millisecond}, o)
	require.EqualValues(t, 16, r.Bytes())

	r.Reset(relay.Length, false, t0)
	_, _, o = r.Frame(buf, 8, t0.Add(time.Second))
	require.Equal(t, relay.ObsNone, o.Kind, "a Content-Length body is not a stream")
}

func TestPlan(t *testing.T) {
	parse := func(head string) *http1.Response {
		var r http1.Response
		require.NoError(t, r.ParseResponseHead([]byte(head), nil))
		return &r
	}
	req11 := &http1.Request{Major: 1, Minor: 1, KeepAlive: true}
	req10 := &http1.Request{Major: 1, Minor: 0, KeepAlive: true}
	cases := []struct {
		name  string
		head  string
		req   *http1.Request
		head2 bool
		want  relay.Framing
		ka    bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", req11, false, relay.Length, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", req11, false, relay.ChunkedRaw, true},
		{"chunked sse", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n", req11, false, relay.Chunk, true},
		{"until close", "HTTP/1.1 200 OK\r\n\r\n", req11, false, relay.Chunk, true},
		{"chunked to 1.0", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", req10, false, relay.Close, false},
		{"until close to 1.0", "HTTP/1.1 200 OK\r\n\r\n", req10, false, relay.Close, false},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", req11, true, relay.None, true},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", req11, false, relay.None, true},
		{"304", "HTTP/1.1 304 Not Modified\r\n\r\n", req11, false, relay.None, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, ka := relay.Plan(parse(c.head), c.head2, c.req)
			require.Equal(t, c.want, f)
			require.Equal(t, c.ka, ka)
		})
	}
}

// keepRun relays the upstream reads as the pipeline's relay step does with Keep: each read
// lands after the bytes kept back by the last one, and what ended goes out while the start of
// an open event waits. It returns each client write; failed makes the upstream fail after the
// last read (the kept bytes are dropped and Fail adds its event), otherwise the body ends.
func keepRun(f relay.Framing, reads []string, limit int, failed bool) []string {
	var r relay.Relay
	t0 := time.Unix(0, 0)
	r.Reset(f, true, t0)
	var writes []string
	var kept []byte
	for i, p := range reads {
		buf := make([]byte, relay.Headroom+len(kept)+len(p)+relay.Tailroom)
		copy(buf[relay.Headroom:], kept)
		copy(buf[relay.Headroom+len(kept):], p)
		tail := r.Keep([]byte(p), limit)
		send := len(kept) + len(p) - tail
		kept = append([]byte(nil), buf[relay.Headroom+send:relay.Headroom+send+tail]...)
		if lo, hi, _ := r.FrameKept(buf, send, t0.Add(time.Duration(i+1))); hi > lo {
			writes = append(writes, string(buf[lo:hi]))
		}
	}
	var tail []byte
	if failed {
		r.Drop()
		tail = r.Fail(nil, errEvent)
	} else {
		buf := make([]byte, relay.Headroom+len(kept)+relay.Tailroom)
		copy(buf[relay.Headroom:], kept)
		if lo, hi, _ := r.FrameKept(buf, len(kept), t0); hi > lo {
			writes = append(writes, string(buf[lo:hi]))
		}
		tail = r.End(nil)
	}
	if len(tail) > 0 {
		writes = append(writes, string(tail))
	}
	return writes
}

// bytesOf splits s into one-byte reads, as an upstream that writes a byte at a time is read.
func bytesOf(s string) []string {
	reads := make([]string, len(s))
	for i := range s {
		reads[i] = s[i : i+1]
	}
	return reads
}

// An upstream that writes its events a byte at a time costs the client one write per event.
func TestKeepSendsEachEventWhenItsBlankLineComes(t *testing.T) {
	stream := "data: a\n\ndata: bb\r\n\r\n: c\r\r"
	got := keepRun(relay.Payload, bytesOf(stream), 1024, false)
	// A CR ends the blank line and the event: its LF, read alone, goes with the next event.
	require.Equal(t, []string{"data: a\n\n", "data: bb\r\n\r", "\n: c\r\r"}, got)
	chunked := keepRun(relay.Chunk, bytesOf(stream), 1024, false)
	require.Equal(t, []string{"9\r\ndata: a\n\n\r\n", "b\r\ndata: bb\r\n\r\r\n", "6\r\n\n: c\r\r\r\n", "0\r\n\r\n"}, chunked)
	// Read whole, a CRLF event goes out whole, its LF included.
	require.Equal(t, []string{"data: bb\r\n\r\n"}, keepRun(relay.Payload, []string{"data: bb\r\n\r\n"}, 1024, false))
}

// The events a read ends go out at once; only the start of the next waits.
func TestKeepHoldsBackOnlyTheOpenEvent(t *testing.T) {
	got := keepRun(relay.Payload, []string{"data: a\n\ndata: b", "b\n", "\ndata: c\n\n"}, 1024, false)
	require.Equal(t, []string{"data: a\n\n", "data: bb\n\ndata: c\n\n"}, got)
}

// An event longer than the limit goes out in pieces, as read; the body's end sends what is left.
func TestKeepSendsAnEventLongerThanTheLimit(t *testing.T) {
	got := keepRun(relay.Payload, []string{"data: 01", "23456789", "abc"}, 8, false)
	require.Equal(t, []string{"data: 0123456789", "abc"}, got)
}

// An upstream that fails inside an event: the client gets the events that ended and the error
// event, never the cut event (a client would discard it unread).
func TestErrorEventReplacesAnEventCutShort(t *testing.T) {
	got := keepRun(relay.Payload, bytesOf("data: a\n\ndata: b"), 1024, true)
	require.Equal(t, []string{"data: a\n\n", string(errEvent)}, got)
	// A cut event already partly sent (longer than the limit) leaves the error event out.
	got = keepRun(relay.Payload, []string{"data: a\n\ndata: 0123456789", "xyz"}, 8, true)
	require.Equal(t, []string{"data: a\n\ndata: 0123456789", "xyz"}, got)
}

// A body that is not an event stream is never held back.
func TestKeepHoldsNothingOfOtherBodies(t *testing.T) {
	var r relay.Relay
	r.Reset(relay.Chunk, false, time.Now())
	require.Zero(t, r.Keep([]byte("data: a"), 1024))
	r.Reset(relay.ChunkedRaw, true, time.Now())
	require.Zero(t, r.Keep([]byte("data: a"), 1024), "raw framings pass the wire bytes as read")
}
