package http1

import "testing"

// Persistence, Expect and Upgrade (RFC 9112 §9.3, RFC 9110 §7.6.1, §7.8, §10.1.1).
func TestRequestConnectionSemantics(t *testing.T) {
	tests := []struct {
		name, version, fields     string
		keepAlive, expect, upgrad bool
	}{
		{"1.1 default", "1.1", "", true, false, false},
		{"1.1 close", "1.1", "Connection: close\r\n", false, false, false},
		{"1.1 close any case", "1.1", "Connection: CLOSE\r\n", false, false, false},
		{"1.1 close in list", "1.1", "Connection: keep-alive, Close\r\n", false, false, false},
		{"1.1 close in second field", "1.1", "Connection: x-a\r\nConnection: close\r\n", false, false, false},
		{"1.1 close-ish token", "1.1", "Connection: closed\r\n", true, false, false},
		{"1.0 default", "1.0", "", false, false, false},
		{"1.0 keep-alive", "1.0", "Connection: Keep-Alive\r\n", true, false, false},
		{"1.0 keep-alive and close", "1.0", "Connection: keep-alive, close\r\n", false, false, false},
		{"expect", "1.1", "Expect: 100-continue\r\n", true, true, false},
		{"expect any case", "1.1", "expect: 100-Continue\r\n", true, true, false},
		{"expect other", "1.1", "Expect: something\r\n", true, false, false},
		{"expect ignored in 1.0", "1.0", "Expect: 100-continue\r\n", false, false, false},
		{"upgrade", "1.1", "Connection: Upgrade\r\nUpgrade: websocket\r\n", true, false, true},
		{"upgrade in list", "1.1", "Connection: keep-alive, upgrade\r\nUpgrade: websocket\r\n", true, false, true},
		{"upgrade header only", "1.1", "Upgrade: websocket\r\n", true, false, false},
		{"upgrade token only", "1.1", "Connection: upgrade\r\n", true, false, false},
		{"upgrade ignored in 1.0", "1.0", "Connection: upgrade\r\nUpgrade: websocket\r\n", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseReq(t, "GET / HTTP/"+tt.version+"\r\nHost: h\r\n"+tt.fields+"\r\n", nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.KeepAlive != tt.keepAlive || r.ExpectContinue != tt.expect || r.Upgrade != tt.upgrad {
				t.Errorf("keepAlive=%v expect=%v upgrade=%v, want %v %v %v",
					r.KeepAlive, r.ExpectContinue, r.Upgrade, tt.keepAlive, tt.expect, tt.upgrad)
			}
		})
	}
}

func TestRequestHopByHop(t *testing.T) {
	r, err := parseReq(t, "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Private ,,\r\nConnection: x-other\r\n\r\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	hop := []string{"Connection", "keep-alive", "Proxy-Connection", "TE", "te", "Transfer-Encoding",
		"Upgrade", "Trailer", "Proxy-Authenticate", "Proxy-Authorization", "x-private", "X-PRIVATE", "X-Other"}
	for _, k := range hop {
		if !r.IsHopByHop([]byte(k)) {
			t.Errorf("IsHopByHop(%q) = false", k)
		}
	}
	end := []string{"Host", "Content-Type", "Authorization", "Trailers", "X-Privat", "", "Keep-Alive2"}
	for _, k := range end {
		if r.IsHopByHop([]byte(k)) {
			t.Errorf("IsHopByHop(%q) = true", k)
		}
	}
}
