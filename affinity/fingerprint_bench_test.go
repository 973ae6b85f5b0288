package affinity

import (
	"fmt"
	"testing"

	"github.com/sluice-gw/sluice/core/openai"
)

// BenchmarkFingerprintChat256KiB fingerprints a 256 KiB chat request, spans from Peek as the
// gateway has them; throughput is in bytes of body.
func BenchmarkFingerprintChat256KiB(b *testing.B) { benchFingerprint(b, 256<<10) }

// BenchmarkFingerprintChat4KiB is the common small request.
func BenchmarkFingerprintChat4KiB(b *testing.B) { benchFingerprint(b, 4<<10) }

func benchFingerprint(b *testing.B, size int) {
	body := chatBody(size)
	var r openai.Request
	if err := openai.Peek(openai.ChatCompletions, body, &r); err != nil {
		b.Fatal(err)
	}
	var p Print
	if err := Fingerprint(openai.ChatCompletions, body, r.Prompt, r.System, &p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Fingerprint(openai.ChatCompletions, body, r.Prompt, r.System, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFingerprintNested compares a body whose 4 MiB of numbers sit 4 objects deep with
// the same numbers 60 objects deep (within MaxDepth). Past MaxScanBytes of canonical stream
// nothing more is written, but every object around a byte scans it once to find where its
// members end before it writes them in key order, so that work grows with the body and with
// its nesting until the walk's budget stops it (ErrTooCostly at 60 deep).
func BenchmarkFingerprintNested(b *testing.B) {
	for _, depth := range []int{4, 60} {
		b.Run(fmt.Sprintf("objects=%d", depth), func(b *testing.B) {
			body := nestedBody(depth, 4<<20)
			var p Print
			if err := Fingerprint(openai.ChatCompletions, body, openai.Span{}, openai.Span{}, &p); err != nil && err != ErrTooCostly {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_ = Fingerprint(openai.ChatCompletions, body, openai.Span{}, openai.Span{}, &p)
			}
		})
	}
}

// nestedBody is a chat request whose one content part holds an array of about size bytes of
// numbers inside objects nested depth deep in all (the request, the message and the part count).
func nestedBody(depth, size int) []byte {
	b := []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"data"`)
	for range depth - 3 {
		b = append(b, `,"a":{"z":0`...)
	}
	b = append(b, `,"n":[1`...)
	for len(b) < size {
		b = append(b, ",1"...)
	}
	b = append(b, ']')
	for range depth - 3 {
		b = append(b, '}')
	}
	return append(b, `}]}]}`...)
}

// BenchmarkFingerprintNumbers fingerprints a chat request whose tools carry about 64 KiB of
// numbers, integers and floats in several spellings (enum lists and bounds of tool schemas
// are where numbers reach a prompt); throughput is in bytes of body.
func BenchmarkFingerprintNumbers(b *testing.B) {
	body := []byte(`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"number","enum":[0`)
	spellings := [...]string{"1", "0.5", "1.0e-3", "12345", "3.14159", "-2", "1e21", "100.0"}
	for i := 0; len(body) < 64<<10; i++ {
		body = append(body, ',')
		body = append(body, spellings[i%len(spellings)]...)
	}
	body = append(body, `]}}}}}],"messages":[{"role":"user","content":"pick one"}]}`...)
	var p Print
	if err := Fingerprint(openai.ChatCompletions, body, openai.Span{}, openai.Span{}, &p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Fingerprint(openai.ChatCompletions, body, openai.Span{}, openai.Span{}, &p); err != nil {
			b.Fatal(err)
		}
	}
}
