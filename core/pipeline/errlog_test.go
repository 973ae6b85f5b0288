package pipeline

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestUpstreamFailureLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	l := errLog{log: slog.New(slog.NewTextHandler(&buf, nil))}
	for i := 0; i < 100; i++ {
		l.upstreamFailed("api", "http://10.0.0.1:8000", "response head", errors.New("connection refused"))
	}
	lines := strings.Count(buf.String(), "\n")
	if lines != 1 {
		t.Fatalf("100 failures within a second wrote %d lines, want 1:\n%s", lines, buf.String())
	}
	if !strings.Contains(buf.String(), "router=api") || !strings.Contains(buf.String(), "connection refused") {
		t.Fatalf("log line lacks the router or the error: %s", buf.String())
	}
	if l.limit.Suppressed() != 99 {
		t.Fatalf("suppressed %d, want 99", l.limit.Suppressed())
	}
}
