package pipeline

import (
	"strings"
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

// A Sec-WebSocket-Key passes only when it is 16 bytes in base64 (RFC 6455 §4.2.1 item 5):
// keys of every length from 0 to 40 characters, padded or not, are checked without a panic.
func TestCheckWebSocketKeyOfAnyLength(t *testing.T) {
	check := func(key string) *GatewayError {
		req := &http1.Request{Method: []byte("GET"), Major: 1, Minor: 1, ContentLength: -1, Headers: []http1.HeaderField{
			{Key: []byte("Sec-WebSocket-Key"), Value: []byte(key)},
			{Key: []byte("Sec-WebSocket-Version"), Value: []byte("13")},
		}}
		return checkWebSocket(req)
	}
	for n := 0; n <= 40; n++ {
		plain := strings.Repeat("A", n)
		padded := plain + "=="
		if n >= 2 {
			padded = plain[:n-2] + "=="
		}
		for _, key := range []string{plain, padded} {
			want := ErrWSKey
			if key == "AAAAAAAAAAAAAAAAAAAAAA==" {
				want = nil
			}
			if got := check(key); got != want {
				t.Errorf("key %q (%d characters): got %v, want %v", key, len(key), got, want)
			}
		}
	}
	// 24 characters, but the last one sets bits the padding leaves out: no 16 bytes encode so.
	if got := check("AAAAAAAAAAAAAAAAAAAAAB=="); got != ErrWSKey {
		t.Errorf("a key with padding bits set: got %v, want %v", got, ErrWSKey)
	}
}
