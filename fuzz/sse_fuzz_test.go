package fuzz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-gw/sluice/sse"
)

// sseRecorder copies every event (the scanner's slices are only valid during
// OnEvent) and exercises the per-event helpers.
type sseRecorder struct {
	events   []string
	typeData bool // record type and data only
}

func (r *sseRecorder) OnEvent(ev sse.Event) {
	if r.typeData {
		r.events = append(r.events, fmt.Sprintf("%q|%q", ev.Type, ev.Data))
	} else {
		r.events = append(r.events, fmt.Sprintf("%q|%q|%q", ev.Type, ev.ID, ev.Data))
	}
	sse.IsDone(ev.Data)
	sse.ParseUsage(ev.Data)
}

// feedSSE feeds stream in slices of at most step bytes (0: all at once),
// each a fresh buffer that is scribbled over afterwards, so that a scanner
// keeping a reference into the caller's slice shows up as a difference.
func feedSSE(stream []byte, max, step int) ([]string, error) {
	return feedSSEWith(sse.Scanner{MaxEventBytes: max}, &sseRecorder{}, stream, step)
}

// feedSSEWith is feedSSE with a scanner and a recorder of the caller's.
func feedSSEWith(s sse.Scanner, r *sseRecorder, stream []byte, step int) ([]string, error) {
	if step <= 0 {
		step = len(stream) + 1
	}
	for len(stream) > 0 {
		n := min(step, len(stream))
		buf := bytes.Clone(stream[:n])
		err := s.Feed(buf, r)
		for i := range buf {
			buf[i] = 0xAA
		}
		if err != nil {
			return r.events, err
		}
		stream = stream[n:]
	}
	return r.events, nil
}

// sseCost bounds the work of scanning a stream whole and byte by byte, with the default
// limit and with a small one.
var sseCost = linearCost{PerByte: 48, Fixed: 64}

// FuzzSSE checks that the SSE scanner never panics, that feeding a
// stream whole, byte by byte, or in slices of a fuzzed size gives the same
// events and the same error, with the default limit and with a small one,
// and that its work grows linearly with the stream. With SkipOversized and a
// small limit it never fails, and its events are those of an unbounded
// scanner in order with some left out (an id read after an oversized line
// is skipped with the event, so only types and data are compared).
func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\ndata: [DONE]\n\n",
		"event: add\nid: 7\ndata: a\ndata: b\n\n",
		"data: a\rdata: b\r\ndata: c\n\r\n",
		": comment\nretry: 100\nid: 1\x00\ndata\n\n",
		"\xEF\xBB\xBFdata: bom\n\n",
		"\xEF\xBBdata: partial bom\n\n",
		"data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n",
		"data: " + string(bytes.Repeat([]byte("x"), 100)) + "\n\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		checkCost(t, sseCost, stream, func(stream []byte) {
			for _, max := range []int{0, 32} {
				_, _ = feedSSE(stream, max, 0)
				_, _ = feedSSE(stream, max, 1)
			}
			_, _ = feedSSEWith(sse.Scanner{MaxEventBytes: 32, SkipOversized: true}, &sseRecorder{}, stream, 1)
		})
		all, _ := feedSSEWith(sse.Scanner{MaxEventBytes: len(stream) + 1}, &sseRecorder{typeData: true}, stream, 0)
		for _, st := range []int{0, 1, int(step)} {
			kept, err := feedSSEWith(sse.Scanner{MaxEventBytes: 32, SkipOversized: true}, &sseRecorder{typeData: true}, stream, st)
			if err != nil {
				t.Fatalf("skipping oversized events, step %d: %v", st, err)
			}
			i := 0
			for _, ev := range kept {
				for i < len(all) && all[i] != ev {
					i++
				}
				if i == len(all) {
					t.Fatalf("step %d: event %s is not among the unbounded scanner's, in order: %v", st, ev, all)
				}
				i++
			}
		}
		for _, max := range []int{0, 32} {
			whole, errWhole := feedSSE(stream, max, 0)
			for _, st := range []int{1, int(step)} {
				got, err := feedSSE(stream, max, st)
				if !errors.Is(err, errWhole) {
					t.Fatalf("max %d step %d: error %v, whole gave %v", max, st, err, errWhole)
				}
				if fmt.Sprint(got) != fmt.Sprint(whole) {
					t.Fatalf("max %d step %d: events\n%v\nwhole gave\n%v", max, st, got, whole)
				}
			}
		}
	})
}

// usageReaderCost bounds the work of reading a body's usage whole and byte by byte.
var usageReaderCost = linearCost{PerByte: 8, Fixed: 64}

// FuzzUsageReader checks that the usage reader never panics, that its work grows linearly
// with the body, that feeding a body whole, byte by byte or in slices of a fuzzed size reads
// the same usage, and that for a well-formed JSON body it is the usage ParseUsage reads from
// the whole.
func FuzzUsageReader(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion","choices":[{"message":{"content":"a \"usage\": {}"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}`,
		`{"object":"list","data":[{"embedding":[0.1,-2e-3,[]]},{"embedding":"QUJD\\"}],"usage":{"prompt_tokens":7}}`,
		`{"usage":null,"x":{"usage":{"total_tokens":1}}}`,
		`{"a":"\\\\","usage":{"total_tokens":4}}`,
		`{ "usage" : { "total_tokens" : 3 } }`,
		`["usage",{"usage":{}}]`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		var r sse.UsageReader
		read := func(body []byte, st int) (sse.Usage, bool) {
			r.Reset()
			if st <= 0 {
				st = len(body) + 1
			}
			for len(body) > 0 {
				n := min(st, len(body))
				buf := bytes.Clone(body[:n])
				r.Feed(buf)
				for i := range buf {
					buf[i] = 0xAA // a reader keeping a reference into the caller's slice shows up
				}
				body = body[n:]
			}
			return r.Usage()
		}
		checkCost(t, usageReaderCost, body, func(body []byte) {
			read(body, 0)
			read(body, 1)
		})
		u, ok := read(body, 0)
		for _, st := range []int{1, int(step)} {
			if u2, ok2 := read(body, st); u2 != u || ok2 != ok {
				t.Fatalf("step %d: %+v %v, whole gave %+v %v", st, u2, ok2, u, ok)
			}
		}
		if json.Valid(body) {
			if want, wantOK := sse.ParseUsage(body); want != u || wantOK != ok {
				t.Fatalf("UsageReader read %+v %v, ParseUsage %+v %v", u, ok, want, wantOK)
			}
		}
	})
}
