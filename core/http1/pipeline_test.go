package http1

import "testing"

// A head that arrives one byte at a time is found exactly once, when its blank line completes,
// and pipelined requests are framed one after the other (RFC 9112 §9.3.2).
func TestHeadArrivesByteByByte(t *testing.T) {
	raw := []byte("\r\n" + chatHead)
	for k := 0; k < len(raw); k++ {
		skip, n := FindHeadEnd(raw[:k])
		if n >= 0 {
			t.Fatalf("head found early at %d bytes: skip %d n %d", k, skip, n)
		}
		if err := CheckPartialHead(raw[skip:k], nil); statusOf(err) != -1 {
			t.Fatalf("partial head at %d: %v", k, err)
		}
	}
	skip, n := FindHeadEnd(raw)
	if skip != 2 || n != len(chatHead) {
		t.Fatalf("FindHeadEnd = %d, %d", skip, n)
	}
	var r Request
	if err := r.ParseRequestHead(raw[skip:skip+n], nil); err != nil {
		t.Fatal(err)
	}
}

func TestPipelinedRequests(t *testing.T) {
	stream := []byte("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc" +
		"POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n" +
		"\r\nGET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	type seen struct {
		path, body string
		keepAlive  bool
	}
	var got []seen
	var r Request
	var d ChunkedDecoder
	for len(stream) > 0 {
		skip, n := FindHeadEnd(stream)
		if n < 0 {
			t.Fatalf("incomplete head in %q", stream)
		}
		if err := r.ParseRequestHead(stream[skip:skip+n], nil); err != nil {
			t.Fatal(err)
		}
		stream = stream[skip+n:]
		switch {
		case r.Chunked:
			d.Reset()
			for !d.Done() {
				data, c, err := d.Next(stream)
				if err != nil || c == 0 {
					t.Fatalf("chunked body: %v (consumed %d)", err, c)
				}
				r.Body = append(r.Body, data...)
				stream = stream[c:]
			}
		case r.ContentLength > 0:
			r.Body = append(r.Body, stream[:r.ContentLength]...)
			stream = stream[r.ContentLength:]
		}
		got = append(got, seen{string(r.Path), string(r.Body), r.KeepAlive})
	}
	want := []seen{{"/a", "abc", true}, {"/b", "de", true}, {"/c", "", false}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
