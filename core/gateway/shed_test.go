package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// shedCount reads sluice_connections_shed_total of entrypoint "web" for reason in this
// process's metrics (gateway tests run one at a time, so a difference is this test's).
func shedCount(t *testing.T, reason string) float64 {
	t.Helper()
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	series := `sluice_connections_shed_total{entrypoint="web",reason="` + reason + `"} `
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// waitShed waits until the shed count for reason reaches want.
func waitShed(t *testing.T, reason string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for shedCount(t, reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_connections_shed_total{reason=%q} is %v, want %v", reason, shedCount(t, reason), want)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not an assertion
	}
	require.Equal(t, want, shedCount(t, reason), "counted once")
}

// A connection over max_connections is closed at once without an answer on every engine,
// counted as max_connections and logged as the other sheds are; the connection within the
// limit is served.
func TestConnectionOverMaxConnectionsIsShed(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			addr, logs := startGatewayLogged(t, engine, up.addr(), "max_connections = 1")
			before := shedCount(t, "max_connections")
			first := dial(t, addr)
			send(t, first, "GET /a HTTP/1.1\r\nHost: gw\r\n\r\n")
			r := bufio.NewReader(first)
			require.Equal(t, 200, readResponse(t, r, false).status, "the first connection holds the one place")
			second := dial(t, addr)
			_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
			// Its request may be written before the close arrives or fail after it.
			_, _ = io.WriteString(second, "GET /b HTTP/1.1\r\nHost: gw\r\n\r\n")
			got, err := io.ReadAll(second)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection over the limit was not closed")
			}
			require.Empty(t, got, "no answer on a connection over the limit")
			waitShed(t, "max_connections", before+1)
			requireShedLine(t, logs, 1, "reason=max_connections client_addr="+second.LocalAddr().String()+
				` error="the entrypoint holds max_connections connections" max_connections=1 suppressed_since_last=0`)
			send(t, first, "GET /c HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status, "the connection within the limit goes on")
		})
	}
}

// A request head that does not complete within read_header_timeout gets 408 with a JSON error
// on every engine, and the connection counts as shed for header_timeout.
func TestSlowHeadGets408AndIsCountedAsShed(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), `read_header_timeout = "300ms"`)
			before := shedCount(t, "header_timeout")
			for i, partial := range []string{
				"GET / HTTP/1.1\r\nHost: gw\r\nX-Slow: ",
				"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
			} {
				c := dial(t, addr)
				send(t, c, partial)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp := readResponse(t, bufio.NewReader(c), false)
				require.Equal(t, 408, resp.status, partial)
				require.Equal(t, "application/json", resp.headers["content-type"])
				require.Contains(t, string(resp.body), `"code":"request_timeout"`)
				require.Contains(t, string(resp.body), `"message":"`+[]string{"request head", "request body"}[i]+` not complete within read_header_timeout"`, "every engine says what stalled")
				require.Equal(t, "close", strings.ToLower(resp.headers["connection"]), "the connection ends after a 408")
				waitEOF(t, c, 5*time.Second)
				waitShed(t, "header_timeout", before+float64(i+1))
			}
		})
	}
}

// stalledHeads are the ways a request head (or the body behind it) can stop arriving; each
// must get 408 after read_header_timeout, whose message names the part that stalled ("head"
// or "body"). keepAlive: a complete request is answered on the connection first. A connection
// that sends nothing at all is among them: the first request's head is due read_header_timeout
// after the connection opened.
var stalledHeads = []struct {
	name      string
	keepAlive bool
	partial   string
}{
	{"nothing at all", false, ""},
	{"blank lines", false, "\r\n\r\n"},
	{"one blank line", false, "\r\n"},
	{"half a blank line", false, "\r"},
	{"blank lines then part of a request line", false, "\r\n\r\nGET / HT"},
	{"blank lines then part of the fields", false, "\r\nGET / HTTP/1.1\r\nHost: gw\r\n"},
	{"inside the request line", false, "GET /slow HTTP/1"},
	{"at the end of the request line", false, "GET /slow HTTP/1.1\r\n"},
	{"inside a field line", false, "GET / HTTP/1.1\r\nHost: gw\r\nX-Slow: "},
	{"inside the body", false, "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\nab"},
	{"inside a chunked body", false, "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"},
	{"blank lines after a request", true, "\r\n\r\n"},
	{"inside the next request line", true, "GET /slow HTTP/1"},
	{"blank lines after a request, then a field", true, "\r\nGET / HTTP/1.1\r\nHost: gw\r\n"},
}

// Every way a request head can stall gets the same answer on every engine: 408 with a JSON
// error after read_header_timeout, counted as shed for header_timeout. That includes a
// connection that sends no byte (which would otherwise hold its place until idle_timeout), a
// head of nothing but the empty lines a client may send before a request line (RFC 9112
// §2.2), which a server could mistake for a client that left, and a stall on a keep-alive
// connection after an answered request.
func TestStalledHeadGets408OnEveryEngine(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), `read_header_timeout = "300ms"`)
			requireStalledHeads408(t, func() net.Conn { return dial(t, addr) })
		})
	}
}

// Between two requests on a keep-alive connection idle_timeout governs, not
// read_header_timeout: the clock of a later request's head starts at its first byte, so a
// connection idle for longer than read_header_timeout carries its next request. A connection
// that opens once the first one is idle and sends nothing marks the time: its 408 comes
// read_header_timeout after it opened, when the idle one has waited longer than that.
func TestIdleKeepAliveOutlastsReadHeaderTimeout(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "read_header_timeout = \"300ms\"\nidle_timeout = \"30s\"")
			requireIdleKeepAliveServed(t, func() net.Conn { return dial(t, addr) })
		})
	}
}

// The same over TLS.
func TestIdleKeepAliveOutlastsReadHeaderTimeoutOverTLS(t *testing.T) {
	up := serveUpstream(t, echo)
	cert, key, roots := selfSigned(t, t.TempDir())
	_, addr := startGateway(t, "fasthttp", up.addr(),
		fmt.Sprintf("read_header_timeout = \"300ms\"\nidle_timeout = \"30s\"\ntls = { cert_file = %q, key_file = %q }", cert, key))
	requireIdleKeepAliveServed(t, func() net.Conn { return dialTLS(t, addr, roots) })
}

// requireIdleKeepAliveServed answers a request on one connection from dial, waits for the 408
// of a second one that opens after it and sends nothing, and requires the first connection,
// idle all that time, to carry its next request.
func requireIdleKeepAliveServed(t *testing.T, dial func() net.Conn) {
	t.Helper()
	before := shedCount(t, "header_timeout")
	idle := dial()
	r := bufio.NewReader(idle)
	send(t, idle, "GET /first HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.Equal(t, 200, readResponse(t, r, false).status)

	silent := dial()
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp := readResponse(t, bufio.NewReader(silent), false)
	require.Equal(t, 408, resp.status, "a connection that sends nothing")
	require.Contains(t, string(resp.body), `"message":"request head not complete within read_header_timeout"`)
	waitEOF(t, silent, 5*time.Second)

	send(t, idle, "GET /second HTTP/1.1\r\nHost: gw\r\n\r\n")
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	require.Equal(t, 200, readResponse(t, r, false).status, "the keep-alive connection, idle past read_header_timeout")
	require.Equal(t, before+1, shedCount(t, "header_timeout"), "only the silent connection is shed")
}

// dialTLS opens a TLS client connection to addr trusting roots.
func dialTLS(t *testing.T, addr string, roots *x509.CertPool) net.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// The same over TLS, where the fasthttp engine is the only engine.
func TestStalledHeadGets408OverTLS(t *testing.T) {
	up := serveUpstream(t, echo)
	cert, key, roots := selfSigned(t, t.TempDir())
	_, addr := startGateway(t, "fasthttp", up.addr(),
		fmt.Sprintf("read_header_timeout = \"300ms\"\ntls = { cert_file = %q, key_file = %q }", cert, key))
	requireStalledHeads408(t, func() net.Conn { return dialTLS(t, addr, roots) })
}

// requireStalledHeads408 sends each of stalledHeads on its own connection from dial, all at
// once so that they share one read_header_timeout, and requires each answer to be a 408 JSON
// error followed by the close, and each connection to be counted as shed for header_timeout.
func requireStalledHeads408(t *testing.T, dial func() net.Conn) {
	t.Helper()
	before := shedCount(t, "header_timeout")
	conns := make([]net.Conn, len(stalledHeads))
	readers := make([]*bufio.Reader, len(stalledHeads))
	for i, tc := range stalledHeads {
		c := dial()
		r := bufio.NewReader(c)
		if tc.keepAlive {
			send(t, c, "GET /first HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 200, readResponse(t, r, false).status, tc.name)
		}
		if tc.partial != "" {
			send(t, c, tc.partial)
		}
		conns[i], readers[i] = c, r
	}
	for i, tc := range stalledHeads {
		_ = conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := readers[i].Peek(1); err != nil {
			t.Errorf("%s (%q): no answer, the connection ended with %v", tc.name, tc.partial, err)
			continue
		}
		resp := readResponse(t, readers[i], false)
		require.Equal(t, 408, resp.status, tc.name)
		require.Equal(t, "application/json", resp.headers["content-type"], tc.name)
		require.Contains(t, string(resp.body), `"code":"request_timeout"`, tc.name)
		part := "head"
		if strings.Contains(tc.name, "body") {
			part = "body"
		}
		require.Contains(t, string(resp.body), `"message":"request `+part+` not complete within read_header_timeout"`, tc.name)
		require.Equal(t, "close", strings.ToLower(resp.headers["connection"]), tc.name)
		waitEOF(t, conns[i], 5*time.Second)
	}
	if !t.Failed() {
		waitShed(t, "header_timeout", before+float64(len(stalledHeads)))
	}
}

// A request body that keeps arriving is not cut by read_header_timeout, however long the
// upload takes: the timeout bounds a pause in the body (as nginx's client_body_timeout), not
// the whole of it. The client here sends a body, Content-Length or chunked, in pieces a
// quarter of the timeout apart for twice the timeout; the echo upstream returns it whole.
func TestSlowSteadyBodyIsNotCut(t *testing.T) {
	const timeout = time.Second
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/chunked=%v", engine, chunked), func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), fmt.Sprintf("read_header_timeout = %q", timeout))
				c := dial(t, addr)
				r := bufio.NewReader(c)
				const pieces = 8
				piece := strings.Repeat("b", 10)
				if chunked {
					send(t, c, "POST /upload HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n")
				} else {
					send(t, c, fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", pieces*len(piece)))
				}
				for range pieces {
					time.Sleep(timeout / 4) // the upload's pace: the behaviour under test
					if chunked {
						send(t, c, fmt.Sprintf("%x\r\n%s\r\n", len(piece), piece))
					} else {
						send(t, c, piece)
					}
				}
				if chunked {
					send(t, c, "0\r\n\r\n")
				}
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp := readResponse(t, r, false)
				require.Equal(t, 200, resp.status, "%s", resp.body)
				require.Contains(t, string(resp.body), strings.Repeat(piece, pieces))
			})
		}
	}
}
