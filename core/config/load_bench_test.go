package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-gw/sluice/configs"
)

// BenchmarkLoadDefault measures loading the embedded default configuration
// (parse, index, decode, validate). Not on the request path: it runs at
// start and on reload.
func BenchmarkLoadDefault(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadBytes(DefaultName, configs.Default); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadOllamaExample measures a larger, commented configuration.
func BenchmarkLoadOllamaExample(b *testing.B) {
	b.Setenv("JWT_SECRET", "an-example-secret-of-at-least-32-bytes")
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "examples", "ollama.toml"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadBytes("ollama.toml", data); err != nil {
			b.Fatal(err)
		}
	}
}
