package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/relay"
)

// errEvent (LF line endings, as the gateway writes it) in a CRLF and in a CR stream.
var (
	errEventCRLF = strings.ReplaceAll(string(errEvent), "\n", "\r\n")
	errEventCR   = strings.ReplaceAll(string(errEvent), "\n", "\r")
)

// An upstream cut anywhere in an event stream: the client gets the events that ended, closed
// so that a client splitting events on "\r\n\r\n", on "\n\n" after turning CRLF into LF, or
// by the SSE rules reads them alike, then the error event as an event of its own in the
// stream's line endings. A CR that ended the last event, cut before its LF, gets that LF
// (CRLF is one line ending, so no blank line is added); the start of an event cut short is not
// sent, whatever the line it was cut in.
func TestErrorEventAfterEachCutPosition(t *testing.T) {
	cases := []struct {
		name   string
		stream string // the upstream's bytes up to the cut
		want   string // the client's payload
	}{
		{"CRLF: between the blank line's CR and LF", "data: a\r\n\r", "data: a\r\n\r\n" + errEventCRLF},
		{"CRLF: after the blank line", "data: a\r\n\r\n", "data: a\r\n\r\n" + errEventCRLF},
		{"CRLF: after a line's CRLF, blank line to come", "data: a\r\n\r\ndata: b\r\n", "data: a\r\n\r\n" + errEventCRLF},
		{"CRLF: between a line's CR and LF", "data: a\r\n\r\ndata: b\r", "data: a\r\n\r\n" + errEventCRLF},
		{"CRLF: mid line", "data: a\r\n\r\ndata: b", "data: a\r\n\r\n" + errEventCRLF},
		{"CRLF: mid line, the last event's LF read with it", "data: a\r\n\r\ndata: b\r\n\r\nda", "data: a\r\n\r\ndata: b\r\n\r\n" + errEventCRLF},
		{"mid the first line: nothing sent", "da", string(errEvent)},
		{"CRLF: comment event cut after CR", ": ping\r\n\r", ": ping\r\n\r\n" + errEventCRLF},
		{"LF: after the blank line", "data: a\n\n", "data: a\n\n" + string(errEvent)},
		{"LF: after a lone LF, blank line to come", "data: a\n\ndata: b\n", "data: a\n\n" + string(errEvent)},
		{"LF: mid line", "data: a\n\ndata: b", "data: a\n\n" + string(errEvent)},
		{"CR: after the blank line", "data: a\r\r", "data: a\r\r" + errEventCR},
		{"CR: after a lone CR, blank line to come", "data: a\r\rdata: b\r", "data: a\r\r" + errEventCR},
		{"CR: mid line", "data: a\r\rdata: b", "data: a\r\r" + errEventCR},
		{"LF then a CR blank line", "data: a\n\r", "data: a\n\r\n" + string(errEvent)},
		{"CRLF then an LF blank line", "data: a\r\n\n", "data: a\r\n\n" + string(errEvent)},
		{"nothing", "", string(errEvent)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Every split of the upstream's bytes into reads gives the client the same bytes.
			splits := [][]string{bytesOf(c.stream)}
			for i := 0; i <= len(c.stream); i++ {
				splits = append(splits, []string{c.stream[:i], c.stream[i:]})
			}
			for _, reads := range splits {
				got := strings.Join(keepRun(relay.Payload, reads, 1024, true), "")
				require.Equal(t, c.want, got, "reads %q", reads)
			}
			// Re-chunked, the same payload, its chunk sizes right, then the last chunk.
			payload, ended := dechunk(t, strings.Join(keepRun(relay.Chunk, splits[0], 1024, true), ""))
			require.True(t, ended, "the body ends with the last chunk")
			require.Equal(t, c.want, payload)
		})
	}
}

// dechunk decodes the chunked body b, which must be valid chunked coding with nothing after
// its end, and reports whether the last chunk came.
func dechunk(t *testing.T, b string) (string, bool) {
	t.Helper()
	var d http1.ChunkedDecoder
	var out []byte
	for rest := []byte(b); len(rest) > 0; {
		data, k, err := d.Next(rest)
		require.NoError(t, err, "chunked coding of %q", b)
		out = append(out, data...)
		rest = rest[k:]
		if d.Done() {
			require.Empty(t, rest, "bytes after the last chunk")
			break
		}
		require.NotZero(t, k, "an incomplete chunk in %q", b)
	}
	return string(out), d.Done()
}

// An event that went out in part (longer than the limit) cannot be closed without a client
// dispatching its start as if it were whole: the client gets no bytes after it, and the
// caller's close ends the stream (an SSE client discards an event open at the end).
func TestNoErrorEventAfterAnEventSentInPart(t *testing.T) {
	for _, stream := range []string{
		"data: a\r\n\r\ndata: 0123456789",
		"data: a\r\n\r\ndata: 0123456789\r",
		"data: a\r\n\r\ndata: 0123456789\r\n",
		"data: a\n\ndata: 0123456789\n",
		"data: a\r\rdata: 0123456789\r",
	} {
		got := keepRun(relay.Payload, []string{stream}, 8, true)
		require.Equal(t, stream, strings.Join(got, ""), "%q", stream)
	}
}

// InEvent says whether a stream that ended where its bytes end was inside an event: after any
// byte of an event whose blank line had not come (inside a line, or after a whole line that is
// not a comment), whatever the line endings, and however the bytes were split into reads; never at an event boundary (a CR that ended the blank line
// counts, its LF to come or not) or before any byte. A stream whose events the relay does not
// follow (not an event stream, or wire bytes) is never inside one.
func TestInEventAtEachEndOfStream(t *testing.T) {
	for _, c := range []struct {
		stream string
		in     bool
	}{
		{"", false},
		{"data: a\n\n", false},
		{"data: a\r\n\r\n", false},
		{"data: a\r\n\r", false},
		{"data: a\r\r", false},
		{": ping\n\n", false},
		{"\n", false}, // a blank line alone dispatches nothing and opens nothing
		// Whole comment lines after the last event open none: an SSE client ignores them, and
		// a stream closed after them lost nothing (a keep-alive comment before the close).
		{": ping\n", false},
		{"data: a\n\n: ping\n", false},
		{"data: a\r\n\r\n: ping\r\n", false},
		{"data: a\r\r: ping\r:\r", false},
		{"data: a\n\n: ping\ndata: b\n", true},
		{": ping\ndata: b", true},
		{"d", true},
		{"data: a", true},
		{"data: a\n", true},
		{"data: a\r", true},
		{"data: a\r\n", true},
		{": ping", true},
		{"data: a\n\ndata: b", true},
		{"data: a\r\n\r\ndata: b\r\n", true},
		{"data: a\r\rd", true},
	} {
		splits := [][]string{{c.stream}, bytesOf(c.stream)}
		for i := 0; i <= len(c.stream); i++ {
			splits = append(splits, []string{c.stream[:i], c.stream[i:]})
		}
		for _, f := range []relay.Framing{relay.Chunk, relay.Close, relay.Payload} {
			for _, reads := range splits {
				var r relay.Relay
				r.Reset(f, true, time.Unix(0, 0))
				for _, p := range reads {
					r.Keep([]byte(p), 1024)
				}
				require.Equal(t, c.in, r.InEvent(), "%s %q", f, reads)
			}
		}
		var plain, raw relay.Relay
		plain.Reset(relay.Chunk, false, time.Unix(0, 0))
		raw.Reset(relay.ChunkedRaw, true, time.Unix(0, 0))
		plain.Keep([]byte(c.stream), 1024)
		raw.Keep([]byte(c.stream), 1024)
		require.False(t, plain.InEvent(), "not an event stream: %q", c.stream)
		require.False(t, raw.InEvent(), "wire bytes: %q", c.stream)
	}
}
