package ingress

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/core/http1"
)

// The framing check follows pipelined requests with Content-Length and chunked bodies to their
// ends however the stream is cut into reads, and pins a refusal on the request it belongs to.
func TestFramingCheckFollowsPipelinedRequests(t *testing.T) {
	good := "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc" +
		"\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n" +
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2;x=1\r\nde\r\n0\r\nT: 1\r\n\r\n"
	for _, tc := range []struct {
		name   string
		tail   string
		msg    uint64 // the refused request, counted from 1; 0: none
		status int
	}{
		{"all good", "", 0, 0},
		{"bare LF head fourth", "GET /d HTTP/1.1\nHost: h\n\n", 4, 400},
		{"bad chunk fourth", "POST /d HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\nde\r\n", 4, 400},
		{"request line over the limit fourth", "GET /" + strings.Repeat("x", 300), 4, 414},
		{"fields over the limit fourth", "GET / HTTP/1.1\r\nX: " + strings.Repeat("x", 300), 4, 431},
		{"body over the limit fourth", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n", 4, 413},
	} {
		stream := []byte(good + tc.tail)
		for _, piece := range []int{1, 7, len(stream)} {
			fc := framingCheck{lim: &http1.Limits{MaxHeaderBytes: 256, MaxBodyBytes: 1000}}
			var err error
			for off := 0; off < len(stream) && err == nil; off += piece {
				err = fc.feed(stream[off:min(off+piece, len(stream))])
			}
			var fe *http1.Error
			switch {
			case tc.msg == 0 && err != nil:
				t.Errorf("%s, reads of %d: refused %v", tc.name, piece, err)
			case tc.msg == 0 && fc.msg != 3:
				t.Errorf("%s, reads of %d: followed %d messages, want 3", tc.name, piece, fc.msg)
			case tc.msg != 0 && (!errors.As(err, &fe) || fe.Status != tc.status || fc.errMsg != tc.msg):
				t.Errorf("%s, reads of %d: refusal %v of request %d, want %d of request %d", tc.name, piece, err, fc.errMsg, tc.status, tc.msg)
			}
		}
	}
}

// After a request that asks for an upgrade the stream may be another protocol's: the check
// lets it pass.
func TestFramingCheckStopsAfterUpgrade(t *testing.T) {
	fc := framingCheck{lim: &http1.Limits{}}
	head := "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	if err := fc.feed([]byte(head + "\x81\x05hello\n\n")); err != nil || !fc.off {
		t.Fatalf("after an upgrade request: err %v, off %v", err, fc.off)
	}
}

// blankHead holds exactly when the head being followed has begun with empty lines and nothing
// else yet, before the first request or after one, however the stream is cut into reads.
func TestFramingCheckBlankHead(t *testing.T) {
	get := "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
	for _, tc := range []struct {
		stream string
		want   bool
	}{
		{"", false},
		{"\r", true},
		{"\r\n\r\n", true},
		{"\n", false}, // a bare LF is refused at once
		{"\r\nG", false},
		{"GET / HT", false},
		{get, false},
		{get + "\r\n", true},
		{get + "\r\nGET", false},
		{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n\r\n", false}, // in a body
		{"GET / HTTP/1.1\nHost: h\n\n\r\n", false},                             // refused
	} {
		for _, piece := range []int{1, max(len(tc.stream), 1)} {
			fc := framingCheck{lim: &http1.Limits{}}
			for off := 0; off < len(tc.stream); off += piece {
				_ = fc.feed([]byte(tc.stream[off:min(off+piece, len(tc.stream))]))
			}
			if got := fc.blankHead(); got != tc.want {
				t.Errorf("%q in reads of %d: blankHead %v, want %v", tc.stream, piece, got, tc.want)
			}
		}
	}
}

// FuzzFramingCheck: the check runs on every byte a TLS client sends, so it must never panic
// or spin, and its verdict must not depend on how the stream is cut into reads.
func FuzzFramingCheck(f *testing.F) {
	for _, s := range []string{
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2;x\r\nab\r\n0\r\nT: 1\r\n\r\n",
		"GET / HTTP/1.1\nHost: h\n\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x00",
		"GET /" + strings.Repeat("a", 300) + " HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(1), uint16(7))
	}
	lim := &http1.Limits{MaxHeaderBytes: 256, MaxHeaderCount: 8, MaxBodyBytes: 1 << 10}
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16) {
		// The check may rewrite the bytes it is fed for fasthttp (a ';' after a chunk size's
		// white space), and the fuzzing engine's input must not change: each run gets a copy,
		// and the bytes fasthttp is shown must not depend on the reads either.
		wholeBytes, splitBytes := bytes.Clone(data), bytes.Clone(data)
		whole := framingCheck{lim: lim}
		werr := whole.feed(wholeBytes)
		a, b := min(int(cut1), len(data)), min(int(cut2), len(data))
		if a > b {
			a, b = b, a
		}
		split := framingCheck{lim: lim}
		var serr error
		for _, piece := range [][]byte{splitBytes[:a], splitBytes[a:b], splitBytes[b:]} {
			if serr = split.feed(piece); serr != nil {
				break
			}
		}
		if werr != serr || whole.errMsg != split.errMsg || whole.msg != split.msg || whole.off != split.off {
			t.Fatalf("whole: err %v of request %d, %d followed, off %v; in reads cut at %d and %d: err %v of request %d, %d followed, off %v",
				werr, whole.errMsg, whole.msg, whole.off, a, b, serr, split.errMsg, split.msg, split.off)
		}
		if werr == nil && !bytes.Equal(wholeBytes, splitBytes) {
			t.Fatalf("fasthttp is shown %q after one read, %q after reads cut at %d and %d", wholeBytes, splitBytes, a, b)
		}
	})
}

// fasthttp gets a later HTTP/1 minor version as HTTP/1.1, the version the gateway's parser
// processes it as, however the request line is cut into reads, pipelined requests included;
// the check follows the bytes as received. Other versions, and a line that only looks like
// it ends in one, reach fasthttp as sent.
func TestFramingCheckGivesFasthttpLaterMinorVersionsAsHTTP11(t *testing.T) {
	// sent is the digit the check keeps for each request, 0 where it replaced none.
	for _, tc := range []struct{ name, in, out, sent string }{
		{"1.2", "GET /a HTTP/1.2\r\nHost: h\r\n\r\n", "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", "2"},
		{"1.9 chunked", "POST /a HTTP/1.9\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
			"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", "9"},
		{"pipelined", "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.2\r\nHost: h\r\n\r\nGET /c HTTP/1.4\r\nHost: h\r\n\r\n",
			"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\nGET /c HTTP/1.1\r\nHost: h\r\n\r\n", "\x0024"},
		{"after empty lines", "\r\n\r\nGET /a HTTP/1.3\r\nHost: h\r\n\r\n", "\r\n\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n", "3"},
		{"1.0", "GET /a HTTP/1.0\r\n\r\n", "GET /a HTTP/1.0\r\n\r\n", "\x00"},
		{"in a field", "GET /a HTTP/1.1\r\nHost: h\r\nX: a HTTP/1.2\r\n\r\n", "GET /a HTTP/1.1\r\nHost: h\r\nX: a HTTP/1.2\r\n\r\n", "\x00"},
		{"in a body", "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\n HTTP/1.2", "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\n HTTP/1.2", "\x00"},
	} {
		for _, piece := range []int{1, 2, 7, 15, len(tc.in)} {
			fc := framingCheck{lim: &http1.Limits{}}
			got := []byte(tc.in)
			for off := 0; off < len(got); off += piece {
				if err := fc.feed(got[off:min(off+piece, len(got))]); err != nil {
					t.Fatalf("%s, reads of %d: refused %v", tc.name, piece, err)
				}
			}
			if string(got) != tc.out {
				t.Errorf("%s, reads of %d: fasthttp gets %q, want %q", tc.name, piece, got, tc.out)
			}
			for i := range len(tc.sent) {
				if d := fc.sentMinor(uint64(i + 1)); d != tc.sent[i] {
					t.Errorf("%s, reads of %d: request %d was sent with minor version %q, the check says %q", tc.name, piece, i+1, tc.sent[i], d)
				}
			}
		}
	}
	h2 := []byte("GET /a HTTP/2.0\r\nHost: h\r\n\r\n")
	fc := framingCheck{lim: &http1.Limits{}}
	var fe *http1.Error
	if err := fc.feed(h2); !errors.As(err, &fe) || fe.Status != 505 || string(h2) != "GET /a HTTP/2.0\r\nHost: h\r\n\r\n" {
		t.Errorf("HTTP/2.0: %v, fasthttp gets %q; want 505 and the line as sent", err, h2)
	}
	// The check judges the line as received: one that is malformed past a version-like end is
	// refused whatever fasthttp would see.
	for _, in := range []string{"GET /a HTTP/1.23\r\nHost: h\r\n\r\n", "GET /a HTTP/1.2 x\r\nHost: h\r\n\r\n"} {
		for _, piece := range []int{1, len(in)} {
			fc := framingCheck{lim: &http1.Limits{}}
			b := []byte(in)
			var err error
			for off := 0; off < len(b) && err == nil; off += piece {
				err = fc.feed(b[off:min(off+piece, len(b))])
			}
			var fe *http1.Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Errorf("%q, reads of %d: %v, want 400", in, piece, err)
			}
		}
	}
}
