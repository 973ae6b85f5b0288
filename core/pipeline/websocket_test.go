package pipeline

import (
	"testing"

	"github.com/sluice-gw/sluice/core/http1"
)

func TestHasToken(t *testing.T) {
	f := func(kv ...string) []http1.HeaderField {
		var out []http1.HeaderField
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, http1.HeaderField{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
		}
		return out
	}
	for _, tc := range []struct {
		fields []http1.HeaderField
		want   bool
	}{
		{f("Connection", "keep-alive, Upgrade"), true},
		{f("connection", "UPGRADE"), true},
		{f("Connection", "keep-alive", "Connection", " upgrade "), true}, // a list over two lines
		{f("Connection", "keep-alive,,upgrade"), true},
		{f("Connection", "upgrade-insecure"), false},
		{f("Connection", "keep-alive"), false},
		{f("X-Connection", "upgrade"), false},
		{nil, false},
	} {
		if got := hasToken(tc.fields, hdrConnection, tokUpgrade); got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.fields, got, tc.want)
		}
	}
}

// The Sec-WebSocket-Accept of RFC 6455 §1.3's example.
func TestWSAccept(t *testing.T) {
	if got := string(wsAccept([]byte("dGhlIHNhbXBsZSBub25jZQ=="))); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("got %s", got)
	}
}
