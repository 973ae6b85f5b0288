package http1

import "testing"

// These cases guard the request-smuggling rules of RFC 9112 §6.1 and §6.3: the gateway must
// never frame a request body differently from the upstream it forwards to.
func TestRequestFramingSmuggling(t *testing.T) {
	tests := []struct {
		name    string
		fields  string // field lines, each ending in CRLF
		version string
		status  int
		cl      int64
		chunked bool
	}{
		{"no body", "", "1.1", 0, -1, false},
		{"content-length", "Content-Length: 10\r\n", "1.1", 0, 10, false},
		{"content-length zero", "Content-Length: 0\r\n", "1.1", 0, 0, false},
		{"content-length OWS", "Content-Length: \t 7 \t\r\n", "1.1", 0, 7, false},
		{"identical CL fields", "Content-Length: 5\r\nContent-Length: 5\r\n", "1.1", 0, 5, false},
		{"identical CL list", "Content-Length: 5, 5\r\n", "1.1", 0, 5, false},
		{"identical CL list and field", "Content-Length: 5,5\r\nContent-Length: 5\r\n", "1.1", 0, 5, false},
		{"differing CL fields", "Content-Length: 5\r\nContent-Length: 6\r\n", "1.1", 400, 0, false},
		{"differing CL list", "Content-Length: 5, 6\r\n", "1.1", 400, 0, false},
		{"CL plus sign", "Content-Length: +5\r\n", "1.1", 400, 0, false},
		{"CL negative", "Content-Length: -1\r\n", "1.1", 400, 0, false},
		{"CL hex", "Content-Length: 0x10\r\n", "1.1", 400, 0, false},
		{"CL empty", "Content-Length: \r\n", "1.1", 400, 0, false},
		{"CL only commas", "Content-Length: ,\r\n", "1.1", 400, 0, false},
		{"CL inner space", "Content-Length: 1 0\r\n", "1.1", 400, 0, false},
		{"CL overflow", "Content-Length: 99999999999999999999\r\n", "1.1", 400, 0, false},
		{"CL leading zeros", "Content-Length: 007\r\n", "1.1", 0, 7, false},
		{"chunked", "Transfer-Encoding: chunked\r\n", "1.1", 0, -1, true},
		{"chunked any case", "Transfer-Encoding: ChUnKeD\r\n", "1.1", 0, -1, true},
		// Not decoded by the gateway: forwarding the de-chunked body would drop the coding.
		{"gzip then chunked", "Transfer-Encoding: gzip, chunked\r\n", "1.1", 501, 0, false},
		{"gzip then chunked split fields", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", "1.1", 501, 0, false},
		{"deflate then chunked", "Transfer-Encoding: deflate, chunked\r\n", "1.1", 501, 0, false},
		{"TE empty elements", "Transfer-Encoding: , chunked ,\r\n", "1.1", 0, -1, true},
		{"TE and CL", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "1.1", 400, 0, false},
		{"CL and TE", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "1.1", 400, 0, false},
		{"TE and CL zero", "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", "1.1", 400, 0, false},
		{"chunked not final", "Transfer-Encoding: chunked, gzip\r\n", "1.1", 400, 0, false},
		{"gzip only", "Transfer-Encoding: gzip\r\n", "1.1", 400, 0, false},
		{"chunked twice", "Transfer-Encoding: chunked, chunked\r\n", "1.1", 400, 0, false},
		{"chunked twice split", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "1.1", 400, 0, false},
		{"unknown coding", "Transfer-Encoding: foo, chunked\r\n", "1.1", 501, 0, false},
		{"identity is unknown", "Transfer-Encoding: identity\r\n", "1.1", 501, 0, false},
		{"TE empty", "Transfer-Encoding: \r\n", "1.1", 400, 0, false},
		{"TE chunked with param", "Transfer-Encoding: chunked;q=1\r\n", "1.1", 400, 0, false},
		{"TE non-token", "Transfer-Encoding: \"chunked\"\r\n", "1.1", 400, 0, false},
		{"TE chunked-ish", "Transfer-Encoding: xchunked\r\n", "1.1", 501, 0, false},
		{"TE in HTTP/1.0", "Transfer-Encoding: chunked\r\n", "1.0", 400, 0, false},
		{"CL in HTTP/1.0", "Content-Length: 3\r\n", "1.0", 0, 3, false},
		{"TE name with space before colon", "Transfer-Encoding : chunked\r\n", "1.1", 400, 0, false},
		{"TE obs-fold", "Transfer-Encoding: gzip,\r\n chunked\r\n", "1.1", 400, 0, false},
		{"TE vertical tab", "Transfer-Encoding:\x0bchunked\r\n", "1.1", 400, 0, false},
		{"underscore CL", "Content_Length: 5\r\n", "1.1", 400, 0, false},
		{"underscore TE", "Transfer_Encoding: chunked\r\n", "1.1", 400, 0, false},
		{"underscore TE mixed case", "transfer-ENCODING_x: chunked\r\n", "1.1", 0, -1, false},
		{"other underscore names pass", "X_Api_Key: k\r\n", "1.1", 0, -1, false},
		{"CL with NUL", "Content-Length: 5\x00\r\n", "1.1", 400, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := "POST /x HTTP/" + tt.version + "\r\nHost: h\r\n" + tt.fields + "\r\n"
			r, err := parseReq(t, raw, nil)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
			if err != nil {
				return
			}
			if r.ContentLength != tt.cl || r.Chunked != tt.chunked {
				t.Errorf("cl=%d chunked=%v, want cl=%d chunked=%v", r.ContentLength, r.Chunked, tt.cl, tt.chunked)
			}
		})
	}
}

// Line-ending and field-syntax rules (RFC 9112 §2.2, §5; RFC 9110 §5.5).
func TestRequestFieldSyntax(t *testing.T) {
	tests := []struct {
		name, raw string
		status    int
	}{
		{"ok", "GET / HTTP/1.1\r\nHost: h\r\nX-A: b\r\n\r\n", 0},
		{"empty value", "GET / HTTP/1.1\r\nHost: h\r\nX-A:\r\n\r\n", 0},
		{"obs-text value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: caf\xc3\xa9\r\n\r\n", 0},
		{"tab in value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\tb\r\n\r\n", 0},
		{"bare LF request line", "GET / HTTP/1.1\nHost: h\r\n\r\n", 400},
		{"bare LF field", "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", 400},
		{"bare LF end", "GET / HTTP/1.1\r\nHost: h\n\n", 400},
		{"bare LF blank line", "GET / HTTP/1.1\r\nHost: h\r\n\n", 400},
		{"bare CR in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400},
		{"bare CR in name", "GET / HTTP/1.1\r\nHost: h\r\nX\r: a\r\n\r\n", 400},
		{"CR CR LF", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\r\n\r\n", 400},
		{"NUL in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400},
		{"DEL in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n", 400},
		{"ESC in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x1bb\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A : b\r\n\r\n", 400},
		{"tab before colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A\t: b\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX-A: b\r\n c\r\n\r\n", 400},
		{"whitespace before first field", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400},
		{"empty name", "GET / HTTP/1.1\r\nHost: h\r\n: b\r\n\r\n", 400},
		{"no colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A b\r\n\r\n", 400},
		{"non-token name", "GET / HTTP/1.1\r\nHost: h\r\nX(A): b\r\n\r\n", 400},
		{"non-ascii name", "GET / HTTP/1.1\r\nHost: h\r\nX\xc3\xa9: b\r\n\r\n", 400},
		{"bytes after blank line", "GET / HTTP/1.1\r\nHost: h\r\n\r\nextra", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			// Parse the raw bytes as the head directly (FindHeadEnd would cut trailing bytes).
			err := r.ParseRequestHead([]byte(tt.raw), nil)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
			if tt.name == "bytes after blank line" {
				return
			}
			// The same head reached through FindHeadEnd gets the same answer.
			_, err = parseReq(t, tt.raw, nil)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("via FindHeadEnd: status = %d (%v), want %d", got, err, tt.status)
			}
		})
	}
}

// Host rules (RFC 9112 §3.2): exactly one Host in HTTP/1.1.
func TestRequestHost(t *testing.T) {
	tests := []struct {
		name, line, fields string
		status             int
		hostname           string
	}{
		{"host", "GET / HTTP/1.1", "Host: Example.COM\r\n", 0, "Example.COM"},
		{"host port", "GET / HTTP/1.1", "Host: example.com:8080\r\n", 0, "example.com"},
		{"ipv6", "GET / HTTP/1.1", "Host: [::1]:8080\r\n", 0, "[::1]"},
		{"ipv6 no port", "GET / HTTP/1.1", "Host: [::1]\r\n", 0, "[::1]"},
		{"empty host", "GET / HTTP/1.1", "Host:\r\n", 0, ""},
		{"missing 1.1", "GET / HTTP/1.1", "", 400, ""},
		{"missing 1.0", "GET / HTTP/1.0", "", 0, ""},
		{"duplicate", "GET / HTTP/1.1", "Host: a\r\nHost: a\r\n", 400, ""},
		{"duplicate 1.0", "GET / HTTP/1.0", "Host: a\r\nHost: b\r\n", 400, ""},
		{"case-insensitive name", "GET / HTTP/1.1", "hOsT: a\r\n", 0, "a"},
		{"userinfo", "GET / HTTP/1.1", "Host: u@a\r\n", 400, ""},
		{"slash", "GET / HTTP/1.1", "Host: a/b\r\n", 400, ""},
		{"space inside", "GET / HTTP/1.1", "Host: a b\r\n", 400, ""},
		{"bad port", "GET / HTTP/1.1", "Host: a:8x\r\n", 400, ""},
		{"two colons", "GET / HTTP/1.1", "Host: a:1:2\r\n", 400, ""},
		{"unclosed ipv6", "GET / HTTP/1.1", "Host: [::1\r\n", 400, ""},
		{"junk after ipv6", "GET / HTTP/1.1", "Host: [::1]x\r\n", 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseReq(t, tt.line+"\r\n"+tt.fields+"\r\n", nil)
			if got := statusOf(err); got != tt.status {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.status)
			}
			if err == nil && string(r.HostBytes()) != tt.hostname {
				t.Errorf("HostBytes = %q, want %q", r.HostBytes(), tt.hostname)
			}
		})
	}
}
