package sse

import (
	"strings"
	"testing"
)

// readUsage feeds data to a UsageReader in pieces of the given lengths (the rest in one last
// piece) and returns what it read.
func readUsage(r *UsageReader, data string, cuts ...int) (Usage, bool) {
	r.Reset()
	b := []byte(data)
	for _, n := range cuts {
		n = min(n, len(b))
		r.Feed(b[:n])
		b = b[n:]
	}
	r.Feed(b)
	return r.Usage()
}

// A UsageReader fed a body in pieces, wherever they are cut, reads what ParseUsage reads from
// the whole.
func TestUsageReaderReadsWhatParseUsageReads(t *testing.T) {
	var r UsageReader
	for _, c := range usageCases {
		if got, ok := readUsage(&r, c.data); ok != c.ok || got != c.want {
			t.Errorf("%s whole: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
		for cut := 1; cut < len(c.data); cut++ {
			if got, ok := readUsage(&r, c.data, cut); ok != c.ok || got != c.want {
				t.Errorf("%s cut at %d: got %+v %v, want %+v %v", c.name, cut, got, ok, c.want, c.ok)
			}
		}
		ones := make([]int, len(c.data))
		for i := range ones {
			ones[i] = 1
		}
		if got, ok := readUsage(&r, c.data, ones...); ok != c.ok || got != c.want {
			t.Errorf("%s byte by byte: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
	deep := `{"a":` + strings.Repeat("[", 100000) + `,"usage":{}}`
	if _, ok := readUsage(&r, deep); ok {
		t.Error("deep nesting: usage found inside unterminated array")
	}
}

// The usage of a body far larger than any buffer (an embeddings batch whose usage follows
// megabytes of vectors) is read, keeping only the usage object.
func TestUsageReaderReadsUsageAfterLargeBody(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i := range 2000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"object":"embedding","index":1,"embedding":[`)
		b.WriteString(strings.Repeat(`-0.0123456789,`, 99) + `0.5]}`)
	}
	b.WriteString(`,{"embedding":"AAAAvQ\"usage\":{}"}],"model":"m","usage":{"prompt_tokens":7000,"total_tokens":7000}}`)
	body := b.String()
	var r UsageReader
	u, ok := readUsage(&r, body, 4096, 65536, 1, 3, 100000)
	if !ok || u.PromptTokens != 7000 || u.TotalTokens != 7000 {
		t.Fatalf("got %+v %v from a %d-byte body", u, ok, len(body))
	}
	if cap(r.obj) > 1024 {
		t.Fatalf("kept %d bytes to read a usage object of 45", cap(r.obj))
	}
}

func TestUsageReaderRefusesAnOversizedUsage(t *testing.T) {
	var r UsageReader
	body := `{"usage":{"prompt_tokens":1,"x":"` + strings.Repeat("a", MaxUsageObjectBytes) + `"}}`
	if _, ok := readUsage(&r, body, 1000); ok {
		t.Fatal("a usage object over MaxUsageObjectBytes was read")
	}
}

func TestUsageReaderDoesNotAllocate(t *testing.T) {
	data := []byte(`{"id":"c","choices":[{"message":{"content":"hello \"there\""}}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":1}}}`)
	var r UsageReader
	r.Feed(data)
	if n := testing.AllocsPerRun(100, func() {
		r.Reset()
		r.Feed(data[:40])
		r.Feed(data[40:])
		if _, ok := r.Usage(); !ok {
			t.Fatal("no usage")
		}
	}); n != 0 {
		t.Fatalf("UsageReader allocates %v times", n)
	}
}

// The members before the usage object are followed, not checked: a body malformed there still
// gives the usage object after them, as its Usage documents, where ParseUsage refuses it.
func TestUsageReaderDoesNotCheckMembersBeforeUsage(t *testing.T) {
	var r UsageReader
	for _, body := range []string{
		`{"a":1 2,"usage":{"total_tokens":1}}`,
		`{a:1,"usage":{"total_tokens":1}}`,
		`{"a":1,,"usage":{"total_tokens":1}}`,
	} {
		if _, ok := ParseUsage([]byte(body)); ok {
			t.Fatalf("ParseUsage read %s", body)
		}
		if u, ok := readUsage(&r, body); !ok || u.TotalTokens != 1 {
			t.Fatalf("%s: got %+v %v", body, u, ok)
		}
	}
}
