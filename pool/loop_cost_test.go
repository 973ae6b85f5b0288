package pool

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/internal/steps"
)

// trickleConn is a loop-driven upstream connection whose response arrives one byte per
// event: each Read gives one byte, then ErrWouldBlock until the next event.
type trickleConn struct {
	net.Conn // nil: only Read, Write and Close are called
	data     []byte
	ready    bool // bytes arrived with this event
	per      int  // bytes per event (0: one)
}

func (c *trickleConn) Read(p []byte) (int, error) {
	if !c.ready || len(c.data) == 0 {
		return 0, ErrWouldBlock
	}
	c.ready = false
	n := copy(p, c.data[:min(max(c.per, 1), len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

func (c *trickleConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *trickleConn) Close() error                { return nil }

// TestPollHeadOfATrickledHeadIsLinear: an upstream that sends its response head a byte at a
// time costs the event loop work in proportion to the head, not to its square: each poll
// resumes the search for the head's end where the one before stopped.
func TestPollHeadOfATrickledHeadIsLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\n")
	for i := 0; b.Len() < 10<<10; i++ {
		b.WriteString("X-Field-" + strconv.Itoa(i) + ": " + strings.Repeat("v", 200) + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	head := b.String()

	p := New(Options{Addr: "127.0.0.1:1"})
	x := AcquireExchange()
	defer ReleaseExchange(x)
	c := &trickleConn{data: []byte(head)}
	require.NoError(t, x.AttachLoop(p, c, 0, func(bool) {}))
	var err error
	n := steps.Count(func() {
		for err = ErrWouldBlock; err == ErrWouldBlock; {
			c.ready = true
			_, err = x.PollHead(false)
		}
	})
	require.NoError(t, err)
	require.Equal(t, 200, x.Resp.Status)
	require.LessOrEqual(t, n, int64(8*len(head)), "steps for a head of %d bytes", len(head))
}

// TestPollHeadBoundsInterimResponsesAcrossPolls: an upstream that sends 1xx interim responses
// one per event is cut after maxInterimResponses of them, as one that sends them together is,
// not at its response-head timeout.
func TestPollHeadBoundsInterimResponsesAcrossPolls(t *testing.T) {
	interim := "HTTP/1.1 100 Continue\r\n\r\n"
	p := New(Options{Addr: "127.0.0.1:1"})
	x := AcquireExchange()
	defer ReleaseExchange(x)
	c := &trickleConn{data: []byte(strings.Repeat(interim, maxInterimResponses+1) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), per: len(interim)}
	require.NoError(t, x.AttachLoop(p, c, 0, func(bool) {}))
	var err error
	for err = ErrWouldBlock; err == ErrWouldBlock; {
		c.ready = true
		_, err = x.PollHead(false)
	}
	require.ErrorContains(t, err, "too many 1xx interim responses")
}
