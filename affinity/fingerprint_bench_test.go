package affinity

import (
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
