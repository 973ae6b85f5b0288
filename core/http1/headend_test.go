package http1

import "testing"

func TestFindHeadEnd(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		skip, n int
	}{
		{"complete", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", 0, 27},
		{"with body", "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", 0, 38},
		{"incomplete", "GET / HTTP/1.1\r\nHost: h\r\n", 0, -1},
		{"incomplete CR", "GET / HTTP/1.1\r\nHost: h\r\n\r", 0, -1},
		{"empty", "", 0, -1},
		{"leading CRLF", "\r\n\r\nGET / HTTP/1.1\r\n\r\n", 4, 18},
		{"only CRLFs", "\r\n\r\n\r\n", 6, -1},
		{"CRLF then CR", "\r\n\r", 2, -1},
		{"bare LF blank line", "GET / HTTP/1.1\nHost: h\n\n", 0, 24},
		{"CRLF LF", "GET / HTTP/1.1\r\n\nx", 0, 17},
		{"leading bare LF", "\nGET / HTTP/1.1\r\n\r\n", 0, 1},
		{"pipelined", "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n", 0, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip, n := FindHeadEnd([]byte(tt.in))
			if skip != tt.skip || n != tt.n {
				t.Fatalf("FindHeadEnd = (%d, %d), want (%d, %d)", skip, n, tt.skip, tt.n)
			}
		})
	}
}

func TestIncompleteHeadNeedsMore(t *testing.T) {
	var r Request
	if err := r.ParseRequestHead([]byte("GET / HTTP/1.1\r\nHost: h\r\n"), nil); statusOf(err) != -1 {
		t.Fatalf("err = %v, want ErrNeedMore", err)
	}
	if err := r.ParseRequestHead([]byte("GET / HTTP/1.1"), nil); statusOf(err) != -1 {
		t.Fatalf("err = %v, want ErrNeedMore", err)
	}
}
