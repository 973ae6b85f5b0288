package http1

import (
	"fmt"
	"testing"
)

func TestAppendChunkHeader(t *testing.T) {
	for _, n := range []int{1, 9, 10, 15, 16, 255, 4096, 1 << 20, 1<<62 + 5} {
		got := string(AppendChunkHeader([]byte("x"), n))
		if want := fmt.Sprintf("x%x\r\n", n); got != want {
			t.Errorf("AppendChunkHeader(%d) = %q, want %q", n, got, want)
		}
	}
	if string(LastChunk) != "0\r\n\r\n" {
		t.Errorf("LastChunk = %q", LastChunk)
	}
}

func TestAppendStatusLine(t *testing.T) {
	tests := []struct {
		major, minor, status int
		reason, want         string
	}{
		{1, 1, 200, "", "HTTP/1.1 200 OK\r\n"},
		{1, 0, 404, "", "HTTP/1.0 404 Not Found\r\n"},
		{1, 1, 200, "Fine", "HTTP/1.1 200 Fine\r\n"},
		{1, 1, 431, "", "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
		{1, 1, 299, "", "HTTP/1.1 299 \r\n"},
	}
	for _, tt := range tests {
		got := string(AppendStatusLine(nil, tt.major, tt.minor, tt.status, []byte(tt.reason)))
		if got != tt.want {
			t.Errorf("AppendStatusLine(%d) = %q, want %q", tt.status, got, tt.want)
		}
	}
	for _, s := range []int{400, 413, 431, 501, 502, 505} {
		if StatusText(s) == "" {
			t.Errorf("StatusText(%d) empty", s)
		}
	}
}

func TestErrorString(t *testing.T) {
	if got := errCLAndTE.Error(); got != "http1: 400: both Transfer-Encoding and Content-Length (RFC 9112 §6.3, request smuggling)" {
		t.Errorf("Error() = %q", got)
	}
}
