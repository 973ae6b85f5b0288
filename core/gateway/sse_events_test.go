package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// readChunks reads a chunked response's head and returns the payload of each chunk.
func readChunks(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "HTTP/1.1 200 "), line)
	chunked := false
	for {
		l, err := r.ReadString('\n')
		require.NoError(t, err)
		if l == "\r\n" {
			break
		}
		chunked = chunked || strings.EqualFold(strings.TrimSpace(l), "Transfer-Encoding: chunked")
	}
	require.True(t, chunked, "an SSE stream to an HTTP/1.1 client is chunked")
	var chunks []string
	for {
		sz, err := r.ReadString('\n')
		require.NoError(t, err)
		n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		require.NoError(t, err, "chunk size %q", sz)
		b := make([]byte, n+2)
		_, err = io.ReadFull(r, b)
		require.NoError(t, err)
		if n == 0 {
			return chunks
		}
		chunks = append(chunks, string(b[:n]))
	}
}

// readCutChunks reads a chunked response that may be cut: the payload of the chunks that came
// whole, and whether the last chunk came (with the end of its trailer section, so that r is
// left at the next response).
func readCutChunks(t *testing.T, r *bufio.Reader) (payload string, ended bool) {
	t.Helper()
	resp := readResponse(t, r, true)
	require.Equal(t, "chunked", resp.headers["transfer-encoding"])
	var b strings.Builder
	for {
		sz, err := r.ReadString('\n')
		if err != nil {
			return b.String(), false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		require.NoError(t, err, "chunk size %q", sz)
		if n == 0 {
			for {
				l, err := r.ReadString('\n')
				if err != nil || l == "\r\n" {
					return b.String(), err == nil
				}
			}
		}
		p := make([]byte, n+2)
		if _, err := io.ReadFull(r, p); err != nil {
			return b.String(), false
		}
		b.Write(p[:n])
	}
}

// An upstream that writes its events a byte at a time: the client gets each event in one
// piece (a chunk holds whole events), as from an upstream that writes events whole, and every
// byte of them.
func TestTrickledEventsReachTheClientWhole(t *testing.T) {
	sim := startStreamingSim(t, 6)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayServers(t, engine, fmt.Sprintf("servers = [{ url = %q }]", "http://"+sim))
			c := dial(t, addr)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			send(t, c, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s: trickle=50us\r\nContent-Length: %d\r\n\r\n%s",
				llmsim.FaultHeader, len(body), body))
			chunks := readChunks(t, bufio.NewReader(c))
			payload := strings.Join(chunks, "")
			require.True(t, strings.HasSuffix(payload, "data: [DONE]\n\n"), "the whole stream: %q", payload)
			require.GreaterOrEqual(t, strings.Count(payload, `"chat.completion.chunk"`), 6)
			for _, ch := range chunks {
				require.True(t, strings.HasSuffix(ch, "\n\n"), "each chunk is whole events: %q", ch)
			}
		})
	}
}

// An upstream that fails inside an event: the client gets the events that ended, then the
// gateway's error event in good framing, never the start of the cut event (which an SSE client
// would discard unread, and which would swallow the error event into it). Every engine keeps
// an event's start back up to the same bound (8 KiB), so a start larger than a 4 KiB read is
// still dropped for the error event; one over the bound went out in part, and its stream is
// cut like any other body.
func TestUpstreamCutInsideAnEventEndsWithErrorEvent(t *testing.T) {
	first := "data: {\"i\":0}\n\n"
	for _, tc := range []struct {
		name string
		cut  string // the start of the event the upstream cuts
		ends bool   // the client's response ends with the error event
	}{
		{"short", "data: {\"i\"", true},
		{"5KiB", "data: " + strings.Repeat("x", 5<<10), true},
		{"over the bound", "data: " + strings.Repeat("x", 12<<10), false},
	} {
		up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(first), first)
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(tc.cut), tc.cut)
			if tcp, ok := c.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0) // RST, not FIN
			}
			return false
		})
		for _, engine := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "")
				c := dial(t, addr)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
				if tc.ends {
					resp := readResponse(t, bufio.NewReader(c), false)
					require.Equal(t, 200, resp.status)
					s := string(resp.body)
					require.True(t, strings.HasPrefix(s, first+"event: error\n"), "the event that ended, then the error event: %q", s)
					require.Contains(t, s, `"code":"upstream_stream_error"`)
					rest := s[len(first):]
					require.True(t, strings.Count(rest, "\n\n") == 1 && strings.HasSuffix(rest, "\n\n"),
						"after the event that ended, the error event alone, nothing of the cut event: %q", rest)
					return
				}
				payload, ended := readCutChunks(t, bufio.NewReader(c))
				require.False(t, ended, "the transfer is cut, not ended")
				require.True(t, strings.HasPrefix(payload, first+tc.cut[:8<<10]), "the event's start went out as it came: %d bytes", len(payload))
				require.NotContains(t, payload, "event: error", "no error event inside an event sent in part")
			})
		}
	}
}

// An upstream whose events end in CRLF, cut between the CR and the LF of an event's blank
// line: a client that splits events on "\r\n\r\n" (or on "\n\n" after turning CRLF into LF)
// would read the error event as the end of that event if it followed the lone CR. The client
// gets the missing LF (CRLF is one line ending, so no blank line is added), then the error
// event on its own, in the stream's CRLF line endings, then the end of the body. The same
// bytes come when the LF did arrive, with the start of the next event, before the cut; and
// whether the upstream body is chunked or delimited by its close.
func TestStreamCutBetweenCRAndLFEndsWithWholeErrorEvent(t *testing.T) {
	const first = "data: {\"i\":0}\r\n\r\n"
	const errorEvent = "event: error\r\n" +
		`data: {"error":{"message":"the upstream failed during the stream","type":"upstream_error","param":null,"code":"upstream_stream_error"}}` +
		"\r\n\r\n"
	for _, tc := range []struct {
		name    string
		sent    string // what the upstream sends of its body before it resets
		chunked bool
	}{
		{"after CR/chunked", first[:len(first)-1], true},
		{"after CR/until close", first[:len(first)-1], false},
		{"LF and a cut event/chunked", first + "data: {\"i\"", true},
		{"LF and a cut event/until close", first + "data: {\"i\"", false},
	} {
		up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			if tc.chunked {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(tc.sent), tc.sent)
			} else {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+tc.sent)
			}
			if tcp, ok := c.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0) // RST, not FIN: a cut, not the end of an until-close body
			}
			return false
		})
		for _, engine := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "")
				c := dial(t, addr)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
				payload, ended := readCutChunks(t, bufio.NewReader(c))
				require.True(t, ended, "the body ends with its last chunk: %q", payload)
				require.Equal(t, first+errorEvent, payload)
			})
		}
	}
}

// An event stream delimited by its upstream's close (no Content-Length, not chunked: RFC 9112
// §6.3 rule 8) whose upstream closes cleanly (FIN) inside an event was cut, not ended: an SSE
// client drops the event still open at the end of the stream, so the close passed on as the
// end would leave it a stream that stops with neither its end nor an error. It ends as one
// that the upstream resets there: the events that ended, then the error event in the stream's
// line endings and the end of the body, the client's connection carrying its next request,
// counted as a failed stream (sluice_upstream_errors_total reason "stream", the access log's
// upstream_error); an HTTP/1.0 client gets the same bytes and the close; an event that went
// out in part (over the 8 KiB bound) leaves the transfer cut. Closed at an event boundary, or
// after whole comment lines (a keep-alive comment, which no SSE client dispatches), the stream
// ended: the client gets every byte and the end of the body, and no failure counts.
func TestStreamClosedInsideAnEventEndsWithErrorEvent(t *testing.T) {
	const first = "data: {\"i\":0}\n\n"
	const firstCRLF = "data: {\"i\":0}\r\n\r\n"
	const errorEvent = "event: error\n" +
		`data: {"error":{"message":"the upstream failed during the stream","type":"upstream_error","param":null,"code":"upstream_stream_error"}}` +
		"\n\n"
	errorEventCRLF := strings.ReplaceAll(errorEvent, "\n", "\r\n")
	big := "data: " + strings.Repeat("x", 12<<10)
	for i, tc := range []struct {
		name   string
		sent   string // the upstream's body, then its FIN
		http10 bool
		want   string // the client's payload
		ended  bool   // the client's body ends in good framing (else: the transfer is cut)
		failed bool   // counted as a failed stream
	}{
		{"inside a line", first + "data: {\"i\"", false, first + errorEvent, true, true},
		{"after a line, its blank line to come", first + "data: {\"i\":1}\n", false, first + errorEvent, true, true},
		{"CRLF: between a line's CR and LF", firstCRLF + "data: {\"i\":1}\r", false, firstCRLF + errorEventCRLF, true, true},
		{"inside the first event", "da", false, errorEvent, true, true},
		{"HTTP/1.0 client, inside a line", first + "data: {\"i\"", true, first + errorEvent, false, true},
		{"an event over the bound, sent in part", first + big, false, first + big, false, true},
		{"at a boundary", first + "data: {\"i\":1}\n\n", false, first + "data: {\"i\":1}\n\n", true, false},
		{"CRLF: between the blank line's CR and LF", firstCRLF[:len(firstCRLF)-1], false, firstCRLF[:len(firstCRLF)-1], true, false},
		{"no event at all", "", false, "", true, false},
		{"after a whole comment line", first + ": keep-alive\n", false, first + ": keep-alive\n", true, false},
		{"CRLF: after whole comment lines", firstCRLF + ": a\r\n:\r\n", false, firstCRLF + ": a\r\n:\r\n", true, false},
	} {
		up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
			if strings.HasPrefix(head, "GET /v1/ok ") {
				_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return err == nil
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+tc.sent)
			return false // the close (FIN) ends the body
		})
		for _, engine := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				router := fmt.Sprintf("fin_%d_%s", i, engine)
				logPath := filepath.Join(t.TempDir(), "access.log")
				m := startMetricsGateway(t, engine, router, router, up.addr(), fmt.Sprintf("[log]\naccess_log = %q", logPath))
				streamErrs := fmt.Sprintf(`sluice_upstream_errors_total{router=%q,service="up",reason="stream"}`, router)
				errs0 := m.value(t, streamErrs)

				c := dial(t, m.addr)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				r := bufio.NewReader(c)
				if tc.http10 {
					send(t, c, "POST /v1/chat/completions HTTP/1.0\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
					resp := readResponse(t, r, false) // delimited by the close
					require.Equal(t, 200, resp.status)
					require.Equal(t, tc.want, string(resp.body))
				} else {
					send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
					payload, ended := readCutChunks(t, r)
					require.Equal(t, tc.ended, ended, "the body ends with its last chunk: %q", payload)
					require.Equal(t, tc.want, payload)
				}
				if tc.ended {
					send(t, c, "GET /v1/ok HTTP/1.1\r\nHost: gw\r\n\r\n")
					next := readResponse(t, r, false)
					require.Equal(t, 200, next.status, "the next request on the same connection")
					require.Equal(t, "ok", string(next.body))
				}

				lines := 1
				if tc.ended {
					lines = 2
				}
				var line map[string]any
				for _, l := range accessLines(t, logPath, lines) {
					if l["path"] == "/v1/chat/completions" {
						line = l
					}
				}
				require.NotNil(t, line, "the stream's access log line")
				require.EqualValues(t, 200, line["status"])
				if tc.failed {
					require.Equal(t, "stream", line["upstream_error"])
					m.waitValue(t, streamErrs, errs0+1)
				} else {
					require.Empty(t, line["upstream_error"])
					require.Equal(t, errs0, m.value(t, streamErrs), "a stream that ended is no failure")
				}
			})
		}
	}
}
