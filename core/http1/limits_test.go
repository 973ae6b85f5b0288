package http1

import (
	"strings"
	"testing"
)

func TestRequestLimits(t *testing.T) {
	manyFields := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString("X-F: v\r\n")
		}
		return b.String()
	}
	small := &Limits{MaxHeaderBytes: 200, MaxHeaderCount: 5, MaxBodyBytes: 1000}
	tests := []struct {
		name   string
		raw    string
		lim    *Limits
		status int
	}{
		{"default count ok", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(99) + "\r\n", nil, 0},
		{"default count over", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(100) + "\r\n", nil, 431},
		{"default bytes over", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", DefaultMaxHeaderBytes) + "\r\n\r\n", nil, 431},
		{"small count ok", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(4) + "\r\n", small, 0},
		{"small count over", "GET / HTTP/1.1\r\nHost: h\r\n" + manyFields(5) + "\r\n", small, 431},
		{"small bytes over", "GET /" + strings.Repeat("a", 200) + " HTTP/1.1\r\nHost: h\r\n\r\n", small, 431},
		{"body at limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n", small, 0},
		{"body over limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n", small, 413},
		{"default body over", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16777217\r\n\r\n", nil, 413},
		{"default body at", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16777216\r\n\r\n", nil, 0},
		{"huge CL is 413 not overflow", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999999999\r\n\r\n", nil, 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseReq(t, tt.raw, tt.lim)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
		})
	}
}

func TestCheckPartialHead(t *testing.T) {
	if err := CheckPartialHead(DefaultMaxHeaderBytes, nil); statusOf(err) != -1 {
		t.Fatalf("at limit: %v", err)
	}
	if err := CheckPartialHead(DefaultMaxHeaderBytes+1, nil); statusOf(err) != 431 {
		t.Fatalf("over limit: %v", err)
	}
	if err := CheckPartialHead(11, &Limits{MaxHeaderBytes: 10}); statusOf(err) != 431 {
		t.Fatalf("custom: %v", err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	var nilLim *Limits
	zero := &Limits{}
	for _, l := range []*Limits{nilLim, zero} {
		if l.HeaderBytes() != 16384 || l.HeaderCount() != 100 || l.BodyBytes() != 16<<20 {
			t.Fatalf("defaults: %d %d %d", l.HeaderBytes(), l.HeaderCount(), l.BodyBytes())
		}
	}
}

func TestHeaderBytesBoundary(t *testing.T) {
	base := "GET / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n"
	lim := &Limits{MaxHeaderBytes: 100}
	at := "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 100-len(base)) + "\r\n\r\n"
	if len(at) != 100 {
		t.Fatalf("len %d", len(at))
	}
	if _, err := parseReq(t, at, lim); err != nil {
		t.Fatalf("head of exactly the limit: %v", err)
	}
	over := "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 101-len(base)) + "\r\n\r\n"
	if _, err := parseReq(t, over, lim); statusOf(err) != 431 {
		t.Fatalf("head one byte over the limit: %v, want 431", err)
	}
}
