package http1

import (
	"bytes"
	"strings"
	"testing"
)

// decodeAll feeds src to a fresh decoder in pieces of at most step bytes (step <= 0: one piece)
// and returns the payload, how many bytes were consumed and the first error.
func decodeAll(src []byte, step int, max int64) (payload []byte, consumed int, done bool, err error) {
	d := ChunkedDecoder{MaxBodyBytes: max}
	if step <= 0 {
		step = len(src)
	}
	for off := 0; off < len(src) && !d.Done(); {
		end := min(off+step, len(src))
		piece := src[off:end]
		for len(piece) > 0 && !d.Done() {
			data, n, err := d.Next(piece)
			payload = append(payload, data...)
			consumed += n
			if err != nil {
				return payload, consumed, false, err
			}
			if n == 0 {
				break // only when Done
			}
			piece = piece[n:]
		}
		off = end
	}
	return payload, consumed, d.Done(), nil
}

// decodeSplit feeds src in two pieces split at k.
func decodeSplit(src []byte, k int) (payload []byte, consumed int, done bool, err error) {
	var d ChunkedDecoder
	for _, piece := range [][]byte{src[:k], src[k:]} {
		for len(piece) > 0 && !d.Done() {
			data, n, err := d.Next(piece)
			payload = append(payload, data...)
			consumed += n
			if err != nil {
				return payload, consumed, false, err
			}
			piece = piece[n:]
		}
	}
	return payload, consumed, d.Done(), nil
}

func TestChunkedValid(t *testing.T) {
	tests := []struct {
		name, in, payload string
		rest              string // bytes after the message, left unconsumed
	}{
		{"single chunk", "5\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", ""},
		{"empty body", "0\r\n\r\n", "", ""},
		{"upper hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", ""},
		{"lower hex", "a\r\n0123456789\r\n0\r\n\r\n", "0123456789", ""},
		{"leading zeros", "0005\r\nhello\r\n000\r\n\r\n", "hello", ""},
		{"16 digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"extension", "5;name=value\r\nhello\r\n0;last\r\n\r\n", "hello", ""},
		{"extension quoted", "5;a=\"b;c\"\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"extension BWS", "5 ; a = b\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"trailing whitespace", "5 \r\nhello\r\n0\t\r\n\r\n", "hello", ""},
		{"trailer", "5\r\nhello\r\n0\r\nX-Usage: 12\r\nX-B:\r\n\r\n", "hello", ""},
		{"data contains CRLF", "4\r\n\r\n\r\n\r\n0\r\n\r\n", "\r\n\r\n", ""},
		{"next message left", "1\r\nx\r\n0\r\n\r\n", "x", "GET / HTTP/1.1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := []byte(tt.in + tt.rest)
			msgLen := len(tt.in)
			check := func(how string, payload []byte, consumed int, done bool, err error) {
				t.Helper()
				if err != nil || !done || string(payload) != tt.payload || consumed != msgLen {
					t.Fatalf("%s: payload %q consumed %d done %v err %v; want %q %d true",
						how, payload, consumed, done, err, tt.payload, msgLen)
				}
			}
			p, c, done, err := decodeAll(src, 0, 0)
			check("one piece", p, c, done, err)
			p, c, done, err = decodeAll(src, 1, 0)
			check("byte by byte", p, c, done, err)
			for k := 0; k <= len(src); k++ {
				p, c, done, err = decodeSplit(src, k)
				check("split at "+itoa(k), p, c, done, err)
			}
		})
	}
}

func itoa(n int) string { return string(AppendChunkHeader(nil, n)) } // hex is fine for names

func TestChunkedMalformed(t *testing.T) {
	tests := []struct {
		name, in string
		status   int
	}{
		{"empty size", "\r\nhello\r\n0\r\n\r\n", 400},
		{"non-hex size", "g\r\n", 400},
		{"negative size", "-5\r\n", 400},
		{"0x prefix", "0x5\r\nhello\r\n", 400},
		{"17 digits", "00000000000000005\r\nhello\r\n", 400},
		{"over int64", "8000000000000000\r\n", 400},
		{"max uint64", "ffffffffffffffff\r\n", 400},
		{"bare LF after size", "5\nhello\r\n0\r\n\r\n", 400},
		{"bare CR after size", "5\rhello\r\n0\r\n\r\n", 400},
		{"missing CRLF after data", "5\r\nhelloX\r\n0\r\n\r\n", 400},
		{"bare LF after data", "5\r\nhello\n0\r\n\r\n", 400},
		{"short data", "5\r\nhell\r\n0\r\n\r\n", 400},
		{"space inside size", "5 5\r\n", 400},
		{"leading space", " 5\r\nhello\r\n", 400},
		{"ctl in extension", "5;a\x00b\r\nhello\r\n", 400},
		{"bare LF in extension", "5;a\nhello\r\n", 400},
		{"long extension", "5;" + strings.Repeat("a", MaxChunkExtBytes) + "\r\nhello\r\n", 400},
		{"obs-fold trailer", "0\r\nX: a\r\n b\r\n\r\n", 400},
		{"trailer no colon", "0\r\nXa\r\n\r\n", 400},
		{"trailer NUL", "0\r\nX: a\x00\r\n\r\n", 400},
		{"trailer bare LF", "0\r\nX: a\n\r\n", 400},
		{"final bare LF", "0\r\n\n", 400},
		{"long trailer", "0\r\nX: " + strings.Repeat("a", MaxTrailerBytes) + "\r\n\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, step := range []int{0, 1, 3} {
				_, _, _, err := decodeAll([]byte(tt.in), step, 0)
				if got := statusOf(err); got != tt.status {
					t.Fatalf("step %d: status %d (%v), want %d", step, got, err, tt.status)
				}
			}
		})
	}
}

func TestChunkedBodyLimit(t *testing.T) {
	in := []byte("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	if p, _, done, err := decodeAll(in, 1, 11); err != nil || !done || string(p) != "hello world" {
		t.Fatalf("at limit: %q %v %v", p, done, err)
	}
	if _, _, _, err := decodeAll(in, 1, 10); statusOf(err) != 413 {
		t.Fatalf("over limit: %v, want 413", err)
	}
	// A huge declared size is refused before any of its data arrives.
	if _, _, _, err := decodeAll([]byte("7fffffffffffffff\r\n"), 0, 1<<20); statusOf(err) != 413 {
		t.Fatalf("huge chunk: %v, want 413", err)
	}
}

func TestChunkedErrorIsSticky(t *testing.T) {
	var d ChunkedDecoder
	if _, _, err := d.Next([]byte("zz")); statusOf(err) != 400 {
		t.Fatal(err)
	}
	if _, n, err := d.Next([]byte("5\r\nhello\r\n")); statusOf(err) != 400 || n != 0 {
		t.Fatalf("after error: n=%d err=%v", n, err)
	}
	d.Reset()
	if p, _, done, err := decodeAll([]byte("1\r\na\r\n0\r\n\r\n"), 0, 0); err != nil || !done || string(p) != "a" {
		t.Fatalf("after Reset: %q %v %v", p, done, err)
	}
}

func TestChunkedZeroCopy(t *testing.T) {
	src := []byte("5\r\nhello\r\n0\r\n\r\n")
	var d ChunkedDecoder
	data, n, err := d.Next(src)
	if err != nil || string(data) != "hello" || n != 8 {
		t.Fatalf("%q %d %v", data, n, err)
	}
	if &data[0] != &src[3] {
		t.Fatal("data is not a sub-slice of src")
	}
	data, n2, err := d.Next(src[n:])
	if err != nil || data != nil || n+n2 != len(src) || !d.Done() {
		t.Fatalf("tail: %q %d %v done=%v", data, n2, err, d.Done())
	}
}

func TestChunkedRoundTripWithWriter(t *testing.T) {
	var enc []byte
	var want bytes.Buffer
	for i := 1; i < 300; i += 37 {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, i)
		want.Write(chunk)
		enc = AppendChunkHeader(enc, len(chunk))
		enc = append(enc, chunk...)
		enc = append(enc, '\r', '\n')
	}
	enc = append(enc, LastChunk...)
	p, c, done, err := decodeAll(enc, 7, 0)
	if err != nil || !done || c != len(enc) || !bytes.Equal(p, want.Bytes()) {
		t.Fatalf("round trip: done %v consumed %d/%d err %v", done, c, len(enc), err)
	}
}

// MarkExt overwrites the first whitespace after each chunk size with ';', in whatever pieces
// the body comes, leaves every other byte alone, and survives Reset.
func TestChunkedMarkExt(t *testing.T) {
	const in = "4 ;a=b\r\nwxyz\r\n1\t \t;x\r\n!\r\n2 \r\nhi\r\n3;c\r\nabc\r\n0 ;e\r\nT: v\r\n\r\n"
	const want = "4;;a=b\r\nwxyz\r\n1; \t;x\r\n!\r\n2;\r\nhi\r\n3;c\r\nabc\r\n0;;e\r\nT: v\r\n\r\n"
	for step := 1; step <= len(in); step++ {
		src := []byte(in)
		d := ChunkedDecoder{MarkExt: true}
		d.Reset()
		var payload []byte
		for off := 0; off < len(src) && !d.Done(); {
			piece := src[off:min(off+step, len(src))]
			for len(piece) > 0 && !d.Done() {
				data, n, err := d.Next(piece)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				payload = append(payload, data...)
				off += n
				piece = piece[n:]
			}
		}
		if !d.Done() || string(payload) != "wxyz!hiabc" || string(src) != want {
			t.Fatalf("step %d: done=%v payload %q src %q", step, d.Done(), payload, src)
		}
	}
	src := []byte("1 \r\na\r\n0\r\n\r\n")
	var d ChunkedDecoder
	if _, _, err := d.Next(src); err != nil || string(src) != "1 \r\na\r\n0\r\n\r\n" {
		t.Fatalf("without MarkExt the source changed: %q %v", src, err)
	}
}
