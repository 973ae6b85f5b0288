package sse

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/steps"
	"github.com/stretchr/testify/require"
)

// collector records events as strings "type|id|data".
type collector struct{ events []string }

func (c *collector) OnEvent(ev Event) {
	c.events = append(c.events, fmt.Sprintf("%s|%s|%s", ev.Type, ev.ID, ev.Data))
}

func scanWhole(t *testing.T, stream string, max int) ([]string, error) {
	t.Helper()
	s := Scanner{MaxEventBytes: max}
	var c collector
	err := s.Feed([]byte(stream), &c)
	return c.events, err
}

func scanSplit(stream string, max int, cuts ...int) ([]string, error) {
	s := Scanner{MaxEventBytes: max}
	var c collector
	prev := 0
	for _, cut := range append(cuts, len(stream)) {
		// A fresh copy per slice, overwritten afterwards: the scanner must
		// not keep references into it.
		buf := []byte(stream[prev:cut])
		err := s.Feed(buf, &c)
		for i := range buf {
			buf[i] = '#'
		}
		if err != nil {
			return c.events, err
		}
		prev = cut
	}
	return c.events, nil
}

var streams = []struct {
	name   string
	stream string
	want   []string
}{
	{"openai chunks",
		"data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n",
		[]string{`||{"id":"1","choices":[{"delta":{"content":"Hi"}}]}`, "||[DONE]"}},
	{"fields",
		"event: add\nid: 7\ndata: a\n\n",
		[]string{"add|7|a"}},
	{"multi-line data",
		"data: one\ndata:two\ndata:  three\ndata\ndata:\n\n",
		[]string{"||one\ntwo\n three\n\n"}},
	{"CR LF CRLF mix",
		"data: a\rdata: b\r\ndata: c\n\r\n" + "event: x\rdata: d\r\r",
		[]string{"||a\nb\nc", "x||d"}},
	{"comments and unknown fields",
		": keep-alive\n:\nfoo: bar\ndata: x\n: inside\nDATA: ignored\n\n",
		[]string{"||x"}},
	{"id persists, NUL ignored, type resets",
		"id: 1\nevent: e\ndata: a\n\ndata: b\n\nid: 2\x00\ndata: c\n\nid\ndata: d\n\n",
		[]string{"e|1|a", "|1|b", "|1|c", "||d"}},
	{"no data no event",
		"event: ping\n\nid: 5\n\n\n\ndata: z\n\n",
		[]string{"|5|z"}},
	{"unterminated last event dropped",
		"data: a\n\ndata: b\n",
		[]string{"||a"}},
	{"byte order mark skipped once",
		"\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\n",
		[]string{"||a"}}, // the second BOM is part of a field name
	{"partial BOM is content",
		"\xEF\xBBdata: a\n\ndata: b\n\n",
		[]string{"||b"}},
	{"colon without space, value with colons",
		"data:a:b: c\n\n",
		[]string{"||a:b: c"}},
	{"retry field is not an event",
		"retry: 3000\ndata: r\n\n",
		[]string{"||r"}},
}

func TestScannerEvents(t *testing.T) {
	for _, c := range streams {
		t.Run(c.name, func(t *testing.T) {
			got, err := scanWhole(t, c.stream, 0)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
				t.Fatalf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

// TestScannerSplitAtEveryBoundary feeds each stream in two slices at every
// cut point, and byte by byte, and expects exactly the whole-stream events.
func TestScannerSplitAtEveryBoundary(t *testing.T) {
	for _, c := range streams {
		t.Run(c.name, func(t *testing.T) {
			for cut := 0; cut <= len(c.stream); cut++ {
				got, err := scanSplit(c.stream, 0, cut)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
					t.Fatalf("cut %d: got %q\nwant %q", cut, got, c.want)
				}
			}
			cuts := make([]int, 0, len(c.stream))
			for i := 1; i < len(c.stream); i++ {
				cuts = append(cuts, i)
			}
			got, err := scanSplit(c.stream, 0, cuts...)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
				t.Fatalf("byte by byte: got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestScannerRetry(t *testing.T) {
	var s Scanner
	var c collector
	if _, ok := s.Retry(); ok {
		t.Fatal("retry set on a fresh scanner")
	}
	s.Feed([]byte("retry: 2500\nretry: 1x\nretry:\n\n"), &c)
	if ms, ok := s.Retry(); !ok || ms != 2500 {
		t.Fatalf("retry = %d, %v", ms, ok)
	}
	s.Feed([]byte("retry: 99999999999999999999999\n"), &c)
	if ms, _ := s.Retry(); ms != 1<<63-1 {
		t.Fatalf("retry did not saturate: %d", ms)
	}
	s.Reset()
	if _, ok := s.Retry(); ok {
		t.Fatal("retry survived Reset")
	}
}

func TestScannerMaxEventBytes(t *testing.T) {
	const max = 16
	cases := []struct {
		name, stream string
		want         []string
	}{
		{"long line", "data: a\n\ndata: " + strings.Repeat("x", 20) + "\n\ndata: b\n\n", []string{"||a"}},
		{"long unterminated line", "data: a\n\n: " + strings.Repeat("x", 20), []string{"||a"}},
		{"long joined data", "data: a\n\n" + strings.Repeat("data: 1234567\n", 3) + "\n", []string{"||a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for cut := 0; cut <= len(c.stream); cut++ {
				got, err := scanSplit(c.stream, max, cut)
				if !errors.Is(err, ErrEventTooLarge) {
					t.Fatalf("cut %d: err = %v", cut, err)
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
					t.Fatalf("cut %d: got %q, want %q", cut, got, c.want)
				}
			}
		})
	}
	// Exactly at the limit is fine; the error is sticky until Reset.
	s := Scanner{MaxEventBytes: max}
	var col collector
	if err := s.Feed([]byte("data:"+strings.Repeat("y", 11)+"\n\n"), &col); err != nil || len(col.events) != 1 {
		t.Fatalf("16-byte line: %v %q", err, col.events)
	}
	if err := s.Feed([]byte(strings.Repeat("z", 17)), &col); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v", err)
	}
	if err := s.Feed([]byte("data: ok\n\n"), &col); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("error not sticky: %v", err)
	}
	s.Reset()
	if err := s.Feed([]byte("data: ok\n\n"), &col); err != nil || col.events[len(col.events)-1] != "||ok" {
		t.Fatalf("after Reset: %v %q", err, col.events)
	}
}

// zeroCopy checks that Data points into the fed slice.
type zeroCopy struct {
	in    []byte
	seen  int
	moved int
}

func (z *zeroCopy) OnEvent(ev Event) {
	z.seen++
	if len(ev.Data) > 0 && !within(ev.Data, z.in) {
		z.moved++
	}
}

func within(b, in []byte) bool {
	if len(in) == 0 {
		return false
	}
	return &b[0] == &in[0] || (uintptrOf(b) >= uintptrOf(in) && uintptrOf(b)+uintptr(len(b)) <= uintptrOf(in)+uintptr(len(in)))
}

func TestScannerZeroCopy(t *testing.T) {
	in := []byte("data: {\"a\":1}\n\nid: 3\nevent: x\ndata: [DONE]\n\n")
	z := &zeroCopy{in: in}
	var s Scanner
	if err := s.Feed(in, z); err != nil {
		t.Fatal(err)
	}
	if z.seen != 2 || z.moved != 0 {
		t.Fatalf("seen %d, copied %d", z.seen, z.moved)
	}
}

// TestScannerCRLinesWorkIsLinear: a stream whose lines end in CR alone (valid SSE) is scanned
// in a few steps per byte, whole or byte by byte. Looking for the first CR or LF afresh at
// every line searched the rest of the slice for an LF each time: some 700 million bytes
// searched for this 80 KB slice.
func TestScannerCRLinesWorkIsLinear(t *testing.T) {
	for _, tail := range []string{"", "\n"} {
		stream := strings.Repeat("data: a\r\r", 9000) + tail
		for _, split := range []bool{false, true} {
			var c collector
			s := Scanner{}
			work := steps.Count(func() {
				if !split {
					require.NoError(t, s.Feed([]byte(stream), &c))
					return
				}
				for i := range len(stream) {
					require.NoError(t, s.Feed([]byte(stream[i:i+1]), &c))
				}
			})
			require.Len(t, c.events, 9000)
			require.Less(t, work, int64(12*len(stream)), "tail %q, byte by byte %v", tail, split)
		}
	}
}

// TestScannerSkipOversizedDropsOnlyThatEvent: with SkipOversized an event over the limit is
// dropped, whichever line makes it so and however the stream is split, for every line ending,
// and the events around it come through whole.
func TestScannerSkipOversizedDropsOnlyThatEvent(t *testing.T) {
	const max = 16
	big := strings.Repeat("x", 40)
	cases := []struct {
		name, stream string
		want         []string
	}{
		{"long data line", "data: a\n\ndata: " + big + "\n\ndata: b\n\n", []string{"||a", "||b"}},
		{"long line after a short one", "data: a\n\nevent: t\ndata: s\ndata: " + big + "\ndata: more\n\ndata: b\n\n", []string{"||a", "||b"}},
		{"long comment", "data: a\n\n: " + big + "\ndata: c\n\ndata: b\n\n", []string{"||a", "||b"}},
		{"long joined data", "data: a\n\n" + strings.Repeat("data: 1234567\n", 3) + "\ndata: b\n\n", []string{"||a", "||b"}},
		{"two oversized in a row", "data: " + big + "\n\ndata: " + big + "\n\ndata: b\n\n", []string{"||b"}},
		{"id before the long line stays the last id", "id: 5\ndata: " + big + "\n\ndata: b\n\n", []string{"|5|b"}},
		{"long unterminated line at the end", "data: a\n\ndata: " + big, []string{"||a"}},
	}
	for _, c := range cases {
		for _, eol := range []string{"\n", "\r\n", "\r"} {
			stream := strings.ReplaceAll(c.stream, "\n", eol)
			t.Run(fmt.Sprintf("%s/%q", c.name, eol), func(t *testing.T) {
				for cut := 0; cut <= len(stream); cut++ {
					for cut2 := cut; cut2 <= len(stream); cut2 += 7 {
						s := Scanner{MaxEventBytes: max, SkipOversized: true}
						var col collector
						prev := 0
						for _, end := range []int{cut, cut2, len(stream)} {
							buf := []byte(stream[prev:end])
							require.NoError(t, s.Feed(buf, &col))
							for i := range buf {
								buf[i] = '#' // the scanner keeps no reference into a fed slice
							}
							prev = end
						}
						require.Equal(t, c.want, col.events, "cuts %d, %d", cut, cut2)
						require.Positive(t, s.Dropped(), "cuts %d, %d", cut, cut2)
					}
				}
			})
		}
	}
	s := Scanner{MaxEventBytes: max, SkipOversized: true}
	var col collector
	require.NoError(t, s.Feed([]byte("data: "+big+"\n\ndata: "+big+"\n\n"), &col))
	require.EqualValues(t, 2, s.Dropped())
	s.Reset()
	require.Zero(t, s.Dropped())
	require.True(t, s.SkipOversized, "Reset keeps the setting")
}

// TestScannerSkipOversizedIsLinear: dropping an enormous event costs steps in proportion to
// its length, split into many slices or not.
func TestScannerSkipOversizedIsLinear(t *testing.T) {
	for _, n := range []int{1 << 16, 1 << 20} {
		stream := []byte("data: " + strings.Repeat("x", n) + "\n\ndata: b\n\n")
		s := Scanner{MaxEventBytes: 1024, SkipOversized: true}
		var col collector
		cost := steps.Count(func() {
			for p := stream; len(p) > 0; {
				k := min(len(p), 4096)
				require.NoError(t, s.Feed(p[:k], &col))
				p = p[k:]
			}
		})
		require.Equal(t, []string{"||b"}, col.events)
		require.Less(t, cost, int64(4*len(stream)), "steps for %d bytes", len(stream))
	}
}
