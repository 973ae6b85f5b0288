package http1

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/steps"
	"github.com/stretchr/testify/require"
)

var findHeadEndTests = []struct {
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

func TestFindHeadEnd(t *testing.T) {
	for _, tt := range findHeadEndTests {
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

// TestHeadScanFindsWhatFindHeadEndFinds feeds every case of TestFindHeadEnd to a HeadScan as
// it arrives in pieces of every size: the first answer with a head, or the last one, is
// FindHeadEnd's on the whole.
func TestHeadScanFindsWhatFindHeadEndFinds(t *testing.T) {
	for _, tt := range findHeadEndTests {
		for piece := 1; piece <= max(len(tt.in), 1); piece++ {
			var s HeadScan
			skip, n := 0, -1
			for end := min(piece, len(tt.in)); n < 0; end = min(end+piece, len(tt.in)) {
				skip, n = s.Find([]byte(tt.in[:end]))
				if end == len(tt.in) {
					break
				}
			}
			require.Equal(t, [2]int{tt.skip, tt.n}, [2]int{skip, n}, "%s in pieces of %d", tt.name, piece)
		}
	}
	var s HeadScan
	_, n := s.Find([]byte("GET /a HTTP/1.1\r\n\r\n"))
	require.Equal(t, 19, n)
	s.Reset()
	_, n = s.Find([]byte("GET /bb HTTP/1.1\r\n\r\n"))
	require.Equal(t, 20, n, "after Reset the scan starts over")
}

// TestHeadScanWorkIsLinear: a head of many short lines arriving a byte at a time costs the
// HeadScan a few steps per byte, where finding its end in the whole buffer at each arrival
// searched every line received so far again (thousands of line searches per byte here).
func TestHeadScanWorkIsLinear(t *testing.T) {
	head := []byte("GET / HTTP/1.1\r\n" + strings.Repeat("a:b\r\n", 8000) + "\r\n")
	var skip, n int
	work := steps.Count(func() {
		var s HeadScan
		for i := 1; i <= len(head); i++ {
			if skip, n = s.Find(head[:i]); n >= 0 {
				break
			}
		}
	})
	require.Equal(t, [2]int{0, len(head)}, [2]int{skip, n})
	require.Less(t, work, int64(4*len(head)), "steps for a %d-byte head", len(head))
}

// TestIsHopByHopWithManyConnectionTokens checks the indexed lookup (more than linearTokens
// tokens) against the tokens one by one, in any case, and that forwarding a head of 100
// fields whose Connection names thousands of tokens costs steps in proportion to its size.
func TestIsHopByHopWithManyConnectionTokens(t *testing.T) {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Named, x-named\r\nConnection: ")
	for i := range 2500 {
		b.WriteString("t" + strconv.Itoa(i) + ",")
	}
	b.WriteString("LAST\r\n")
	for i := range 94 {
		b.WriteString("X-" + strconv.Itoa(i) + ": v\r\n")
	}
	b.WriteString("T42: v\r\nx-NAMED: v\r\nLast: v\r\n\r\n")
	head := []byte(b.String())
	var r Request
	require.NoError(t, r.ParseRequestHead(head, nil))
	require.Len(t, r.Headers, 100)
	require.True(t, r.connIndex.built())
	for _, name := range []string{"X-Named", "x-named", "X-NAMED", "t0", "T2499", "last", "keep-alive", "Connection", "TE"} {
		require.True(t, r.IsHopByHop([]byte(name)), name)
	}
	for _, name := range []string{"X-1", "t2500", "t", "Host", "Content-Type", "LAS", "LASTT", ""} {
		require.False(t, r.IsHopByHop([]byte(name)), name)
	}
	work := steps.Count(func() {
		_ = r.ParseRequestHead(head, nil)
		for i := range r.Headers {
			r.IsHopByHop(r.Headers[i].Key)
		}
	})
	// One by one, the 100 fields against the 2,504 tokens took some 250,000 steps.
	require.Less(t, work, int64(8*len(head)), "steps for a %d-byte head", len(head))

	// Few tokens are compared one by one, and the index of a reused Request is dropped.
	require.NoError(t, r.ParseRequestHead([]byte("GET / HTTP/1.1\r\nHost: h\r\nConnection: a, B\r\nb: 1\r\n\r\n"), nil))
	require.False(t, r.connIndex.built())
	require.True(t, r.IsHopByHop([]byte("A")))
	require.True(t, r.IsHopByHop([]byte("b")))
	require.False(t, r.IsHopByHop([]byte("c")))
}
