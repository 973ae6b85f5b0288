package gateway_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			var batch strings.Builder
			for i := 0; i < 5; i++ {
				body := fmt.Sprintf(`{"i":%d}`, i)
				fmt.Fprintf(&batch, "POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}
			send(t, c, batch.String()) // all five in one write
			r := bufio.NewReader(c)
			for i := 0; i < 5; i++ {
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.Equal(t, fmt.Sprintf(`{"i":%d}`, i), string(resp.body))
			}
		})
	}
}

// slowUpstream answers GET /slow with "slow" once unblock is called (telling arrived, when not
// nil, that the request came), and every other request with other.
func slowUpstream(t *testing.T, arrived chan<- struct{}, other func(c net.Conn, body []byte) bool) (*upstream, func()) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	up := serveUpstreamU(t, func(u *upstream, c net.Conn, _ *bufio.Reader, head string, body []byte) bool {
		if !strings.HasPrefix(head, "GET /slow ") {
			return other(c, body)
		}
		if arrived != nil {
			arrived <- struct{}{}
		}
		select {
		case <-release:
		case <-u.stop:
			return false
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")
		return err == nil
	})
	return up, unblock
}

// A response goes out whole as soon as it is ready, also when the client has pipelined
// another request behind it: it never waits for that request's upstream (a client that
// pipelines a slow request behind a fast one would otherwise get neither until the slow one
// is answered). Each case answers the first request in its own framing.
func TestPipelinedResponseDoesNotWaitForTheNext(t *testing.T) {
	first := map[string]string{
		"length":  "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfast",
		"chunked": "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n6\r\nfast\n\n\r\n0\r\n\r\n",
	}
	for _, framing := range []string{"length", "chunked"} {
		for _, engine := range engines {
			t.Run(framing+"/"+engine, func(t *testing.T) {
				up, unblock := slowUpstream(t, nil, func(c net.Conn, _ []byte) bool {
					_, err := io.WriteString(c, first[framing])
					return err == nil
				})
				_, addr := startGateway(t, engine, up.addr(), "")
				c := dial(t, addr)
				send(t, c, "GET /fast HTTP/1.1\r\nHost: gw\r\n\r\nGET /slow HTTP/1.1\r\nHost: gw\r\n\r\n")
				r := bufio.NewReader(c)
				// The slow request's upstream answers only after the first response is in.
				require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.Contains(t, string(resp.body), "fast", "the first response, whole, before the second is answered")
				unblock()
				require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
				resp = readResponse(t, r, false)
				require.Equal(t, "slow", string(resp.body))
			})
		}
	}
}

// Past max_header_bytes + max_body_bytes of pipelined bytes waiting behind a request in
// flight, the gnet engine takes no further request on the connection: the response in flight
// still arrives whole, then the connection ends with a FIN (not a reset), so that the client
// can retry the unanswered requests on a new one (RFC 9112 §9.3.2). fasthttp does not read
// while it serves, so it answers them all.
func TestPipelinedOverflowEndsAfterResponseInFlight(t *testing.T) {
	const (
		posts    = 56
		postBody = 300 << 10 // 56 × 300 KiB: past the bound and the socket buffers between client and gateway
	)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			up, unblock := slowUpstream(t, arrived, func(c net.Conn, body []byte) bool {
				reply := fmt.Sprintf(`{"n":%d}`, len(body))
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(reply), reply)
				return err == nil
			})
			_, addr := startGateway(t, engine, up.addr(), "max_header_bytes = 2048\nmax_body_bytes = 1048576")
			shedBefore := shedCount(t, "pipeline_overflow")
			c := dial(t, addr)
			require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(512<<10))
			require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))

			// The client writes everything before it reads, as a pipelining client may.
			wrote := make(chan error, 1)
			go func() {
				w := bufio.NewWriterSize(c, 64<<10)
				_, err := io.WriteString(w, "GET /slow HTTP/1.1\r\nHost: gw\r\n\r\n")
				for i := 0; i < posts && err == nil; i++ {
					if _, err = fmt.Fprintf(w, "POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", postBody); err == nil {
						err = writeRaw(w, postBody)
					}
				}
				if err == nil {
					err = w.Flush()
				}
				wrote <- err
			}()
			waitFor := func(ch <-chan struct{}, what string) {
				select {
				case <-ch:
				case <-time.After(20 * time.Second):
					t.Fatal(what)
				}
			}
			waitFor(arrived, "the slow request never reached the upstream")
			var writeErr error
			if engine == "fasthttp" {
				unblock() // fasthttp reads the pipelined requests only after the response
			} else {
				// gnet reads on while the request is in flight: the client's write can only
				// end once the gateway has taken (and discarded) far more than the bound.
				select {
				case writeErr = <-wrote:
				case <-time.After(20 * time.Second):
					t.Fatal("the client's pipelined writes never ended")
				}
				unblock()
			}

			r := bufio.NewReader(c)
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "slow", string(resp.body), "the response in flight must arrive whole")
			if engine == "fasthttp" {
				for i := 0; i < posts; i++ {
					resp := readResponse(t, r, false)
					require.Equal(t, 200, resp.status)
					require.Equal(t, fmt.Sprintf(`{"n":%d}`, postBody), string(resp.body))
				}
				require.NoError(t, <-wrote)
				require.Equal(t, shedBefore, shedCount(t, "pipeline_overflow"), "nothing was shed")
				return
			}
			require.NoError(t, writeErr, "the client could not finish writing: the gateway reset the connection")
			rest, err := io.ReadAll(r)
			require.NoError(t, err, "the connection was reset after the response in flight")
			require.Empty(t, string(rest), "no pipelined request past the bound is answered")
			waitShed(t, "pipeline_overflow", shedBefore+1)
		})
	}
}

func TestChunkedRequestBodyIsForwardedWhole(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n")
			send(t, c, "6;ext=1\r\n:\"bcd\"\r\n1\r\n}\r\n0\r\nTrailer-X: 1\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, `{"a":"bcd"}`, string(resp.body))
		})
	}
}

func TestExpectContinueGetsInterimResponse(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/x HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n")
			r := bufio.NewReader(c)
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
			blank, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "\r\n", blank)
			send(t, c, `{"a":1}`)
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, `{"a":1}`, string(resp.body))
		})
	}
}

// An HTTP/1.0 client cannot read chunked coding (RFC 9112 §7.1): a streamed response of
// unknown length must reach it delimited by close.
func TestHTTP10ClientNeverGetsChunked(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, ev := range []string{"data: hello\n\n", "data: [DONE]\n\n"} {
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
		}
		io.WriteString(c, "0\r\n\r\n")
		return true
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /v1/stream HTTP/1.0\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			// RFC 9110 §2.5: the response carries the server's own version, 1.1.
			require.Equal(t, "HTTP/1.1", resp.proto)
			require.Empty(t, resp.headers["transfer-encoding"])
			require.Equal(t, "data: hello\n\ndata: [DONE]\n\n", string(resp.body))
		})
	}
}

// Request smuggling defences (RFC 9112 §6.1, §6.3, §11.2): ambiguous framing is refused with
// 400 and the connection is closed, so no second request can hide in the body.
func TestConflictingFramingIsRefusedAndClosed(t *testing.T) {
	up := serveUpstream(t, echo)
	cases := map[string]string{
		"cl and te":          "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"two cl":             "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
		"bad chunk size":     "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"te not chunked":     "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\n",
		"space before colon": "GET / HTTP/1.1\r\nHost : gw\r\n\r\n",
		"two authorization":  "GET / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
	}
	for _, engine := range engines {
		for name, raw := range cases {
			t.Run(engine+"/"+name, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "")
				c := dial(t, addr)
				send(t, c, raw+"GET /smuggled HTTP/1.1\r\nHost: gw\r\n\r\n")
				r := bufio.NewReader(c)
				resp := readResponse(t, r, false)
				require.Contains(t, []int{400, 501}, resp.status, "body %s", resp.body)
				require.Equal(t, "application/json", resp.headers["content-type"])
				require.Contains(t, string(resp.body), `"error"`)
				// The connection is closed: no response to the smuggled request.
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				rest, _ := io.ReadAll(r)
				require.Empty(t, string(rest))
			})
		}
	}
}

func TestLimits(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine+"/header 431", func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "max_header_bytes = 2048")
			c := dial(t, addr)
			send(t, c, "GET / HTTP/1.1\r\nHost: gw\r\nX-Big: "+strings.Repeat("a", 4096)+"\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 431, resp.status)
			// The OpenAI-style error names the setting and its value.
			require.JSONEq(t, `{"error":{"message":"request head larger than the entrypoint's max_header_bytes (2048 bytes)",`+
				`"type":"invalid_request_error","param":null,"code":"request_header_fields_too_large"}}`, string(resp.body))
		})
		// A body over max_body_bytes is refused by its Content-Length with the gateway's own
		// answer on every engine: 413, the JSON error, a request id; and, asked for 100
		// Continue, before any body is sent (RFC 9110 §10.1.1).
		for _, expect := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/body 413/expect %v", engine, expect), func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "max_body_bytes = 1024")
				c := dial(t, addr)
				r := bufio.NewReader(c)
				head := "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4096\r\n"
				if expect {
					send(t, c, head+"Expect: 100-continue\r\n\r\n")
				} else {
					send(t, c, head+"\r\n"+strings.Repeat("a", 4096))
				}
				resp := readResponse(t, r, false)
				require.Equal(t, 413, resp.status, "body %s", resp.body)
				require.Equal(t, "Content Too Large", resp.reason) // RFC 9110 §15.5.14
				require.Equal(t, "application/json", resp.headers["content-type"])
				require.NotEmpty(t, resp.headers["x-request-id"])
				var body struct {
					Error struct{ Type, Code, Message string }
				}
				require.NoError(t, json.Unmarshal(resp.body, &body), "%s", resp.body)
				require.Equal(t, "invalid_request_error", body.Error.Type)
				require.Equal(t, "request_too_large", body.Error.Code)
				require.NotEmpty(t, body.Error.Message)
			})
		}
	}
}

// Hop-by-hop fields never cross the proxy (RFC 9110 §7.6.1), including those the client
// names in Connection; the forwarding headers are the gateway's (the client is not trusted).
func TestHopByHopHeadersRemovedAndForwardedHeadersSet(t *testing.T) {
	heads := make(chan string, 1)
	up := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		heads <- head
		return echo(c, r, head, body)
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw.example\r\nConnection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\nUpgrade: websocket\r\nTrailer: X-Sum\r\nX-Forwarded-For: 10.1.1.1\r\nX-Forwarded-Proto: https\r\nX-Keep: yes\r\nAuthorization: Bearer sk-k\r\nVia: 1.0 corp-proxy\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status)
			head := strings.ToLower(<-heads)
			for _, gone := range []string{"x-secret-hop", "keep-alive:", "proxy-authorization", "te:", "connection:", "proxy-connection", "upgrade", "trailer"} {
				require.NotContains(t, head, gone)
			}
			require.Contains(t, head, "x-keep: yes")
			require.Contains(t, head, "x-forwarded-for: 127.0.0.1\r\n")
			require.NotContains(t, head, "10.1.1.1")
			require.Contains(t, head, "authorization: bearer sk-k", "RFC 9110 §11.6.2: Authorization is not modified")
			require.Contains(t, head, "via: 1.0 corp-proxy")
			require.Equal(t, 1, strings.Count(head, "\r\nhost: "), "one Host")
			require.Contains(t, head, "\r\nhost: "+up.addr()+"\r\n", "the server's own host:port")
			require.Contains(t, head, "x-forwarded-proto: http\r\n")
			require.Contains(t, head, "x-forwarded-host: gw.example")
		})
	}
}

func TestUnreachableUpstreamIsOpenAIStyle502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, dead, "")
			c := dial(t, addr)
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 502, resp.status)
			var body struct {
				Error struct {
					Message, Type, Code string
					Param               any
				}
			}
			require.NoError(t, json.Unmarshal(resp.body, &body), "%s", resp.body)
			require.Equal(t, "upstream_error", body.Error.Type)
			require.Equal(t, "upstream_unreachable", body.Error.Code)
			require.NotEmpty(t, body.Error.Message)
		})
	}
}

// A pipelined request's interim 100 Continue must not overtake the previous response while
// that one is still queued for a slow client.
func TestInterimResponseWaitsBehindQueuedResponse(t *testing.T) {
	big := strings.Repeat("b", 4<<20)
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, body []byte) bool {
		if strings.HasPrefix(head, "GET /big") {
			_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
			return err == nil
		}
		return echo(c, nil, head, body)
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\nPOST /v1/x HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n")
			r := bufio.NewReader(c)
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, len(big), len(resp.body))
			require.True(t, strings.Count(string(resp.body), "b") == len(big), "the body was interleaved with other bytes")
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			if line == "HTTP/1.1 100 Continue\r\n" {
				_, err = r.ReadString('\n')
				require.NoError(t, err)
			}
			send(t, c, `{"a":1}`)
			resp = readResponse(t, bufio.NewReader(io.MultiReader(strings.NewReader(nonInterim(line)), r)), false)
			require.Equal(t, `{"a":1}`, string(resp.body))
		})
	}
}

// nonInterim returns line unless it is the interim status line already consumed.
func nonInterim(line string) string {
	if line == "HTTP/1.1 100 Continue\r\n" {
		return ""
	}
	return line
}

// A malformed request head or body is refused at once, with the same status on every engine
// and the gateway's JSON error body; none waits for read_header_timeout (set far beyond the
// time the answer is waited for, so that a wait shows as a failure). Lines ended by a bare LF
// are refused (RFC 9112 §2.2 lets a server reject them), as is every other framing the gnet
// engine's parser refuses; a request line over max_header_bytes gets 414 (RFC 9112 §3), a
// head whose field lines go over it 431.
func TestMalformedRequestIsRefusedAtOnce(t *testing.T) {
	// A client with prior knowledge of HTTP/2 (RFC 9113 §3.3) sends the connection preface
	// and at once its SETTINGS frame (here an empty one: length 0, type 4, flags 0, stream 0).
	const h2Preface, h2EmptySettings = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	// keptAlive marks a case whose request goes on a connection that served keptAliveRequest
	// (answered before the case's request is sent).
	const keptAlive, keptAliveRequest = "\x00kept-alive\x00", "GET / HTTP/1.1\r\nHost: gw\r\n\r\n"
	const limit = 2048
	// The answers to a head over the limit name the setting and its value, for the client's
	// operator to find.
	messages := map[int]string{
		414: "request line larger than the entrypoint's max_header_bytes (2048 bytes; RFC 9112 §3)",
		431: "request head larger than the entrypoint's max_header_bytes (2048 bytes)",
		413: "request body larger than the entrypoint's max_body_bytes (16777216 bytes)",
	}
	up := serveUpstream(t, echo)
	cases := []struct {
		name   string
		raw    string
		status int
		code   string
	}{
		{"bare LF everywhere", "GET / HTTP/1.1\nHost: gw\n\n", 400, "bad_request"},
		{"bare LF ends the request line", "GET / HTTP/1.1\nHost: gw\r\n\r\n", 400, "bad_request"},
		{"bare LF ends a field line", "GET / HTTP/1.1\r\nHost: gw\nX: 1\r\n\r\n", 400, "bad_request"},
		{"bare LF blank line", "GET / HTTP/1.1\r\nHost: gw\r\n\n", 400, "bad_request"},
		{"bare LF pipelined after a body", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\nHost: gw\n\n", 200, ""},
		{"bare LF on a kept-alive connection", keptAlive + "GET / HTTP/1.1\nHost: gw\n\n", 200, ""},
		{"chunk size line ended by bare LF on a kept-alive connection", keptAlive + "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n", 200, ""},
		{"bare CR in a field line", "GET / HTTP/1.1\r\nHost: gw\rX: 1\r\n\r\n", 400, "bad_request"},
		{"NUL in a field value", "GET / HTTP/1.1\r\nHost: gw\r\nX: a\x00b\r\n\r\n", 400, "bad_request"},
		{"NUL in a field name", "GET / HTTP/1.1\r\nHost: gw\r\nX\x00Y: 1\r\n\r\n", 400, "bad_request"},
		{"field line without colon", "GET / HTTP/1.1\r\nHost: gw\r\nno colon here\r\n\r\n", 400, "bad_request"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: gw\r\nX: a\r\n b\r\n\r\n", 400, "bad_request"},
		{"whitespace before the first field", "GET / HTTP/1.1\r\n Host: gw\r\n\r\n", 400, "bad_request"},
		{"space before colon", "GET / HTTP/1.1\r\nHost : gw\r\n\r\n", 400, "bad_request"},
		{"bad Content-Length", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1x\r\n\r\n1x", 400, "bad_request"},
		{"negative Content-Length", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: -1\r\n\r\n", 400, "bad_request"},
		{"bad chunk size", "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad_request"},
		{"chunk size line ended by bare LF", "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n", 400, "bad_request"},
		{"chunk data without CRLF", "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}xx", 400, "bad_request"},
		{"invalid method", "G(T / HTTP/1.1\r\nHost: gw\r\n\r\n", 400, "bad_request"},
		// A byte no method holds is refused before the line ends: a TLS ClientHello's record
		// header sent to a plaintext port, then nothing more.
		{"TLS ClientHello on a plaintext port", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 400, "bad_request"},
		{"binary junk over the limit", "GET\x01" + strings.Repeat("Z", limit), 400, "bad_request"},
		{"missing Host", "GET / HTTP/1.1\r\nX: 1\r\n\r\n", 400, "bad_request"},
		{"conflicting framing asking for 100 Continue", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", 400, "bad_request"},
		{"Content-Length over the limit asking for 100 Continue", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 99999999999\r\nExpect: 100-continue\r\n\r\n", 413, "request_too_large"},
		{"Content-Length over the limit", "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 99999999999\r\n\r\n", 413, "request_too_large"},
		{"HTTP/2.0 version", "GET / HTTP/2.0\r\nHost: gw\r\n\r\n", 505, "http_version_not_supported"},
		{"HTTP/2 connection preface", h2Preface, 505, "http_version_not_supported"},
		{"HTTP/2 connection preface and SETTINGS", h2Preface + h2EmptySettings, 505, "http_version_not_supported"},
		{"request line over the limit, unended", "GET /" + strings.Repeat("a", limit), 414, "uri_too_long"},
		{"request line over the limit, whole", "GET /" + strings.Repeat("a", limit) + " HTTP/1.1\r\nHost: gw\r\n\r\n", 414, "uri_too_long"},
		{"field lines over the limit", "GET / HTTP/1.1\r\nHost: gw\r\nX: " + strings.Repeat("a", limit) + "\r\n\r\n", 431, "request_header_fields_too_large"},
	}
	cert, key, roots := selfSigned(t, t.TempDir())
	for _, engine := range append(engines, "fasthttp+tls") {
		t.Run(engine, func(t *testing.T) {
			settings := fmt.Sprintf("max_header_bytes = %d\nread_header_timeout = \"60s\"", limit)
			useTLS := engine == "fasthttp+tls" // the TLS entrypoints' engine, as they run it
			if useTLS {
				engine, settings = "fasthttp", settings+fmt.Sprintf("\ntls = { cert_file = %q, key_file = %q }", cert, key)
			}
			_, addr := startGateway(t, engine, up.addr(), settings)
			for _, tc := range cases {
				for _, pieces := range []int{1, 2} {
					t.Run(fmt.Sprintf("%s/%d writes", tc.name, pieces), func(t *testing.T) {
						c := dial(t, addr)
						if useTLS {
							c = tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
						}
						require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
						// In two writes the engine may read the head in two pieces, and a parser
						// that waits for more does so on the second.
						r := bufio.NewReader(c)
						raw := tc.raw
						if first, rest, ok := strings.Cut(raw, keptAlive); ok && first == "" {
							// The good request is answered before the next arrives: the engine
							// reads that one as a new request on an idle connection.
							send(t, c, keptAliveRequest)
							require.Equal(t, 200, readResponse(t, r, false).status)
							raw = rest
						}
						cut := len(raw) / pieces
						send(t, c, raw[:cut])
						send(t, c, raw[cut:])
						resp := readResponse(t, r, false)
						status, code := tc.status, tc.code
						if strings.HasPrefix(tc.raw, keptAlive) {
							status, code = 400, "bad_request"
						} else if code == "" { // a good request first: the refusal follows its answer
							require.Equal(t, status, resp.status)
							resp = readResponse(t, r, false)
							status, code = 400, "bad_request"
						}
						require.Equal(t, status, resp.status, "body %s", resp.body)
						require.Equal(t, "application/json", resp.headers["content-type"])
						var body struct {
							Error struct{ Type, Code, Message string }
						}
						require.NoError(t, json.Unmarshal(resp.body, &body), "%s", resp.body)
						require.Equal(t, "invalid_request_error", body.Error.Type)
						require.Equal(t, code, body.Error.Code)
						require.NotEmpty(t, body.Error.Message)
						if msg, ok := messages[status]; ok {
							require.Equal(t, msg, body.Error.Message)
						}
					})
				}
			}
		})
	}
}

// A request that asks for a protocol upgrade the gateway refuses (here 426, an unsupported
// WebSocket version) does not leave the rest of the connection unchecked: a malformed request
// behind it is never read (the connection ends after the refusal on every engine, see
// TestRefusedUpgradeEndsTheConnection) and never reaches the upstream.
func TestRequestAfterRefusedUpgradeIsStillChecked(t *testing.T) {
	var after atomic.Int32
	up := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
		if strings.Contains(head, "/after") {
			after.Add(1)
		}
		return echo(c, r, head, body)
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 12\r\n\r\n"+
				"GET /after HTTP/1.1\nHost: gw\r\n\r\n")
			require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
			r := bufio.NewReader(c)
			require.Equal(t, 426, readResponse(t, r, false).status)
			_, err := r.ReadString('\n')
			require.ErrorIs(t, err, io.EOF, "the connection ends after the refusal")
			require.Zero(t, after.Load(), "the malformed request reached the upstream")
		})
	}
}
