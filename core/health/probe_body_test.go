package health

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A probe passes only when the whole answer arrives within the timeout: a server that sends
// its 200 head and then stalls (a wedged engine behind a proxy that answered the head) fails
// it by the timeout, and one that closes the connection inside the body fails it by the cut,
// as a connect or read error does. A body over the 64 KiB the probe reads still passes.
func TestProbeNeedsTheWholeAnswer(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	serve := func(t *testing.T, answer func(c net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					buf := make([]byte, 4096)
					_, _ = c.Read(buf) // the probe's head fits
					answer(c)
				}()
			}
		}()
		return "http://" + ln.Addr().String()
	}
	s := Spec{Path: "/health", Timeout: 300 * time.Millisecond}

	t.Run("body stalls", func(t *testing.T) {
		base := serve(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
			<-stop
		})
		start := time.Now()
		err := s.Probe(context.Background(), NewClient(nil), base)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("body cut", func(t *testing.T) {
		base := serve(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
		})
		require.ErrorIs(t, s.Probe(context.Background(), NewClient(nil), base), io.ErrUnexpectedEOF)
	})
	t.Run("body over what is read", func(t *testing.T) {
		base := serve(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
			_, _ = c.Write(make([]byte, maxProbeBody+1))
			<-stop
		})
		require.NoError(t, s.Probe(context.Background(), NewClient(nil), base))
	})
}
