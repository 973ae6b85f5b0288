package mirror

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/pool"
)

// stuckShadow reads each request and never answers: held gets a value when a request has
// arrived, gone when the mirror closed that connection.
func stuckShadow(t *testing.T) (addr string, held, gone <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h, g := make(chan struct{}, 16), make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				_ = req.Body.Close()
				h <- struct{}{}
				_, _ = io.Copy(io.Discard, r) // until the mirror closes the connection
				g <- struct{}{}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), h, g
}

// Stop, for a gateway that stops, cuts a copy the shadow holds at once (long before the
// copy's timeout) and returns once the senders have returned.
func TestStopCutsTheCopiesBeingSent(t *testing.T) {
	addr, held, gone := stuckShadow(t)
	p := pool.New(pool.Options{Addr: addr})
	t.Cleanup(p.Close)
	m := New(Options{Service: "stopping", Shadow: "shadow", QueueSize: 4, MaxConcurrent: 2, MaxBytes: 1 << 20, Timeout: time.Minute}, shadowOf(t, p))
	m.start.Do(m.startSenders)
	m.jobs <- &job{body: []byte("{}")}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the copy never reached the shadow")
	}

	stopped := make(chan struct{})
	go func() {
		m.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return: a sender still runs")
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the shadow's connection stayed open after Stop")
	}
	m.Stop() // idempotent
}
