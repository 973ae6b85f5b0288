package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tests of docs/http-conformance.md that are not covered elsewhere: each runs on both
// engines against a scripted upstream on loopback.

// A gateway error answering a HEAD request has the GET's fields but no body (RFC 9110
// §9.3.2): a pipelined request behind it still parses.
func TestGatewayErrorToHEADHasNoBody(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayRule(t, engine, up.addr(), "PathPrefix(`/api`)", "")
			c := dial(t, addr)
			send(t, c, "HEAD /nowhere HTTP/1.1\r\nHost: gw\r\n\r\nGET /api/x HTTP/1.1\r\nHost: gw\r\n\r\n")
			r := bufio.NewReader(c)
			resp := readResponse(t, r, true)
			require.Equal(t, 404, resp.status)
			require.Equal(t, "application/json", resp.headers["content-type"])
			require.NotEmpty(t, resp.headers["content-length"], "the length the GET would have had")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status, "the HEAD answer had a body")
			require.Equal(t, "{}", string(resp.body))
		})
	}
}

// HEAD answers, 204 and 304 never carry a body or chunked framing to the client (RFC 9112
// §6.3), even when the upstream wrongly sends one: the client's next request still parses.
func TestBodylessResponsesNeverCarryABody(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		var resp string
		switch {
		case strings.HasPrefix(head, "HEAD /chunked"):
			resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		case strings.HasPrefix(head, "HEAD "):
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" // a body it must not send
		case strings.HasPrefix(head, "GET /204"):
			resp = "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"
		case strings.HasPrefix(head, "GET /304"):
			resp = "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"
		default:
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone"
		}
		_, err := io.WriteString(c, resp)
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for _, tc := range []struct {
				req    string
				status int
				length string
			}{
				{"HEAD /length", 200, "5"},
				{"HEAD /chunked", 200, ""},
				{"GET /204", 204, ""},
				{"GET /304", 304, ""},
			} {
				send(t, c, tc.req+" HTTP/1.1\r\nHost: gw\r\n\r\nGET /next HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, r, true)
				require.Equal(t, tc.status, resp.status, tc.req)
				require.Equal(t, tc.length, resp.headers["content-length"], tc.req)
				require.Empty(t, resp.headers["transfer-encoding"], tc.req)
				resp = readResponse(t, r, false)
				require.Equal(t, "done", string(resp.body), "%s: the bodyless answer carried bytes", tc.req)
			}
		})
	}
}

// Fields the upstream names in Connection, and the connection-specific ones, do not reach the
// client (RFC 9110 §7.6.1); end-to-end fields do, unchanged and in order (§5.3, §11.6.1).
func TestUpstreamHopByHopFieldsAreRemovedFromResponses(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"+
			"Connection: X-Hop, keep-alive\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\n"+
			"Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\nTrailer: X-Sum\r\n"+
			"Proxy-Authenticate: Basic realm=\"p\"\r\n"+
			"Allow: GET, HEAD\r\nWWW-Authenticate: Bearer realm=\"api\"\r\n"+
			"Set-Cookie: a=1; Path=/\r\nSet-Cookie: a=2; Path=/v1\r\n"+
			"Via: 1.1 origin-cache\r\nCache-Control: no-transform\r\nETag: \"v1\"\r\n"+
			"Content-Length: 2\r\n\r\nok")
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "ok", string(resp.body))
			for _, gone := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Upgrade", "TE", "Trailer", "Proxy-Authenticate", "Connection"} {
				require.Empty(t, resp.all(gone), "%s reached the client", gone)
			}
			require.Equal(t, []string{"GET, HEAD"}, resp.all("Allow"))
			require.Equal(t, []string{`Bearer realm="api"`}, resp.all("WWW-Authenticate"))
			require.Equal(t, []string{"a=1; Path=/", "a=2; Path=/v1"}, resp.all("Set-Cookie"))
			require.Equal(t, []string{"1.1 origin-cache"}, resp.all("Via"))
			require.Equal(t, []string{"no-transform"}, resp.all("Cache-Control"))
			require.Equal(t, []string{`"v1"`}, resp.all("ETag"))

			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, "ok", string(readResponse(t, r, false).body), "the connection stays usable")
		})
	}
}

// A request with "close" gets "Connection: close" and the connection ends after its response
// (RFC 9112 §9.6); an HTTP/1.0 request with keep-alive gets "Connection: keep-alive" and the
// connection persists, one without it is closed (§9.3).
func TestConnectionPersistenceFollowsTheRequest(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")

			c := dial(t, addr)
			r := bufio.NewReader(c)
			send(t, c, "GET /a HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "close", resp.headers["connection"])
			rest, err := io.ReadAll(r)
			require.NoError(t, err, "the gateway closes the connection")
			require.Empty(t, rest)

			c = dial(t, addr)
			r = bufio.NewReader(c)
			for i := 0; i < 2; i++ {
				send(t, c, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
				resp = readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.Equal(t, "keep-alive", resp.headers["connection"])
				require.Equal(t, "{}", string(resp.body))
			}

			c = dial(t, addr)
			r = bufio.NewReader(c)
			send(t, c, "GET /a HTTP/1.0\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "{}", string(resp.body))
			rest, err = io.ReadAll(r)
			require.NoError(t, err, "an HTTP/1.0 connection without keep-alive is closed")
			require.Empty(t, rest)
		})
	}
}

// A close-delimited upstream body reaches an HTTP/1.1 client chunked, so its connection
// persists (RFC 9112 §6.3, §7.1).
func TestCloseDelimitedUpstreamBodyIsChunkedForTheClient(t *testing.T) {
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello, until close")
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for i := 0; i < 2; i++ {
				send(t, c, "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status)
				require.True(t, resp.chunked)
				require.Empty(t, resp.all("Content-Length"), "RFC 9112 §6.2: not with Transfer-Encoding")
				require.Equal(t, "hello, until close", string(resp.body))
			}
		})
	}
}

// An upstream that sends no response head within response_header_timeout is a 504 (RFC 9110
// §15.6.5).
func TestSilentUpstreamIs504(t *testing.T) {
	up := serveUpstreamU(t, func(u *upstream, _ net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		<-u.stop
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayServers(t, engine, `servers = [{ url = "http://`+up.addr()+`" }]
response_header_timeout = "200ms"`)
			c := dial(t, addr)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 504, resp.status)
			require.Contains(t, string(resp.body), `"code":"upstream_timeout"`)
		})
	}
}

// A 100-continue expectation in an HTTP/1.0 request is ignored (RFC 9110 §10.1.1): no 1xx goes
// to an HTTP/1.0 client (§15.2).
func TestHTTP10ExpectationIsIgnored(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "POST /v1/x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n")
			send(t, c, `{"a":1}`)
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 200, resp.status, "the first response is the final one")
			require.Equal(t, `{"a":1}`, string(resp.body))
		})
	}
}

// A framing error answering a HEAD request has no body either (RFC 9110 §9.3.2): the client
// reads the head, then the connection closes. (A head that fasthttp's own parser refuses is
// answered with a body: fasthttp forgets the method of a head it could not read.)
func TestFramingErrorToHEADHasNoBody(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		for name, req := range map[string]string{
			"underscore": "HEAD / HTTP/1.1\r\nHost: gw\r\nContent_Length: 5\r\n\r\n",
			"too large":  "HEAD / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4096\r\n\r\n",
			"te and cl":  "HEAD / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		} {
			t.Run(engine+"/"+name, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "max_body_bytes = 1024")
				c := dial(t, addr)
				send(t, c, req)
				r := bufio.NewReader(c)
				resp := readResponse(t, r, true)
				require.Contains(t, []int{400, 413}, resp.status)
				require.Equal(t, "close", resp.headers["connection"])
				rest, _ := io.ReadAll(r)
				require.Empty(t, string(rest), "the HEAD answer had a body")
			})
		}
	}
}

// A response that a drain makes the connection's last says so with "Connection: close"
// (RFC 9112 §9.6), and the connection then closes.
func TestResponseDuringDrainSaysClose(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			got, answer := make(chan struct{}, 1), make(chan struct{})
			up := serveUpstream(t, func(c net.Conn, r *bufio.Reader, head string, body []byte) bool {
				select {
				case got <- struct{}{}:
				default:
				}
				<-answer
				return echo(c, r, head, body)
			})
			g, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			send(t, c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
			<-got
			drained := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				drained <- g.Drain(ctx)
			}()
			// The drain has begun once a new connection gets no answer.
			deadline := time.Now().Add(5 * time.Second)
			for {
				require.True(t, time.Now().Before(deadline), "the drain did not begin")
				probe, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					break
				}
				_ = probe.SetDeadline(time.Now().Add(2 * time.Second))
				_, _ = io.WriteString(probe, "GET /probe HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
				reply, _ := io.ReadAll(probe)
				_ = probe.Close()
				if len(reply) == 0 {
					break
				}
			}
			close(answer)
			r := bufio.NewReader(c)
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "close", resp.headers["connection"])
			rest, err := io.ReadAll(r)
			require.NoError(t, err)
			require.Empty(t, rest)
			require.NoError(t, <-drained)
		})
	}
}

// A response with invalid framing is discarded with its connection and answered 502 (RFC
// 9112 §6.3): differing Content-Length values, Content-Length with Transfer-Encoding, an
// invalid Content-Length. So is one with malformed field lines, which is never forwarded
// as it came: obs-fold (RFC 9112 §5.2 names 502), whitespace before a colon (§5.1), a bare
// CR (§2.2), NUL or another control character in a value (RFC 9110 §5.5), a line without a
// colon.
func TestMalformedUpstreamFramingIs502(t *testing.T) {
	heads := map[string]string{
		"/differ":   "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok",
		"/both":     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"/bad":      "HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok",
		"/fold":     "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 2\r\n\r\nok",
		"/space":    "HTTP/1.1 200 OK\r\nX-A : b\r\nContent-Length: 2\r\n\r\nok",
		"/bare-cr":  "HTTP/1.1 200 OK\r\nX-A: b\rc\r\nContent-Length: 2\r\n\r\nok",
		"/nul":      "HTTP/1.1 200 OK\r\nX-A: b\x00c\r\nContent-Length: 2\r\n\r\nok",
		"/ctl":      "HTTP/1.1 200 OK\r\nX-A: b\x01c\r\nContent-Length: 2\r\n\r\nok",
		"/no-colon": "HTTP/1.1 200 OK\r\nX-A b\r\nContent-Length: 2\r\n\r\nok",
	}
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		path := strings.Fields(head)[1]
		_, _ = io.WriteString(c, heads[path])
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for path := range heads {
				send(t, c, "GET "+path+" HTTP/1.1\r\nHost: gw\r\n\r\n")
				resp := readResponse(t, r, false)
				require.Equal(t, 502, resp.status, path)
				require.Contains(t, string(resp.body), `"code":"upstream_protocol_error"`, path)
			}
		})
	}
}

// A status the request head alone decides is answered at once instead of 100 Continue (RFC
// 9110 §10.1.1): a Content-Length over the body limit gets 413 before any body is sent.
func TestOversizedExpectContinueGets413Not100(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "max_body_bytes = 1024")
			c := dial(t, addr)
			send(t, c, "POST /v1/x HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 4096\r\n\r\n")
			resp := readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 413, resp.status)
			require.Equal(t, "close", resp.headers["connection"])
		})
	}
}

// A request of a later HTTP/1 minor version (HTTP/1.2, HTTP/1.9) is processed as HTTP/1.1,
// the highest minor version the gateway implements (RFC 9110 §2.5, RFC 9112 §2.3): chunked
// framing is taken, the connection persists, a body of unknown length reaches the client
// chunked, the upstream gets an HTTP/1.1 request and the client an HTTP/1.1 response. Another
// major version (HTTP/2.0 in an HTTP/1 request line) is still refused with 505.
func TestLaterHTTP1MinorVersionIsServedAsHTTP11(t *testing.T) {
	lines := make(chan string, 16)
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, body []byte) bool {
		line, _, _ := strings.Cut(head, "\r\n")
		lines <- line
		if strings.Contains(line, "/until-close") {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close")
			return false
		}
		return echo(c, nil, head, body)
	})
	upstreamLine := func(t *testing.T) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(5 * time.Second):
			require.FailNow(t, "the upstream got no request within 5s")
			return ""
		}
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			send(t, c, "POST /a HTTP/1.2\r\nHost: gw\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status, "%s", resp.body)
			require.Equal(t, "HTTP/1.1", resp.proto)
			require.Equal(t, "hi", string(resp.body))
			require.Empty(t, resp.headers["connection"], "persistent, as for HTTP/1.1")
			require.Equal(t, "POST /a HTTP/1.1", upstreamLine(t))

			send(t, c, "GET /until-close HTTP/1.9\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status, "%s", resp.body)
			require.Equal(t, "HTTP/1.1", resp.proto)
			require.True(t, resp.chunked, "a body of unknown length goes chunked, as to an HTTP/1.1 client")
			require.Equal(t, "until close", string(resp.body))
			require.Equal(t, "GET /until-close HTTP/1.1", upstreamLine(t))

			send(t, c, "GET /b HTTP/1.2\r\nHost: gw\r\nConnection: close\r\n\r\n")
			resp = readResponse(t, r, false)
			require.Equal(t, 200, resp.status, "%s", resp.body)
			require.Equal(t, "close", resp.headers["connection"])
			require.Equal(t, "GET /b HTTP/1.1", upstreamLine(t))

			c = dial(t, addr)
			send(t, c, "GET /a HTTP/2.0\r\nHost: gw\r\n\r\n")
			resp = readResponse(t, bufio.NewReader(c), false)
			require.Equal(t, 505, resp.status, "%s", resp.body)
		})
	}
}

// A chunk extension may follow whitespace after the chunk size (BWS, RFC 9112 §7.1.1), which
// a recipient parses and removes (RFC 9110 §5.6.3); the extension is ignored (RFC 9112
// §7.1.1) and the body reaches the upstream whole, on every engine, whether the whitespace
// and the ';' come in one read or in two.
func TestChunkExtensionAfterWhitespaceIsIgnored(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for _, writes := range [][]string{
				{"4 ;a=b\r\n{\"a\"\r\n6\t;x\r\n:\"bcd\"\r\n1 \t ; y = \"z\" ; w\r\n}\r\n0 ;end\r\n\r\n"},
				{"4 ", ";a\r\n{\"a\"\r\n6\t", "\t;b\r\n:\"bcd\"\r\n1 ", "\r\n}\r\n0\r\n\r\n"},
			} {
				send(t, c, "POST /v1/x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n")
				for _, w := range writes {
					send(t, c, w)
				}
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status, "%q: %s", writes, resp.body)
				require.Equal(t, `{"a":"bcd"}`, string(resp.body), "%q", writes)
			}
		})
	}
}
