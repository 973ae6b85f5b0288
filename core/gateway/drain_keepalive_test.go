package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readChunkedEnd reads the last chunk of a chunked body and its empty trailer section.
func readChunkedEnd(t *testing.T, r *bufio.Reader) {
	t.Helper()
	for _, want := range []string{"0\r\n", "\r\n"} {
		line, err := r.ReadString('\n')
		require.NoError(t, err, "the stream's end")
		require.Equal(t, want, line, "the stream's end")
	}
}

// requireNextServedWithClose sends another request on c, whose last response promised
// keep-alive, and requires it to be served with Connection: close, the connection closing after;
// then c closes too, as a client does once the gateway closed (a drain waits for a connection
// whose close lingers until the client's).
func requireNextServedWithClose(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	_, err := io.WriteString(c, "GET /json HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.NoError(t, err)
	_, err = r.Peek(1)
	require.NoError(t, err, "the request sent after the stream got no answer: the drain closed a connection its client was told to keep")
	resp := readResponse(t, r, false)
	require.Equal(t, 200, resp.status)
	require.Equal(t, "close", resp.headers["connection"], "a response during the drain says Connection: close")
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection closes after the response that said so")
	require.NoError(t, c.Close())
}

// waitRefused waits, up to a deadline, until a new connection to addr is refused.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if err == nil {
			c.Close()
		}
		require.True(t, time.Now().Before(deadline), "%s still accepts connections", addr)
	}
}

// A stream whose head went out before a drain began told its client the connection stays
// open. A client in a loop sends its next request the moment the stream ends, so the drain
// serves that request (with Connection: close) instead of closing the connection under it:
// a chat completion is a POST, which no client sends again. The drain comes from a reload that
// replaces the entrypoint and from the gateway's own drain (SIGTERM) alike, on every engine and
// over TLS (the fasthttp engine, as TLS entrypoints run it).
func TestDrainServesNextRequestAfterStreamThatPromisedKeepAlive(t *testing.T) {
	ws, js := wsEchoUpstream(t), watchUpstream(t).addr()
	cert, key, roots := selfSigned(t, t.TempDir())
	for _, variant := range append(engines, "fasthttp+tls") {
		engine, useTLS, settings := variant, false, ""
		if variant == "fasthttp+tls" {
			engine, useTLS = "fasthttp", true
			settings = fmt.Sprintf("tls = { cert_file = %q, key_file = %q }\n", cert, key)
		}
		for _, drain := range []string{"reload", "sigterm"} {
			t.Run(variant+"-"+drain, func(t *testing.T) {
				next := make(chan int)
				u := upstreams{sseUpstream(t, next).addr(), ws, js}
				t.Cleanup(func() { close(next) })
				ep := func(idle string) string {
					return fmt.Sprintf("[entrypoints.web]\naddress = \"127.0.0.1:0\"\nengine = %s\nidle_timeout = %q\n%s", engineTOML(engine), idle, settings)
				}
				g, path := startFromFile(t, epReloadConfig(ep("60s"), u, 1))
				addr := g.Addr("web")
				c := dial(t, addr)
				if useTLS {
					c = tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
				}
				r := startStream(t, c, next)

				var drainErr error
				drained := make(chan struct{})
				switch drain {
				case "reload":
					// Another idle_timeout replaces the entrypoint: the old transport drains.
					require.NoError(t, reloadWith(t, g, path, epReloadConfig(ep("61s"), u, 2)))
					close(drained)
				case "sigterm":
					go func() {
						defer close(drained)
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						drainErr = g.Drain(ctx)
					}()
					// The gateway's cleanup drains it too: not while this drain runs.
					t.Cleanup(func() { <-drained })
					waitRefused(t, addr)
				}

				finishStream(t, r, next)
				readChunkedEnd(t, r)
				requireNextServedWithClose(t, c, r)
				<-drained
				require.NoError(t, drainErr)
			})
		}
	}
}
