package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sseUpstream answers each request with an SSE stream whose events are released one by one
// by the test: the upstream sends event i only after receiving on next. It proves zero
// buffering without timing: the client must have event i before the upstream sends i+1.
func sseUpstream(t *testing.T, next <-chan int) *upstream {
	return serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		u.watchClose(r)
		// It closes the connection after each stream, so it says so: a connection that closes
		// unannounced races its reuse, and a POST that lost the race is not sent again.
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n")
		if err != nil {
			return false
		}
		for i := range next {
			var ev string
			if i < 0 {
				ev = "data: [DONE]\n\n"
			} else {
				ev = fmt.Sprintf("data: {\"i\":%d}\n\n", i)
			}
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
				return false
			}
			if i < 0 {
				_, err = io.WriteString(c, "0\r\n\r\n")
				_ = err
				return false
			}
		}
		<-u.stop
		return false
	})
}

func TestStreamIsRelayedWithZeroBuffering(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int)
			up := sseUpstream(t, next)
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			r := bufio.NewReader(c)
			// Headers arrive before any event exists upstream.
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "HTTP/1.1 200 OK\r\n", line)
			for {
				l, err := r.ReadString('\n')
				require.NoError(t, err)
				if l == "\r\n" {
					break
				}
			}
			for i := 0; i < 5; i++ {
				next <- i // the upstream sends event i now, and i+1 only after we read i
				want := fmt.Sprintf("data: {\"i\":%d}\n\n", i)
				require.Equal(t, want, readChunk(t, r))
			}
			next <- -1
			require.Equal(t, "data: [DONE]\n\n", readChunk(t, r))
			require.Equal(t, "", readChunk(t, r), "last chunk")
			close(next)
		})
	}
}

// readChunk reads one chunk of a chunked body ("" for the last chunk).
func readChunk(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var size int
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	_, err = fmt.Sscanf(strings.TrimSpace(line), "%x", &size)
	require.NoError(t, err, "chunk size line %q", line)
	b := make([]byte, size+2)
	_, err = io.ReadFull(r, b)
	require.NoError(t, err)
	return string(b[:size])
}

// cancelWithin is the bound for a client disconnect to reach the upstream.
const cancelWithin = 50 * time.Millisecond

func TestClientDisconnectWhileUpstreamSilentClosesUpstream(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			got := make(chan struct{}, 1)
			up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
				// Stay silent (as a model before its first token) until the gateway hangs up.
				u.watchClose(r)
				got <- struct{}{}
				<-u.stop
				return false
			})
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			<-got
			require.NoError(t, c.Close())
			up.waitConnClosed(t, cancelWithin)
		})
	}
}

func TestClientDisconnectMidStreamClosesUpstream(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			next := make(chan int, 1)
			up := sseUpstream(t, next)
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			r := bufio.NewReader(c)
			next <- 0
			resp, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, resp, "200")
			for {
				l, err := r.ReadString('\n')
				require.NoError(t, err)
				if l == "\r\n" {
					break
				}
			}
			require.Equal(t, "data: {\"i\":0}\n\n", readChunk(t, r))
			require.NoError(t, c.Close()) // the upstream is now silent between tokens
			up.waitConnClosed(t, cancelWithin)
			close(next)
		})
	}
}

// cutAfterOneEvent answers a streamed response of one event on c, then resets the connection
// (the upstream dies mid-stream); it returns false, which ends the script's connection.
func cutAfterOneEvent(c net.Conn) bool {
	io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	ev := "data: {\"i\":0}\n\n"
	fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, not FIN
	}
	return false
}

// An upstream that dies mid-stream must never look like a finished stream to the client:
// no [DONE], an SSE error event instead, and the stream ends promptly.
func TestUpstreamResetMidStreamEndsClientStreamWithoutDone(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		return cutAfterOneEvent(c)
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			// The response ends promptly (within the read deadline) and in good framing.
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			s := string(resp.body)
			require.Contains(t, s, `data: {"i":0}`)
			require.NotContains(t, s, "[DONE]")
			require.Contains(t, s, "event: error")
			require.Contains(t, s, `"code":"upstream_stream_error"`)
		})
	}
}

// Every event boundary the SSE format allows counts: an upstream that ends its lines with CRLF
// (sse-starlette's default) or CR, cut mid-stream, still ends the client's stream with the
// error event, on a chunked and on an until-close upstream body.
func TestStreamCutAfterCRLFEventsEndsWithErrorEvent(t *testing.T) {
	for _, form := range []struct{ name, ev string }{{"CRLF", "data: {\"i\":0}\r\n\r\n"}, {"CR", "data: {\"i\":0}\r\r"}} {
		for _, chunked := range []bool{true, false} {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
				if chunked {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
					fmt.Fprintf(c, "%x\r\n%s\r\n", len(form.ev), form.ev)
				} else {
					// Content-Length absent and not chunked: the body ends at close, so only a
					// reset marks the cut.
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+form.ev)
				}
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST, not FIN
				}
				return false
			})
			for _, engine := range engines {
				t.Run(fmt.Sprintf("%s/chunked=%v/%s", form.name, chunked, engine), func(t *testing.T) {
					_, addr := startGateway(t, engine, up.addr(), "")
					c := dial(t, addr)
					send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
					resp := readResponse(t, bufio.NewReader(c), false)
					require.Equal(t, 200, resp.status)
					s := string(resp.body)
					require.True(t, strings.HasPrefix(s, form.ev), "the event as sent: %q", s)
					require.Contains(t, s, "event: error")
					require.NotContains(t, s, "[DONE]")
				})
			}
		}
	}
}

// A stream whose upstream dies before the first event still ends with an SSE error event.
func TestUpstreamResetBeforeFirstEventSendsErrorEvent(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			require.Contains(t, string(resp.body), "event: error")
			require.NotContains(t, string(resp.body), "[DONE]")
		})
	}
}

// A client that half-closes after its request is treated as gone (as nginx does): the upstream
// is cancelled and the client gets no made-up response.
func TestHalfClosedClientGetsNoFakeResponse(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			got := make(chan struct{}, 1)
			up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
				u.watchClose(r)
				got <- struct{}{}
				<-u.stop
				return false
			})
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			all, err := io.ReadAll(c) // returns when the gateway closes the connection
			require.NoError(t, err)
			require.Empty(t, string(all))
			select {
			case <-got: // the request reached the upstream before the gateway saw the FIN
				up.waitConnClosed(t, 2*time.Second)
			default:
			}
		})
	}
}

// An upstream that switches protocols although no upgrade was asked for is a 502.
func TestUnrequestedUpgradeIs502(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n")
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 502, resp.status)
			require.Contains(t, string(resp.body), "upstream_protocol_error")
		})
	}
}

// An upstream that goes silent mid-stream for longer than stream_idle_timeout ends the
// client's stream with the SSE error event, as one that resets it does.
func TestStalledUpstreamEndsStreamWithErrorEvent(t *testing.T) {
	up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		u.watchClose(r)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		ev := "data: {\"i\":0}\n\n"
		fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
		<-u.stop // silent until the gateway gives up (or cleanup)
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayServers(t, engine, `servers = [{ url = "http://`+up.addr()+`" }]
stream_idle_timeout = "300ms"`)
			c := dial(t, addr)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			s := string(resp.body)
			require.Contains(t, s, `data: {"i":0}`)
			require.NotContains(t, s, "[DONE]")
			require.Contains(t, s, "event: error")
		})
	}
}

// A stream whose upstream failed at an event boundary ends in good framing (the error event,
// then the last chunk), so the client's connection carries its next request, as on a stream
// that completed: a client that pools connections would otherwise send it on a connection
// the gateway is closing. An HTTP/1.0 client's stream ends at the close, which stays.
func TestConnectionOutlivesACutStream(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if !strings.HasPrefix(head, "POST /cut ") {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		}
		return cutAfterOneEvent(c)
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(c)
			send(t, c, "POST /cut HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Contains(t, string(resp.body), "event: error")
			require.NotEqual(t, "close", strings.ToLower(resp.headers["connection"]))
			send(t, c, "GET /ok HTTP/1.1\r\nHost: gw\r\n\r\n")
			next := readResponse(t, r, false)
			require.Equal(t, 200, next.status, "the next request on the same connection")
			require.Equal(t, "ok", string(next.body))

			old := dial(t, addr)
			_ = old.SetReadDeadline(time.Now().Add(10 * time.Second))
			send(t, old, "POST /cut HTTP/1.0\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			rest, err := io.ReadAll(old)
			require.NoError(t, err, "an HTTP/1.0 stream ends at the close")
			require.Contains(t, string(rest), "event: error")
		})
	}
}
