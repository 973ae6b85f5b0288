package http1

import "testing"

func TestParseResponseHead(t *testing.T) {
	tests := []struct {
		name, raw string
		status    int // *Error status, 0 for success
		code      int
		reason    string
		mode      BodyMode
		headMode  BodyMode
		keepAlive bool
		cl        int64
	}{
		{"ok length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", 0, 200, "OK", BodyLength, BodyNone, true, 5},
		{"sse chunked", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 200, "OK", BodyChunked, BodyNone, true, -1},
		{"until close", "HTTP/1.1 200 OK\r\n\r\n", 0, 200, "OK", BodyUntilClose, BodyNone, false, -1},
		{"1.0 until close", "HTTP/1.0 200 OK\r\n\r\n", 0, 200, "OK", BodyUntilClose, BodyNone, false, -1},
		{"1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", 0, 200, "OK", BodyLength, BodyNone, true, 0},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 1\r\n\r\n", 0, 200, "OK", BodyLength, BodyNone, false, 1},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", 0, 204, "No Content", BodyNone, BodyNone, true, -1},
		{"304 with length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 0, 304, "Not Modified", BodyNone, BodyNone, true, 10},
		{"100 continue", "HTTP/1.1 100 Continue\r\n\r\n", 0, 100, "Continue", BodyNone, BodyNone, true, -1},
		{"101 switching", "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", 0, 101, "Switching Protocols", BodyNone, BodyNone, true, -1},
		{"empty reason", "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", 0, 200, "", BodyLength, BodyNone, true, 0},
		{"no reason no SP", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 0, 200, "", BodyLength, BodyNone, true, 0},
		{"reason with spaces", "HTTP/1.1 404 Not  Found Here\r\nContent-Length: 0\r\n\r\n", 0, 404, "Not  Found Here", BodyLength, BodyNone, true, 0},
		{"gzip only TE", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, 200, "OK", BodyUntilClose, BodyNone, false, -1},
		{"unknown TE then chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: br, chunked\r\n\r\n", 0, 200, "OK", BodyChunked, BodyNone, true, -1},
		{"TE in 1.0 closes", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 200, "OK", BodyChunked, BodyNone, false, -1},
		{"identical CL", "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n", 0, 200, "OK", BodyLength, BodyNone, true, 3},
		{"CL and TE", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"differing CL", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"bad CL", "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"http/2", "HTTP/2.0 200 OK\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"http/0.9", "HTTP/0.9 200 OK\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		// A later HTTP/1 minor version is processed as HTTP/1.1 (RFC 9110 §2.5).
		{"1.2 chunked", "HTTP/1.2 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 200, "OK", BodyChunked, BodyNone, true, -1},
		{"1.9 length", "HTTP/1.9 200 OK\r\nContent-Length: 2\r\n\r\n", 0, 200, "OK", BodyLength, BodyNone, true, 2},
		{"lowercase http", "http/1.1 200 OK\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"status 600", "HTTP/1.1 600 X\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"status 099", "HTTP/1.1 099 X\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"status 4 digits", "HTTP/1.1 2000 X\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"status letters", "HTTP/1.1 2x0 X\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"short line", "HTTP/1.1 20\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"NUL in reason", "HTTP/1.1 200 O\x00K\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", 502, 0, "", 0, 0, false, 0},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", 502, 0, "", 0, 0, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseResp(t, tt.raw)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
			if err != nil {
				return
			}
			if r.Status != tt.code || string(r.Reason) != tt.reason || r.ContentLength != tt.cl {
				t.Errorf("status %d reason %q cl %d", r.Status, r.Reason, r.ContentLength)
			}
			if m := r.BodyMode(false); m != tt.mode {
				t.Errorf("BodyMode = %v, want %v", m, tt.mode)
			}
			if m := r.BodyMode(true); m != tt.headMode {
				t.Errorf("BodyMode(HEAD) = %v, want %v", m, tt.headMode)
			}
			if r.KeepAlive != tt.keepAlive {
				t.Errorf("KeepAlive = %v, want %v", r.KeepAlive, tt.keepAlive)
			}
		})
	}
}

func TestResponseHopByHop(t *testing.T) {
	r, err := parseResp(t, "HTTP/1.1 200 OK\r\nConnection: X-Trace, close\r\nX-Trace: 1\r\nContent-Length: 0\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x-trace", "Connection", "Transfer-Encoding", "close"} {
		if !r.IsHopByHop([]byte(k)) {
			t.Errorf("IsHopByHop(%q) = false", k)
		}
	}
	if r.IsHopByHop([]byte("Content-Length")) {
		t.Error("Content-Length reported hop-by-hop")
	}
	if v, ok := r.HeaderValue("x-TRACE"); !ok || string(v) != "1" {
		t.Errorf("HeaderValue = %q %v", v, ok)
	}
}
