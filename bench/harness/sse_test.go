package harness

import (
	"strings"
	"testing"
)

const openAIStream = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
	": keep-alive comment\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\": \"lo\"}}]}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"x\"}}]}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":null}}],\"usage\":{\"prompt_tokens\":3}}\n\n" +
	"data: [DONE]\n\n"

func scanAll(chunks []string) *sseScanner {
	s := &sseScanner{}
	s.reset()
	for i, c := range chunks {
		s.feed([]byte(c), int64(i+1))
	}
	return s
}

func TestSSEScannerOpenAIStream(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		in := strings.ReplaceAll(openAIStream, "\n", eol)
		s := scanAll([]string{in})
		if !s.done || s.sseErr || s.events != 2 {
			t.Errorf("eol %q: done=%v err=%v events=%d, want done, no error, 2 content events", eol, s.done, s.sseErr, s.events)
		}
	}
}

func TestSSEScannerSplitAtEveryByte(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		in := strings.ReplaceAll(openAIStream, "\n", eol)
		for cut := 1; cut < len(in); cut++ {
			s := scanAll([]string{in[:cut], in[cut:]})
			if !s.done || s.events != 2 {
				t.Fatalf("eol %q cut %d: done=%v events=%d", eol, cut, s.done, s.events)
			}
		}
		// One byte per feed: the CRLF pair is split too.
		parts := make([]string, len(in))
		for i := range in {
			parts[i] = in[i : i+1]
		}
		if s := scanAll(parts); !s.done || s.events != 2 {
			t.Fatalf("eol %q byte by byte: done=%v events=%d", eol, s.done, s.events)
		}
	}
}

func TestSSEScannerTimesContentEventsWhenComplete(t *testing.T) {
	s := &sseScanner{}
	var first int64
	var gaps []int64
	s.onFirst = func(ns int64) { first = ns }
	s.onGap = func(ns int64) { gaps = append(gaps, ns) }
	s.reset()
	s.feed([]byte("data: {\"delta\":{\"role\":\"assistant\"}}\n\n"), 5)
	s.feed([]byte("data: {\"delta\":{\"content\":\"a\"}}\n"), 10) // not dispatched yet
	s.feed([]byte("\n"), 12)
	s.feed([]byte("data: {\"delta\":{\"content\":\"b\"}}\n\ndata: {\"delta\":{\"content\":\"c\"}}\n\n"), 40)
	if first != 12 {
		t.Errorf("first content at %d, want 12 (the blank line dispatches)", first)
	}
	if len(gaps) != 2 || gaps[0] != 28 || gaps[1] != 0 {
		t.Errorf("gaps = %v, want [28 0]", gaps)
	}
}

func TestSSEScannerErrorsAndIncompleteDone(t *testing.T) {
	s := scanAll([]string{"data: {\"delta\":{\"content\":\"a\"}}\n\nevent: error\ndata: {\"message\":\"upstream\"}\n\n"})
	if !s.sseErr || s.done {
		t.Errorf("event: error: err=%v done=%v", s.sseErr, s.done)
	}
	s = scanAll([]string{"data: {\"error\":{\"message\":\"boom\"}}\n\n"})
	if !s.sseErr {
		t.Error(`data: {"error"…} not flagged`)
	}
	// WHATWG: an event without its terminating blank line is not dispatched.
	s = scanAll([]string{"data: {\"delta\":{\"content\":\"a\"}}\n\ndata: [DONE]\n"})
	if s.done {
		t.Error("[DONE] without the blank line counted as done")
	}
}

func TestHasContent(t *testing.T) {
	cases := map[string]bool{
		`{"delta":{"content":"x"}}`:                true,
		`{"delta":{"content" : "x"}}`:              true,
		`{"delta":{"content":""}}`:                 false,
		`{"delta":{"content":null}}`:               false,
		`{"delta":{"reasoning_content":"x"}}`:      false,
		`{"delta":{"role":"assistant"}}`:           false,
		`{"a":{"content":""},"b":{"content":"y"}}`: true,
		`"content"`:   false,
		`"content":"`: false,
	}
	for in, want := range cases {
		if got := hasContent([]byte(in)); got != want {
			t.Errorf("hasContent(%s) = %v, want %v", in, got, want)
		}
	}
}

func TestSSEScannerLongLineBounded(t *testing.T) {
	s := &sseScanner{}
	s.reset()
	big := strings.Repeat("x", 64<<10)
	for i := 0; i < 40; i++ { // 2.5 MiB line in pieces
		s.feed([]byte(big), 1)
	}
	// The buffer bound itself is sse.Scanner's (MaxEventBytes, tested in package sse).
	s.feed([]byte("\n\ndata: [DONE]\n\n"), 2)
	if !s.done {
		t.Error("scanner did not recover after a long line")
	}
}
