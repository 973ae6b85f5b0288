package gateway_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wireStep is one write of a scripted upstream and the body bytes the client must get from it
// (decoded from the client's framing) before the upstream writes the next one.
type wireStep struct{ wire, want string }

// wireCase is an inference server's native answer, written step by step.
type wireCase struct {
	name, req string
	head      string                       // the upstream's response head, written before any step
	steps     []wireStep                   // each written only once the client got the one before
	end       string                       // written after the last step (the last chunk, say)
	close     bool                         // the upstream closes the connection after end
	burst     bool                         // head and end in one write, at once (no steps)
	interim   string                       // 1xx heads, each written apart, before head
	reset     bool                         // the upstream resets the connection after end: the client's transfer is cut
	tail      string                       // what the client gets after the last step, to the body's end
	trailer   func(engine string) []string // the trailer section's lines the client gets (nil: none)
	check     func(t *testing.T, resp *response)

	next chan struct{}  // releases the next write (withChannels)
	sent chan time.Time // the time of each step's write
}

// withChannels copies cases with channels of their own, so that a case that fails leaves no
// write waiting that another case would release.
func withChannels(cases []wireCase) []wireCase {
	out := append([]wireCase(nil), cases...)
	for i := range out {
		out[i].next, out[i].sent = make(chan struct{}), make(chan time.Time, 1)
	}
	return out
}

// lockstepUpstream serves each case's answer (by the request line's target): the head at once,
// then each step after a value on next, then end after one more. It sends the time of each
// step's write on sent.
func lockstepUpstream(t *testing.T, cases []wireCase) *upstream {
	return serveUpstreamU(t, func(u *upstream, c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		var wc *wireCase
		for i := range cases {
			line := strings.SplitN(cases[i].req, "\r\n", 2)[0]
			if strings.HasPrefix(head, line[:strings.LastIndexByte(line, ' ')+1]) { // method and target
				wc = &cases[i]
			}
		}
		if wc == nil {
			_, err := io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
			return err == nil
		}
		for _, h := range strings.SplitAfter(wc.interim, "\r\n\r\n") {
			if h == "" {
				continue
			}
			if _, err := io.WriteString(c, h); err != nil {
				return false
			}
			time.Sleep(20 * time.Millisecond) // the upstream's pace: each head arrives in a read of its own, the behaviour under test
		}
		if wc.burst {
			_, err := io.WriteString(c, wc.head+wc.end)
			return err == nil && !wc.close
		}
		if _, err := io.WriteString(c, wc.head); err != nil {
			return false
		}
		for _, s := range wc.steps {
			select {
			case <-wc.next:
			case <-u.stop:
				return false
			}
			wc.sent <- time.Now()
			if _, err := io.WriteString(c, s.wire); err != nil {
				return false
			}
		}
		select {
		case <-wc.next:
		case <-u.stop:
			return false
		}
		if _, err := io.WriteString(c, wc.end); err != nil {
			return false
		}
		if wc.reset {
			if tcp, ok := c.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
			return false
		}
		return !wc.close
	})
}

// stepBound is how long after the upstream's write a step's bytes may reach the client: far
// more than a relay takes on a loaded machine, far less than any wait for a later write.
const stepBound = 2 * time.Second

// runWireCases sends each case's request on its own connection and checks that every step
// reaches the client, whole and byte for byte, within stepBound of the upstream's write and
// before the upstream writes anything more, then the tail to the end of the body.
func runWireCases(t *testing.T, engine, addrFor string, cases []wireCase) {
	for _, wc := range cases {
		t.Run(wc.name, func(t *testing.T) {
			c := dial(t, addrFor)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			send(t, c, wc.req)
			r := bufio.NewReader(c)
			resp := readResponse(t, r, true)
			if wc.check != nil {
				wc.check(t, resp)
			}
			var body io.Reader
			switch {
			case strings.EqualFold(resp.headers["transfer-encoding"], "chunked"):
				body = httputil.NewChunkedReader(r)
			case resp.headers["content-length"] != "":
				t.Fatalf("%s: a stream reached the client with Content-Length %s", engine, resp.headers["content-length"])
			default:
				body = r
			}
			var slowest time.Duration
			for i, s := range wc.steps {
				wc.next <- struct{}{}
				at := <-wc.sent
				_ = c.SetReadDeadline(at.Add(stepBound))
				got := make([]byte, len(s.want))
				n, err := io.ReadFull(body, got)
				require.NoError(t, err, "step %d: got %q of %q within %v of the upstream's write", i, got[:n], s.want, stepBound)
				require.Equal(t, s.want, string(got), "step %d", i)
				slowest = max(slowest, time.Since(at))
			}
			if len(wc.steps) > 0 {
				t.Logf("%d writes, the slowest at the client %v after the upstream's", len(wc.steps), slowest)
			}
			if !wc.burst {
				wc.next <- struct{}{}
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			rest, err := io.ReadAll(body)
			if wc.reset {
				require.Error(t, err, "the transfer is cut, not ended in good framing")
				require.Equal(t, wc.tail, string(rest), "after the last step")
				return
			}
			require.NoError(t, err, "the body ends in good framing")
			require.Equal(t, wc.tail, string(rest), "after the last step")
			if _, ok := body.(*bufio.Reader); ok {
				return // delimited by the close
			}
			var trailer []string
			for {
				l, err := r.ReadString('\n')
				require.NoError(t, err, "the trailer section")
				if l == "\r\n" {
					break
				}
				trailer = append(trailer, l)
			}
			var want []string
			if wc.trailer != nil {
				want = wc.trailer(engine)
			}
			require.Equal(t, want, trailer, "trailer section")
			if resp.headers["connection"] == "close" {
				return
			}
			send(t, c, "GET /next HTTP/1.1\r\nHost: gw\r\n\r\n")
			require.Equal(t, 404, readResponse(t, r, false).status, "the connection carries the next request")
		})
	}
}

// largeLine is an NDJSON line of many relay buffers (Ollama's final /api/generate line holds
// the whole context).
var largeLine = `{"model":"llama3.2","response":"","done":true,"context":[` + strings.Repeat("12345,", 40000) + `1]}` + "\n"

// cutChunks writes the lines as one chunk each, every write cut inside a chunk: a chunk's size
// line with part of its data, the rest of its data, its CRLF with the next size line.
func cutChunks(lines ...string) []wireStep {
	var out []wireStep
	for i, l := range lines {
		pre := ""
		if i > 0 {
			pre = "\r\n"
		}
		out = append(out, wireStep{pre + fmt.Sprintf("%x\r\n", len(l)) + l[:7], l[:7]}, wireStep{l[7:], l[7:]})
	}
	return out // the last chunk's CRLF comes with the end
}

// trickle writes one line as one chunk, a byte at a time; the framing goes with the data
// bytes around it.
func trickle(l string) []wireStep {
	out := []wireStep{{fmt.Sprintf("%x\r\n", len(l)) + l[:1], l[:1]}}
	for i := 1; i < len(l); i++ {
		out = append(out, wireStep{l[i : i+1], l[i : i+1]})
	}
	return out
}

func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// steps makes one step per payload, each written as a chunk of its own, or raw when raw.
func steps(raw bool, payloads ...string) []wireStep {
	out := make([]wireStep, len(payloads))
	for i, p := range payloads {
		w := p
		if !raw {
			w = chunk(p)
		}
		out[i] = wireStep{w, p}
	}
	return out
}

var (
	ollamaChat = []string{
		`{"model":"llama3.2","created_at":"2024-07-22T20:33:28.123648Z","message":{"role":"assistant","content":"The"},"done":false}` + "\n",
		`{"model":"llama3.2","created_at":"2024-07-22T20:33:28.150Z","message":{"role":"assistant","content":" sky"},"done":false}` + "\n",
		`{"model":"llama3.2","created_at":"2024-07-22T20:33:28.170Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,"prompt_eval_duration":342546000,"eval_count":2,"eval_duration":4535599000}` + "\n",
	}
	ollamaGenerate = []string{
		`{"model":"llama3.2","created_at":"2023-08-04T08:52:19.385406455-07:00","response":"The","done":false}` + "\n",
		`{"model":"llama3.2","created_at":"2023-08-04T08:52:19.4Z","response":" sky","done":false}` + "\n",
		`{"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z","response":"","done":true,"context":[1,2,3],"total_duration":10706818083,"eval_count":2}` + "\n",
	}
	llamaCompletion = []string{
		"data: {\"content\":\"The\",\"stop\":false,\"id_slot\":0,\"multimodal\":false,\"index\":0}\n\n",
		"data: {\"content\":\" sky\",\"stop\":false,\"id_slot\":0,\"multimodal\":false,\"index\":0}\n\n",
		"data: {\"content\":\"\",\"id_slot\":0,\"stop\":true,\"model\":\"gpt-3.5-turbo\",\"tokens_predicted\":2,\"tokens_evaluated\":5,\"stop_type\":\"limit\",\"timings\":{\"predicted_n\":2}}\n\n",
	}
	vllmChunks = []string{
		"data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"The\",\"logprobs\":null,\"finish_reason\":null}]}\n\n",
		"data: {\"error\": {\"object\": \"error\", \"message\": \"The decoder prompt is longer than the maximum model length\", \"type\": \"BadRequestError\", \"param\": null, \"code\": 400}}\n\n",
	}
)

const (
	ndjsonHead = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nDate: Mon, 22 Jul 2024 20:33:28 GMT\r\nTransfer-Encoding: chunked\r\n\r\n"
	// llama.cpp's server (cpp-httplib) streams with these fields.
	llamaSSEHead = "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nContent-Type: text/event-stream\r\nServer: llama.cpp\r\nTransfer-Encoding: chunked\r\n\r\n"
	vllmSSEHead  = "HTTP/1.1 200 OK\r\ndate: Mon, 22 Jul 2024 20:33:28 GMT\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
)

func post(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// gzipPieces codes the payloads as one gzip stream, a sync flush after each, as a server
// that gzips its event stream flushes each event: each piece is what a client can inflate
// once it has it.
func gzipPieces(t *testing.T, payloads ...string) []string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	var out []string
	for _, p := range payloads {
		_, err := io.WriteString(zw, p)
		require.NoError(t, err)
		require.NoError(t, zw.Flush())
		out = append(out, b.String())
		b.Reset()
	}
	require.NoError(t, zw.Close())
	out = append(out, b.String())
	return out
}

func header(name, want string) func(t *testing.T, resp *response) {
	return func(t *testing.T, resp *response) {
		t.Helper()
		require.Equal(t, 200, resp.status)
		require.Equal(t, want, resp.headers[strings.ToLower(name)], name)
	}
}

// The inference servers' native streaming answers, as a plain route relays them: each write
// of the upstream reaches the client byte for byte before the upstream writes the next, and
// the stream ends as the upstream ended it, with nothing of the gateway's added, on every
// engine.
func TestNativeStreamsAreRelayedAsWritten(t *testing.T) {
	gz := gzipPieces(t, llamaCompletion...)
	cases := []wireCase{
		{name: "ollama chat", req: post("/api/chat", `{"model":"llama3.2","messages":[{"role":"user","content":"why"}]}`),
			head: ndjsonHead, steps: steps(false, ollamaChat...), end: "0\r\n\r\n", check: header("Content-Type", "application/x-ndjson")},
		{name: "ollama generate", req: post("/api/generate", `{"model":"llama3.2","prompt":"why"}`),
			head: ndjsonHead, steps: steps(false, ollamaGenerate...), end: "0\r\n\r\n", check: header("Content-Type", "application/x-ndjson")},
		{name: "ndjson line split over two chunks", req: post("/api/generate?split", `{}`), head: ndjsonHead,
			steps: []wireStep{{chunk(ollamaGenerate[0][:20]), ollamaGenerate[0][:20]}, {chunk(ollamaGenerate[0][20:]), ollamaGenerate[0][20:]}, {chunk(ollamaGenerate[2]), ollamaGenerate[2]}},
			end:   "0\r\n\r\n"},
		{name: "ndjson chunks cut anywhere", req: post("/api/generate?cut", `{}`), head: ndjsonHead, steps: cutChunks(ollamaGenerate[0], ollamaGenerate[2]), end: "\r\n0\r\n\r\n"},
		{name: "ndjson a byte at a time", req: post("/api/generate?trickle", `{}`), head: ndjsonHead, steps: trickle(ollamaGenerate[0]), end: "\r\n0\r\n\r\n"},
		{name: "ndjson line larger than a relay buffer", req: post("/api/generate?large", `{}`), head: ndjsonHead, steps: steps(false, largeLine), end: "0\r\n\r\n"},
		{name: "ndjson to an HTTP/1.0 client", req: strings.Replace(post("/api/chat?http10client", `{}`), "HTTP/1.1", "HTTP/1.0", 1),
			head: ndjsonHead, steps: steps(false, ollamaChat...), end: "0\r\n\r\n"},
		{name: "ndjson until close", req: post("/api/chat?close", `{}`),
			head: "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n", steps: steps(true, ollamaChat...), close: true},
		{name: "ndjson until close, reset", req: post("/api/chat?reset", `{}`),
			head: "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n", steps: steps(true, ollamaChat[:2]...), end: ollamaChat[2][:9], tail: ollamaChat[2][:9], reset: true},
		{name: "chunked ndjson, reset", req: post("/api/chat?chunkedreset", `{}`),
			head: ndjsonHead, steps: steps(false, ollamaChat[:2]...), end: "1f\r\n" + ollamaChat[2][:9], tail: ollamaChat[2][:9], reset: true},
		{name: "llama.cpp completion", req: post("/completion", `{"prompt":"why","stream":true,"n_predict":2}`),
			head: llamaSSEHead, steps: steps(false, llamaCompletion...), end: "0\r\n\r\n", check: header("Content-Type", "text/event-stream")},
		{name: "llama.cpp error event mid-stream", req: post("/completion?error", `{"stream":true}`), head: llamaSSEHead,
			steps: steps(false, llamaCompletion[0], "error: {\"code\":500,\"message\":\"Input prompt is too big compared to KV size.\",\"type\":\"server_error\"}\n\n"), end: "0\r\n\r\n"},
		{name: "event stream until close to an HTTP/1.0 client", req: strings.Replace(post("/completion?http10both", `{"stream":true}`), "HTTP/1.1", "HTTP/1.0", 1),
			head: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", steps: steps(true, llamaCompletion...), close: true},
		{name: "gzip event stream until close to an HTTP/1.0 client", req: strings.Replace(post("/completion?gzip10", `{"stream":true}`), "HTTP/1.1", "HTTP/1.0", 1),
			head:  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n",
			steps: steps(true, gz...), close: true, check: header("Content-Encoding", "gzip")},
		{name: "burst: ndjson and the close in one go", burst: true, req: post("/api/chat?burst", `{}`),
			head: "HTTP/1.0 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n", end: strings.Join(ollamaChat, ""), close: true, tail: strings.Join(ollamaChat, "")},
		{name: "burst: events and the close in one go", burst: true, req: post("/completion?burst", `{}`),
			head: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", end: strings.Join(llamaCompletion, ""), close: true, tail: strings.Join(llamaCompletion, "")},
		{name: "burst: chunked ndjson in one go", burst: true, req: post("/api/generate?burst", `{}`),
			head: ndjsonHead, end: chunk(ollamaGenerate[0]) + chunk(ollamaGenerate[2]) + "0\r\n\r\n", tail: ollamaGenerate[0] + ollamaGenerate[2]},
		{name: "burst: chunked events in one go", burst: true, req: post("/completion?burstchunked", `{}`),
			head: llamaSSEHead, end: chunk(llamaCompletion[0]) + chunk(llamaCompletion[2]) + "0\r\n\r\n", tail: llamaCompletion[0] + llamaCompletion[2]},
		{name: "burst: events and the close to an HTTP/1.0 client", burst: true, req: strings.Replace(post("/completion?burst10", `{}`), "HTTP/1.1", "HTTP/1.0", 1),
			head: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", end: strings.Join(llamaCompletion, ""), close: true, tail: strings.Join(llamaCompletion, "")},
		{name: "vllm error event then end", req: post("/v1/completions", `{"model":"m","prompt":"x","stream":true}`),
			head: vllmSSEHead, steps: steps(false, vllmChunks...), end: "0\r\n\r\n"},
		{name: "vllm error event then DONE", req: post("/v1/completions?done", `{"model":"m","prompt":"x","stream":true}`),
			head: vllmSSEHead, steps: steps(false, append(vllmChunks[:2:2], "data: [DONE]\n\n")...), end: "0\r\n\r\n"},
		{name: "gzip event stream", req: post("/completion?gzip", `{"stream":true}`),
			head:  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
			steps: steps(false, gz...), end: "0\r\n\r\n", check: header("Content-Encoding", "gzip")},
		{name: "gzip event stream until close", req: post("/completion?gzipclose", `{"stream":true}`),
			head:  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n",
			steps: steps(true, gz...), close: true, check: header("Content-Encoding", "gzip")},
		{name: "event stream until close, HTTP/1.0 upstream", req: post("/completion?http10", `{"stream":true}`),
			head: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", steps: steps(true, llamaCompletion...), close: true},
		{name: "chunked ndjson with trailer", req: post("/api/generate?trailer", `{}`),
			head:  "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n",
			steps: steps(false, ollamaGenerate...), end: "0\r\nX-Checksum: abc\r\n\r\n",
			// Passed on with the chunked framing on gnet; fasthttp frames the body itself.
			trailer: func(engine string) []string {
				if engine == "fasthttp" {
					return nil
				}
				return []string{"X-Checksum: abc\r\n"}
			}},
		{name: "event stream with trailer", req: post("/completion?trailer", `{}`),
			head:  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n",
			steps: steps(false, llamaCompletion...), end: "0\r\nX-Checksum: abc\r\n\r\n"},
		{name: "interim heads apart, then stream", req: post("/completion?103apart", `{}`),
			interim: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n",
			head:    llamaSSEHead, steps: steps(false, llamaCompletion...), end: "0\r\n\r\n",
			check: func(t *testing.T, resp *response) {
				require.Equal(t, 200, resp.status)
				require.Empty(t, resp.all("Link"), "the interim response's fields are not the final one's")
			}},
		{name: "early hints then stream", req: post("/completion?103", `{}`),
			head: "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + llamaSSEHead, steps: steps(false, llamaCompletion...), end: "0\r\n\r\n",
			check: func(t *testing.T, resp *response) {
				require.Equal(t, 200, resp.status)
				require.Empty(t, resp.all("Link"), "the interim response's fields are not the final one's")
			}},
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			cases := withChannels(cases)
			up := lockstepUpstream(t, cases)
			_, addr := startGateway(t, engine, up.addr(), "")
			runWireCases(t, engine, addr, cases)
		})
	}
}

// The inference servers' error answers and readiness refusals reach the client as the server
// wrote them: status, content type and JSON body byte for byte, never replaced by an error of
// the gateway's, and the connection carries the next request, on every engine.
func TestNativeErrorAnswersAreRelayedAsWritten(t *testing.T) {
	answers := map[string]struct{ status, ctype, body string }{
		// llama.cpp's server while it loads its model, and its error object.
		"GET /health ":      {"503 Service Unavailable", "application/json; charset=utf-8", `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`},
		"POST /completion ": {"400 Bad Request", "application/json; charset=utf-8", `{"error":{"code":400,"message":"\"prompt\" must be provided","type":"invalid_request_error"}}`},
		"POST /embedding ":  {"501 Not Implemented", "application/json; charset=utf-8", `{"error":{"code":501,"message":"This server does not support embeddings. Start it with ` + "`--embeddings`" + `","type":"not_supported_error"}}`},
		// Ollama's.
		"POST /api/chat ":     {"404 Not Found", "application/json; charset=utf-8", `{"error":"model \"llama9\" not found, try pulling it first"}`},
		"POST /api/generate ": {"500 Internal Server Error", "application/json; charset=utf-8", `{"error":"llama runner process has terminated: signal: killed"}`},
		// vLLM's.
		"POST /v1/completions ": {"400 Bad Request", "application/json", `{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}`},
	}
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		for k, a := range answers {
			if strings.HasPrefix(head, k) {
				_, err := fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", a.status, a.ctype, len(a.body), a.body)
				return err == nil
			}
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for round := 0; round < 6; round++ { // more than passive health's consecutive failures
				for k, a := range answers {
					method, path, _ := strings.Cut(strings.TrimSpace(k), " ")
					if method == "GET" {
						send(t, c, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: gw\r\n\r\n", path))
					} else {
						send(t, c, post(path, `{}`))
					}
					resp := readResponse(t, r, false)
					require.Equal(t, a.status, fmt.Sprintf("%d %s", resp.status, resp.reason), k)
					require.Equal(t, a.ctype, resp.headers["content-type"], k)
					require.Equal(t, a.body, string(resp.body), k)
				}
			}
		})
	}
}

// An upstream that wrongly sends a body after its answer to HEAD, or with a 204 or a 304, in
// any framing, gets none of it to the client, whose connection carries the next request to a
// fresh answer.
func TestWrongBodiesOfBodylessAnswersNeverReachTheClient(t *testing.T) {
	answers := map[string]string{
		"HEAD /chunked ":  "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n0\r\n\r\n",
		"HEAD /length ":   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 6\r\n\r\nhello\n",
		"HEAD /close ":    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: hello\n\n",
		"GET /204chunk ":  "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n0\r\n\r\n",
		"GET /204close ":  "HTTP/1.1 204 No Content\r\n\r\nhello\n",
		"GET /304length ": "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 6\r\n\r\nhello\n",
		"GET /304chunk ":  "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n0\r\n\r\n",
		"GET /204 ":       "HTTP/1.1 204 No Content\r\n\r\n",
		"GET /304 ":       "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n",
	}
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		for k, a := range answers {
			if strings.HasPrefix(head, k) {
				_, err := io.WriteString(c, a)
				return err == nil
			}
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
		return err == nil
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			r := bufio.NewReader(c)
			for k := range answers {
				method, path, _ := strings.Cut(strings.TrimSpace(k), " ")
				send(t, c, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: gw\r\n\r\n", method, path))
				resp := readResponse(t, r, true)
				require.Empty(t, resp.headers["transfer-encoding"], k)
				if method == "GET" {
					require.Empty(t, resp.headers["content-length"], k)
				}
				send(t, c, "GET /next HTTP/1.1\r\nHost: gw\r\n\r\n")
				next := readResponse(t, r, false)
				require.Equal(t, 200, next.status, "%s: the bodyless answer carried bytes", k)
				require.Equal(t, "done", string(next.body), k)
			}
		})
	}
}

// The same streams through a model alias: the router reads the events it relays (their usage)
// and changes nothing of them; a stream the upstream ends with its own error event ends there.
func TestModelAliasStreamsAreRelayedAsWritten(t *testing.T) {
	const key = "sk-native-0123456789"
	chat := func(q string) string {
		body := `{"model":"chat-alias","stream":true,"messages":[{"role":"user","content":"why"}]}`
		return fmt.Sprintf("POST /v1/chat/completions?%s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", q, key, len(body), body)
	}
	chatChunks := []string{
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"The\"},\"finish_reason\":null}]}\n\n",
		vllmChunks[1],
	}
	gz := gzipPieces(t, chatChunks...)
	cases := []wireCase{
		{name: "vllm error event then end", req: chat("end"), head: vllmSSEHead, steps: steps(false, chatChunks...), end: "0\r\n\r\n"},
		{name: "vllm error event then DONE", req: chat("done"), head: vllmSSEHead, steps: steps(false, append(chatChunks[:2:2], "data: [DONE]\n\n")...), end: "0\r\n\r\n"},
		{name: "until close", req: chat("close"), head: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
			steps: steps(true, append(chatChunks[:1:1], "data: [DONE]\n\n")...), close: true},
		{name: "early hints then stream", req: chat("103"), head: "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + vllmSSEHead,
			steps: steps(false, append(chatChunks[:1:1], "data: [DONE]\n\n")...), end: "0\r\n\r\n"},
		{name: "trailer", req: chat("trailer"), head: vllmSSEHead, steps: steps(false, append(chatChunks[:1:1], "data: [DONE]\n\n")...), end: "0\r\nX-Checksum: abc\r\n\r\n"},
		{name: "gzip though asked for identity", req: chat("gzip"),
			head:  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
			steps: steps(false, gz...), end: "0\r\n\r\n", check: header("Content-Encoding", "gzip")},
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			cases := withChannels(cases)
			up := lockstepUpstream(t, cases)
			_, addr, _ := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
middlewares = ["keys"]
[middlewares.keys]
type = "api-key"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[models.chat-alias.targets.t]
service = "up"
upstream_model = "meta-llama/Llama-3.1-8B-Instruct"
[consumers.c]
api_key_sha256 = [%q]
[consumers.c.grants]
models = ["*"]
endpoints = ["*"]
`, engineTOML(engine), up.addr(), sha(key)))
			runWireCases(t, engine, addr, cases)
		})
	}
}

// A native stream whose client stops reading and then reads it all arrives whole, byte for
// byte and in order, on every engine: on engine gnet the exchange leaves the event loop for a
// worker once the client falls behind, in the middle of the upstream's framing (a chunk, an
// event), and the relay's state goes with it. The upstream writes until the gateway stops
// taking its bytes, a little more, then ends the stream.
func TestStalledClientGetsTheWholeNativeStream(t *testing.T) {
	type framing struct {
		name, head, end string
		sse, chunked    bool
	}
	for _, f := range []framing{
		{name: "chunked ndjson", head: ndjsonHead, end: "0\r\n\r\n", chunked: true},
		{name: "chunked events", head: llamaSSEHead, end: "0\r\n\r\n", sse: true, chunked: true},
		{name: "ndjson until close", head: "HTTP/1.0 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n"},
		{name: "events until close", head: "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", sse: true},
	} {
		line := func(i int) string {
			pad := strings.Repeat("x", i%97)
			if f.sse {
				return fmt.Sprintf("data: {\"content\":\"%s\",\"i\":%d}\n\n", pad, i)
			}
			return fmt.Sprintf("{\"response\":\"%s\",\"i\":%d,\"done\":false}\n", pad, i)
		}
		var lines atomic.Int64
		var stalled atomic.Pointer[chan struct{}]
		up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
			if _, err := io.WriteString(c, f.head); err != nil {
				return false
			}
			var out bytes.Buffer
			stalledAt, i := -1, 0
			for stalledAt < 0 || i < stalledAt+5000 {
				// Writes of a few lines, cut at odd places: a chunk spans writes, and in
				// chunked framing a write may end inside a size line.
				out.Reset()
				for k := 0; k < 7; k++ {
					if f.chunked {
						out.WriteString(chunk(line(i)))
					} else {
						out.WriteString(line(i))
					}
					i++
				}
				b := out.Bytes()
				for len(b) > 0 {
					n := min(len(b), 1+i%613)
					_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
					w, err := c.Write(b[:n])
					b = b[w:]
					if errors.Is(err, os.ErrDeadlineExceeded) {
						if stalledAt < 0 {
							stalledAt = i
							close(*stalled.Load()) // the client reads from now on
						}
						continue
					}
					if err != nil {
						return false
					}
				}
				if i > 2_000_000 {
					return false // never stalled: the test fails on the count
				}
			}
			lines.Store(int64(i))
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, err := io.WriteString(c, f.end)
			return err == nil && f.chunked
		})
		for _, engine := range engines {
			t.Run(f.name+"/"+engine, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "send_buffer_bytes = 65536")
				ch := make(chan struct{})
				stalled.Store(&ch)
				lines.Store(0)
				c := dial(t, addr)
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				send(t, c, post("/api/generate", `{"model":"llama3.2","prompt":"why"}`))
				select {
				case <-ch:
				case <-time.After(40 * time.Second):
					t.Fatal("the upstream never stalled")
				}
				r := bufio.NewReaderSize(c, 64<<10)
				resp := readResponse(t, r, true)
				require.Equal(t, 200, resp.status)
				var body io.Reader = r
				if resp.headers["transfer-encoding"] == "chunked" {
					body = httputil.NewChunkedReader(r)
				}
				br := bufio.NewReader(body)
				i := 0
				for ; ; i++ {
					want := line(i)
					got := make([]byte, len(want))
					n, err := io.ReadFull(br, got)
					if err == io.EOF {
						break
					}
					require.NoError(t, err, "line %d: got %q", i, got[:n])
					if string(got) != want {
						t.Fatalf("line %d: got %q, want %q", i, got, want)
					}
				}
				require.EqualValues(t, lines.Load(), i, "the lines the upstream wrote")
			})
		}
	}
}

// A native stream that falls silent for stream_idle_timeout is cut, on every engine: the
// client gets the lines that came and a transfer that does not end in good framing, never a
// last chunk that would make the cut stream look whole.
func TestSilentNativeStreamIsCutNotEnded(t *testing.T) {
	heads := map[string]string{
		"/chunked": ndjsonHead,
		"/close":   "HTTP/1.0 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n",
	}
	up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, head string, _ []byte) bool {
		path := strings.Fields(head)[1]
		l := ollamaChat[0]
		if path == "/chunked" {
			l = chunk(l)
		}
		if _, err := io.WriteString(c, heads[path]+l); err != nil {
			return false
		}
		u.watchClose(r)
		<-u.stop // silent until the gateway gives up
		return false
	})
	for _, engine := range engines {
		for path := range heads {
			t.Run(engine+path, func(t *testing.T) {
				_, addr := startGatewayServers(t, engine, fmt.Sprintf("servers = [{ url = \"http://%s\" }]\nstream_idle_timeout = \"300ms\"", up.addr()))
				c := dial(t, addr)
				send(t, c, post(path, `{}`))
				r := bufio.NewReader(c)
				resp := readResponse(t, r, true)
				require.Equal(t, 200, resp.status)
				require.Equal(t, "chunked", resp.headers["transfer-encoding"])
				got, err := io.ReadAll(httputil.NewChunkedReader(r))
				require.Error(t, err, "the transfer is cut, not ended in good framing")
				require.Equal(t, ollamaChat[0], string(got))
				up.waitConnClosed(t, 5*time.Second)
			})
		}
	}
}
