package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/ingress"
)

// The bounds of a lingering close (linger.go) on both engines: after an early 413 the gateway
// half-closes and discards what the client still sends, for a bounded time and size, and a
// drain still ends the connection.

// refusedBodyLimit is the body limit of these tests: every request with a body over it is
// refused before its body is read.
const refusedBodyLimit = 1024

// startLingering starts an engine whose body limit refuses the requests of these tests, with
// the given linger bounds (zero: the default).
func startLingering(t *testing.T, ce contractEngine, upstream string, total, idle time.Duration, maxBytes int64) ingress.Transport {
	t.Helper()
	set := ingress.Settings{Name: "web", Address: "127.0.0.1:0", Limits: http1.Limits{MaxBodyBytes: refusedBodyLimit}}
	tr := ce.make(ingress.WithLinger(set, total, idle, maxBytes), newResolver(t, upstream))
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = drainWithin(t, tr, ctx, time.Second+cutSlack)
	})
	return tr
}

// sendRefused writes the head of a request whose declared body is over the limit.
func sendRefused(t *testing.T, c net.Conn, bodyBytes int) {
	t.Helper()
	_, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", bodyBytes)
	require.NoError(t, err)
}

// readRefusal reads the 413 and the end of the gateway's sending side.
func readRefusal(t *testing.T, r *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 413, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"error"`)
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the gateway closes its sending side after the answer")
}

// trickle writes a little to c every few milliseconds until a write fails (the gateway closed
// the connection and the client's kernel got its reset) or stop is closed; it returns when
// the writing stopped, and the error.
func trickle(c net.Conn, stop <-chan struct{}) (time.Time, error) {
	piece := make([]byte, 512)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := c.Write(piece); err != nil {
			return time.Now(), err
		}
		select {
		case <-stop:
			return time.Now(), nil
		case <-t.C:
		}
	}
}

func TestLingerEndsAtTimeoutWhileClientKeepsSending(t *testing.T) {
	up := newUpstream(t, answerNow)
	const total, idle = 1500 * time.Millisecond, time.Second
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startLingering(t, ce, up.addr(), total, idle, 0)
			c := dialClient(t, tr.Addr())
			sendRefused(t, c, 1<<20)
			readRefusal(t, bufio.NewReader(c))
			start := time.Now()
			stop := make(chan struct{})
			timer := time.AfterFunc(total+5*time.Second, func() { close(stop) })
			defer timer.Stop()
			end, err := trickle(c, stop)
			require.Error(t, err, "the lingering connection was still read %v after the answer", end.Sub(start))
			// Bytes kept arriving, so the idle bound did not end it; the total bound did.
			require.Greater(t, end.Sub(start), idle-200*time.Millisecond)
			waitStats(t, tr, ingress.Stats{})
		})
	}
}

func TestLingerEndsAtMaxBytes(t *testing.T) {
	up := newUpstream(t, answerNow)
	const maxBytes = 1 << 20
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startLingering(t, ce, up.addr(), 0, 0, maxBytes)
			c := dialClient(t, tr.Addr())
			sendRefused(t, c, 64<<20)
			piece := make([]byte, 256<<10)
			var err error
			for sent := 0; err == nil && sent < 64<<20; sent += len(piece) {
				_, err = c.Write(piece)
			}
			require.Error(t, err, "the gateway discarded 64 MiB: more than its linger bound of %d bytes", maxBytes)
			waitStats(t, tr, ingress.Stats{})
		})
	}
}

// Discarded bytes are dropped as they arrive: the gateway's heap does not grow with them.
func TestLingerDiscardsInsteadOfBuffering(t *testing.T) {
	up := newUpstream(t, answerNow)
	const sent = 48 << 20
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startLingering(t, ce, up.addr(), 0, 0, 0)
			c := dialClient(t, tr.Addr())
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			sendRefused(t, c, sent)
			piece := make([]byte, 256<<10)
			for n := 0; n < sent; n += len(piece) {
				_, err := c.Write(piece)
				require.NoError(t, err)
			}
			// The writes returned: all but what the socket buffers hold has reached the gateway.
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			require.Less(t, grew, int64(16<<20), "the gateway's heap grew by %d bytes while discarding %d", grew, sent)
			readRefusal(t, bufio.NewReader(c))
		})
	}
}

func TestLingerEndsWhenDrainWaits(t *testing.T) {
	up := newUpstream(t, answerNow)
	const total, idle = 1500 * time.Millisecond, time.Second
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startLingering(t, ce, up.addr(), total, idle, 0)
			c := dialClient(t, tr.Addr())
			sendRefused(t, c, 1<<20)
			readRefusal(t, bufio.NewReader(c))
			stop := make(chan struct{})
			defer close(stop)
			ended := make(chan error, 1)
			go func() { _, err := trickle(c, stop); ended <- err }()

			// The drain lets the linger run out rather than reset the answer, and returns once
			// it has.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, drainWithin(t, tr, ctx, total+cutSlack))
			select {
			case err := <-ended:
				require.Error(t, err)
			case <-time.After(eventWait):
				t.Fatal("the client can still write after the drain")
			}
			require.Equal(t, ingress.Stats{}, tr.Stats())
			waitNoEngineGoroutines(t)
		})
	}
}

func TestLingerCutByDrainDeadline(t *testing.T) {
	up := newUpstream(t, answerNow)
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startLingering(t, ce, up.addr(), 0, 0, 0) // the default 10 s linger
			c := dialClient(t, tr.Addr())
			sendRefused(t, c, 1<<20)
			readRefusal(t, bufio.NewReader(c))
			stop := make(chan struct{})
			defer close(stop)
			ended := make(chan error, 1)
			go func() { _, err := trickle(c, stop); ended <- err }()

			const grace = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			require.ErrorIs(t, drainWithin(t, tr, ctx, grace+cutSlack), context.DeadlineExceeded)
			select {
			case err := <-ended:
				require.Error(t, err)
			case <-time.After(eventWait):
				t.Fatal("the client can still write after the drain")
			}
			waitStats(t, tr, ingress.Stats{})
			waitNoEngineGoroutines(t)
		})
	}
}
