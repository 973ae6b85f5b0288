package gateway_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// codingUpstream is an OpenAI-compatible upstream that codes its answers with gzip when the
// request accepts it, as an API behind nginx's or a CDN's gzip does, and records the
// Accept-Encoding of each chat completion request (only those: a loopback port is reused, and
// a poller of an earlier test's server at that port may still call it).
func codingUpstream(t *testing.T) (*upstream, func() []string) {
	var mu sync.Mutex
	var accepted []string
	u := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, body []byte) bool {
		ae := ""
		for _, l := range strings.Split(head, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Accept-Encoding") {
				ae += strings.TrimSpace(v) + ";"
			}
		}
		if strings.HasPrefix(head, "POST /v1/chat/completions ") {
			mu.Lock()
			accepted = append(accepted, ae)
			mu.Unlock()
		}
		answer, ct := `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}}`, "application/json"
		if bytes.Contains(body, []byte(`"stream":true`)) {
			answer, ct = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello\"}}]}\n\n"+
				"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2,\"total_tokens\":13}}\n\n"+
				"data: [DONE]\n\n", "text/event-stream"
		}
		out, coding := []byte(answer), ""
		if strings.Contains(ae, "gzip") {
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			_, _ = w.Write(out)
			_ = w.Close()
			out, coding = b.Bytes(), "Content-Encoding: gzip\r\n"
		}
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%sContent-Length: %d\r\n\r\n%s", ct, coding, len(out), out)
		return err == nil
	})
	return u, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), accepted...)
	}
}

// A model router reads each answer it relays (its usage, its events), so it asks the upstream
// for answers without a content coding whatever the client accepts: the OpenAI SDKs (Node's
// fetch, Python's httpx) send Accept-Encoding: gzip, deflate, and an upstream that honours it
// would hide the usage from the gateway. The client still gets a coded answer from a compress
// middleware of the router.
func TestModelRouterAsksUpstreamsForUncodedAnswers(t *testing.T) {
	const key = "sk-coding-0123456789"
	up, accepted := codingUpstream(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
middlewares = ["keys", "zip"]
[middlewares.keys]
type = "api-key"
[middlewares.zip]
type = "compress"
encodings = ["gzip"]
min_size = 0
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[models.coded-model.targets.t]
service = "up"
[consumers.coder]
api_key_sha256 = [%q]
[consumers.coder.grants]
models = ["*"]
endpoints = ["*"]
`, engineTOML(engine), up.addr(), sha(key)))
			const (
				prompt  = `sluice_model_tokens_total{model="coded-model",target="t",consumer="coder",kind="prompt"}`
				missing = `sluice_model_usage_missing_total{model="coded-model"}`
			)
			p0, m0 := metricValue(t, admin, prompt), metricValue(t, admin, missing)
			n0 := len(accepted())
			for _, stream := range []bool{false, true} {
				body := `{"model":"coded-model","messages":[{"role":"user","content":"hi"}]}`
				if stream {
					body = `{"model":"coded-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
				}
				req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept-Encoding", "gzip, deflate") // what Node's fetch sends
				resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
				require.NoError(t, err)
				raw, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, 200, resp.StatusCode)
				if resp.Header.Get("Content-Encoding") == "gzip" {
					zr, err := gzip.NewReader(bytes.NewReader(raw))
					require.NoError(t, err)
					raw, err = io.ReadAll(zr)
					require.NoError(t, err)
				}
				require.Contains(t, string(raw), "hello", "the client reads the answer")
				if !stream {
					require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), "the router's compress middleware codes for the client")
					require.True(t, json.Valid(raw), "%q", raw)
				}
				p0 += 11
				waitMetric(t, admin+"/metrics", prompt, func(v float64) bool { return v == p0 })
			}
			require.Equal(t, m0, metricValue(t, admin, missing), "no answer counted without usage")
			require.Len(t, accepted()[n0:], 2, "one upstream request per answer")
			for _, ae := range accepted()[n0:] {
				require.Equal(t, "identity;", ae, "the upstream is asked for an uncoded answer")
			}
		})
	}
}

// An event stream the upstream codes (Content-Encoding: gzip, as an nginx with
// text/event-stream among its gzip_types sends it) is relayed as opaque bytes on a plain
// router: each read goes out as it comes, with nothing held back for an event boundary the
// gateway cannot see in coded bytes, and an upstream reset cuts the transfer rather than
// writing a plain-text error event into the coded body, which would corrupt it.
func TestCodedEventStreamIsRelayedAsOpaqueBytes(t *testing.T) {
	var coded bytes.Buffer
	zw := gzip.NewWriter(&coded)
	_, _ = io.WriteString(zw, "data: {\"i\":0}\n\n")
	require.NoError(t, zw.Flush()) // a sync flush: a prefix a client can already inflate
	first := coded.String()
	require.NotContains(t, first, "\n\n", "no blank line in the coded bytes")

	reset := make(chan struct{})
	up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
		_, _ = fmt.Fprintf(c, "%x\r\n%s\r\n", len(first), first)
		select {
		case <-reset:
		case <-time.After(10 * time.Second):
		}
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		return false
	})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}")
			r := bufio.NewReader(c)
			resp := readResponse(t, r, true)
			require.Equal(t, "gzip", resp.headers["content-encoding"])
			require.Equal(t, "chunked", resp.headers["transfer-encoding"])
			size, err := r.ReadString('\n')
			require.NoError(t, err)
			n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
			require.NoError(t, err)
			got := make([]byte, n+2)
			_, err = io.ReadFull(r, got)
			require.NoError(t, err, "the coded bytes go out before the upstream sends more")
			require.Equal(t, first, string(got[:n]))

			reset <- struct{}{}
			rest, _ := io.ReadAll(r)
			require.NotContains(t, string(rest), "event: error", "no plain text inside the coded body")
			require.NotContains(t, string(rest), "0\r\n\r\n", "the transfer is cut, not ended as if whole")
		})
	}
}
