package fuzz

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/core/http1"
)

var http1RequestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"\r\n\r\nGET /x?a=1&b HTTP/1.0\r\n\r\n",
	"POST /v1/chat/completions HTTP/1.1\r\nHost: api:8080\r\nContent-Length: 12\r\nContent-Type: application/json\r\n\r\n{\"model\":1}",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
	"GET /v1//%61dmin/%2f%5C%7e%zz%4?q=%2F HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET http://h//a%2e%2E/%00 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET http://example.com:81/p?q HTTP/1.1\r\nHost: other\r\n\r\n",
	"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
	"GET / HTTP/1.1\nHost: h\n\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : h\r\n\r\n",
	"GET / HTTP/2.0\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.2\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00\r\n\r\n",
	"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
}

// headCost bounds the work on a request or response head (requestWork, responseWork).
var headCost = linearCost{PerByte: 16, Fixed: 256}

// requestWork is the gateway's work on a request head that arrives one byte at a time: find
// its end as each byte comes, parse it, ask for every field whether it is hop-by-hop (as
// forwarding the head does) and look up a field and a query parameter (as a rule does).
func requestWork(data []byte) {
	skip, n := arrive(data)
	var r http1.Request
	if n < 0 || r.ParseRequestHead(data[skip:skip+n], nil) != nil {
		return
	}
	for i := range r.Headers {
		r.IsHopByHop(r.Headers[i].Key)
	}
	_, _ = r.HeaderValue("content-type")
	_, _ = r.QueryValue("a")
}

// arrive looks for the end of the head in data as it arrives one byte at a time, with a
// HeadScan as the ingress does, and returns what the last look found.
func arrive(data []byte) (skip, n int) {
	var s http1.HeadScan
	n = -1
	for i := 1; i <= len(data) && n < 0; i++ {
		skip, n = s.Find(data[:i])
	}
	return skip, n
}

// FuzzRequestHead checks that FindHeadEnd + ParseRequestHead never panic, that a successful
// parse satisfies the framing invariants the gateway relies on, that a HeadScan fed the head
// byte by byte finds what FindHeadEnd finds, and that the work grows linearly with the input.
func FuzzRequestHead(f *testing.F) {
	for _, s := range http1RequestSeeds {
		f.Add([]byte(s))
	}
	var warm http1.Request // reused across inputs, as the ingress does
	f.Fuzz(func(t *testing.T, data []byte) {
		skip, n := http1.FindHeadEnd(data)
		if skip < 0 || skip > len(data) || n < -1 || skip+n > len(data) {
			t.Fatalf("FindHeadEnd = (%d, %d) for %d bytes", skip, n, len(data))
		}
		if s2, n2 := arrive(data); n2 != n || s2 != skip {
			t.Fatalf("HeadScan byte by byte = (%d, %d), FindHeadEnd = (%d, %d)", s2, n2, skip, n)
		}
		checkCost(t, headCost, data, requestWork)
		if n < 0 {
			if err := http1.CheckPartialHead(data[skip:], nil); err == nil {
				t.Fatal("CheckPartialHead returned nil")
			}
			return
		}
		head := bytes.Clone(data[skip : skip+n])
		var r http1.Request
		err := r.ParseRequestHead(head, nil)
		werr := warm.ParseRequestHead(head, nil)
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("fresh and reused Request disagree: %v vs %v", err, werr)
		}
		if err != nil {
			var e *http1.Error
			if !errors.As(err, &e) {
				if !errors.Is(err, http1.ErrNeedMore) {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				t.Fatalf("ErrNeedMore for a complete head: %q", head)
			}
			switch e.Status {
			case 400, 413, 431, 501, 505:
			default:
				t.Fatalf("unexpected status %d", e.Status)
			}
			return
		}
		// The request must not alias the input buffer.
		for i := range head {
			head[i] = 0
		}
		checkRequest(t, &r)
		if string(r.Method) != string(warm.Method) || string(r.URI) != string(warm.URI) ||
			r.ContentLength != warm.ContentLength || r.Chunked != warm.Chunked || r.KeepAlive != warm.KeepAlive ||
			len(r.Headers) != len(warm.Headers) || string(r.HostBytes()) != string(warm.HostBytes()) ||
			string(r.PathBytes()) != string(warm.PathBytes()) {
			t.Fatal("fresh and reused Request parse differently")
		}
	})
}

func checkRequest(t *testing.T, r *http1.Request) {
	t.Helper()
	if r.Chunked && r.ContentLength >= 0 {
		t.Fatal("both Chunked and ContentLength")
	}
	if r.ContentLength < -1 || r.ContentLength > http1.DefaultMaxBodyBytes {
		t.Fatalf("ContentLength %d", r.ContentLength)
	}
	if r.Major != 1 || (r.Minor != 0 && r.Minor != 1) {
		t.Fatalf("version %d.%d", r.Major, r.Minor)
	}
	if r.Minor == 0 && (r.Chunked || r.ExpectContinue || r.Upgrade) {
		t.Fatal("HTTP/1.0 request with chunked, Expect or Upgrade")
	}
	checkNormalPath(t, r.PathBytes())
	if r.Minor == 1 && r.Host == nil {
		t.Fatal("HTTP/1.1 request without Host")
	}
	if len(r.Method) == 0 || len(r.URI) == 0 || len(r.Path) == 0 {
		t.Fatalf("empty method %q, URI %q or path %q", r.Method, r.URI, r.Path)
	}
	if len(r.Headers) > http1.DefaultMaxHeaderCount {
		t.Fatalf("%d headers", len(r.Headers))
	}
	for _, h := range r.Headers {
		if len(h.Key) == 0 || bytes.ContainsAny(h.Key, " \t:\r\n\x00") {
			t.Fatalf("bad key %q", h.Key)
		}
		if bytes.ContainsAny(h.Value, "\r\n\x00") {
			t.Fatalf("bad value %q", h.Value)
		}
		if len(h.Value) > 0 && (h.Value[0] == ' ' || h.Value[len(h.Value)-1] == ' ') {
			t.Fatalf("untrimmed value %q", h.Value)
		}
	}
	if bytes.ContainsAny(r.URI, " \t\r\n\x00#") {
		t.Fatalf("bad URI %q", r.URI)
	}
	if bytes.ContainsAny(r.HostBytes(), " \t\r\n\x00/@") {
		t.Fatalf("bad host %q", r.HostBytes())
	}
	// Router view must be callable on anything that parsed.
	_, _ = r.HeaderValue("content-type")
	_, _ = r.QueryValue("a")
	_ = r.IsHopByHop([]byte("X-A"))
}

// FuzzResponseHead checks that ParseResponseHead never panics, that BodyMode agrees with the
// framing fields, and that the work on a head arriving byte by byte grows linearly with it.
func FuzzResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 200\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		checkCost(t, headCost, data, func(data []byte) {
			skip, n := arrive(data)
			var r http1.Response
			if n < 0 || r.ParseResponseHead(data[skip:skip+n], nil) != nil {
				return
			}
			for i := range r.Headers {
				r.IsHopByHop(r.Headers[i].Key)
			}
			_, _ = r.HeaderValue("content-type")
		})
		skip, n := http1.FindHeadEnd(data)
		if n < 0 {
			return
		}
		var r http1.Response
		err := r.ParseResponseHead(data[skip:skip+n], nil)
		if err != nil {
			var e *http1.Error
			if !errors.As(err, &e) || e.Status != 502 {
				t.Fatalf("error %v, want *Error 502", err)
			}
			return
		}
		if r.Chunked && r.ContentLength >= 0 {
			t.Fatal("both Chunked and ContentLength")
		}
		if r.Status < 100 || r.Status > 599 {
			t.Fatalf("status %d", r.Status)
		}
		switch m := r.BodyMode(head); m {
		case http1.BodyNone:
			if !head && r.Status >= 200 && r.Status != 204 && r.Status != 304 {
				t.Fatalf("BodyNone for status %d", r.Status)
			}
		case http1.BodyChunked:
			if !r.Chunked {
				t.Fatal("BodyChunked without Chunked")
			}
		case http1.BodyLength:
			if r.ContentLength < 0 {
				t.Fatal("BodyLength without ContentLength")
			}
		case http1.BodyUntilClose:
			if r.KeepAlive {
				t.Fatal("BodyUntilClose but KeepAlive")
			}
		default:
			t.Fatalf("BodyMode %d", m)
		}
	})
}

// chunkedResult is the outcome of decoding one input.
type chunkedResult struct {
	payload  []byte
	consumed int
	done     bool
	status   int // *Error status, 0 for none
}

// decodeChunked feeds src to a fresh decoder in pieces of at most step bytes (0: one piece).
func decodeChunked(t *testing.T, src []byte, step int) chunkedResult {
	var d http1.ChunkedDecoder
	d.MaxBodyBytes = 1 << 20
	var res chunkedResult
	if step <= 0 {
		step = len(src) + 1
	}
	for off := 0; off < len(src) && !d.Done(); off += step {
		piece := src[off:min(off+step, len(src))]
		for len(piece) > 0 && !d.Done() {
			data, n, err := d.Next(piece)
			if n < 0 || n > len(piece) {
				t.Fatalf("consumed %d of %d", n, len(piece))
			}
			if len(data) > 0 {
				// data must lie inside piece[:n]
				start := cap(piece) - cap(data)
				if start < 0 || start+len(data) > n {
					t.Fatalf("data outside consumed bytes")
				}
			}
			res.payload = append(res.payload, data...)
			res.consumed += n
			if err != nil {
				var e *http1.Error
				if !errors.As(err, &e) || (e.Status != 400 && e.Status != 413) {
					t.Fatalf("error %v", err)
				}
				res.status = e.Status
				return res
			}
			if n == 0 {
				t.Fatal("no progress without Done or error")
			}
			piece = piece[n:]
		}
	}
	res.done = d.Done()
	if int64(len(res.payload)) != d.Total() {
		t.Fatalf("Total %d, payload %d", d.Total(), len(res.payload))
	}
	return res
}

// chunkedCost bounds the work of decoding a chunked body, in one piece and byte by byte.
var chunkedCost = linearCost{PerByte: 8, Fixed: 64}

// FuzzChunked checks that the chunked decoder never panics and gives the same result however
// its input is split: in one piece, byte by byte, and in 3-byte pieces; and that its work
// grows linearly with the input.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nGET",
		"0000000000000005\r\nhello\r\n0\r\n\r\n",
		"ffffffffffffffff\r\n",
		"5 \r\nhello\r\n0\r\n\r\n",
		"5\nhello\n0\n\n",
		"1\r\nx\r\n0\r\nA: b\r\n c\r\n\r\n",
		"10\r\n", // regression: Total must count returned bytes only
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCost(t, chunkedCost, data, func(data []byte) {
			for _, step := range []int{0, 1} {
				decodeChunked(t, data, step)
			}
		})
		whole := decodeChunked(t, data, 0)
		for _, step := range []int{1, 3} {
			got := decodeChunked(t, data, step)
			if got.done != whole.done || got.status != whole.status || got.consumed != whole.consumed ||
				!bytes.Equal(got.payload, whole.payload) {
				t.Fatalf("step %d: %+v, one piece: %+v", step, got, whole)
			}
		}
		if whole.done {
			// Re-encoding the payload decodes to the same bytes.
			var enc []byte
			if len(whole.payload) > 0 {
				enc = http1.AppendChunkHeader(enc, len(whole.payload))
				enc = append(enc, whole.payload...)
				enc = append(enc, '\r', '\n')
			}
			enc = append(enc, http1.LastChunk...)
			again := decodeChunked(t, enc, 0)
			if !again.done || !bytes.Equal(again.payload, whole.payload) || again.consumed != len(enc) {
				t.Fatalf("re-encoded payload decodes to %+v", again)
			}
		}
	})
}

// checkNormalPath: an accepted origin-form path has no empty segment, and each remaining
// percent-encoding is upper-case hex for a byte that is neither unreserved nor '/', '\\', NUL
// (the default limits refuse encoded slashes).
func checkNormalPath(t *testing.T, p []byte) {
	t.Helper()
	if len(p) == 0 || p[0] != '/' {
		return
	}
	if bytes.Contains(p, []byte("//")) {
		t.Fatalf("path %q has an empty segment", p)
	}
	if bytes.IndexByte(p, '\\') >= 0 {
		t.Fatalf("path %q has a backslash", p)
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			continue
		}
		if i+2 >= len(p) || strings.IndexByte(hex, p[i+1]) < 0 || strings.IndexByte(hex, p[i+2]) < 0 {
			t.Fatalf("path %q: percent-encoding not in upper-case hex", p)
		}
		v := byte(strings.IndexByte(hex, p[i+1])<<4 | strings.IndexByte(hex, p[i+2]))
		unreserved := 'a' <= v && v <= 'z' || 'A' <= v && v <= 'Z' || '0' <= v && v <= '9' || strings.IndexByte("-._~", v) >= 0
		if unreserved || v == '/' || v == '\\' || v == 0 {
			t.Fatalf("path %q keeps %%%02X encoded", p, v)
		}
		i += 2
	}
}
