package pd_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// A streamed chat completion through the gateway runs decode/prepare, prefill/execute and
// decode/execute, in this order, on a prefill and a decode worker, and the client gets the
// decode worker's stream to its end.
func TestStreamRunsPrepPrefillDecodeOnTwoWorkers(t *testing.T) {
	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) { streamOnTwoWorkers(t, engine) })
	}
}

func streamOnTwoWorkers(t *testing.T, engine string) {
	f := startFleet(t, nil)
	toml := strings.Replace(f.gatewayTOML("", ""), "[entrypoints.web]\n", "[entrypoints.web]\nengine = \""+engine+"\"\n", 1)
	g := startGateway(t, toml)
	status, data := stream(t, g, chatBody("tell me a story"))
	require.Equal(t, 200, status, data)
	require.Equal(t, "[DONE]", data[len(data)-1])
	require.Contains(t, data[len(data)-2], `"usage"`)

	var ids []string
	for _, w := range []int{decodeA, decodeB} {
		ids = append(ids, f.executions(w, "decode")...)
	}
	require.Len(t, ids, 1, "one decode/execute in all")
	calls := f.calls(ids[0])
	var prefillW, decodeW string
	for w, cs := range calls {
		for _, c := range cs {
			switch c.Call {
			case "prefill":
				prefillW = w
			case "decode":
				decodeW = w
			}
		}
	}
	require.Contains(t, []string{"prefill-a", "prefill-b"}, prefillW)
	require.Contains(t, []string{"decode-a", "decode-b"}, decodeW)
	d := calls[decodeW]
	require.Len(t, d, 2, "prepare then decode on the decode worker: %+v", d)
	require.Equal(t, "prepare", d[0].Call)
	require.Equal(t, "decode", d[1].Call)
	p := calls[prefillW]
	require.Len(t, p, 1)
	require.True(t, d[0].At.Before(p[0].At), "prepare before prefill")
	require.True(t, p[0].At.Before(d[1].At), "prefill before decode")
}

// The workers' key reaches no admin output and no log line, failures included:
// /api/gateway/config shows the variable's name.
func TestWorkersKeyNotInAdminOutputOrLogs(t *testing.T) {
	f := startFleet(t, faulty(prefillA, "status=503"))
	var logs syncBuffer
	g := startGatewayLog(t, f.gatewayTOML("", ""), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	status, data := stream(t, g, chatBody(promptRankedFirst(t, "prefill-a", "prefill-b")))
	require.Equal(t, 200, status, data)
	for _, path := range []string{"/api/gateway/config", "/api/gateway/workers", "/api/gateway/models", "/metrics"} {
		resp, err := http.Get("http://" + g.AdminAddr() + path)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode, path)
		require.NotContains(t, string(b), workerKey, path)
		if path == "/api/gateway/config" {
			require.Contains(t, string(b), workerKeyEnv)
		}
	}
	require.NotEmpty(t, logs.String())
	require.NotContains(t, logs.String(), workerKey)
}

// syncBuffer is a bytes.Buffer for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Requests a P/D alias cannot serve get a precise 400 before any worker is called.
func TestOtherEndpointsRefused(t *testing.T) {
	f := startFleet(t, nil)
	g := startGateway(t, f.gatewayTOML("", ""))
	resp, err := http.Post("http://"+g.Addr("web")+"/v1/completions", "application/json", strings.NewReader(`{"model":"chat","prompt":"hi"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 400, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"unsupported_endpoint"`)
	for i := range f.ids {
		require.Empty(t, f.sim.Calls(i))
	}
}

// A request a P/D alias cannot serve is refused before admission: with the alias's only slot
// held by a chat stream and room for one in its queue, a request to another endpoint gets
// its 400 at once, rather than a place in the queue (and, with no queue, a 429) for a request
// that no slot could serve. The queue stays free for chat: a second chat request waits in it.
func TestOtherEndpointsRefusedBeforeAdmission(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if ic.Role == llmsim.RoleDecode {
			ic.Tokens, ic.ITL = 1<<20, llmsim.Duration(time.Millisecond) // a stream that outlasts the test
		}
	})
	g := startGateway(t, f.gatewayTOML("max_concurrent_requests = 1\nmax_queued_requests = 1\nqueue_timeout_ms = 60000", ""))
	base := "http://" + g.Addr("web")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(chatBody("hold the slot")))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	hold, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer hold.Body.Close()
	require.Equal(t, 200, hold.StatusCode)
	_, err = bufio.NewReader(hold.Body).ReadString('\n') // the stream is under way: the slot is taken
	require.NoError(t, err)

	client := &http.Client{Timeout: 10 * time.Second}
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"chat","prompt":"hi"}`},
		{"/v1/embeddings", `{"model":"chat","input":"hi"}`},
		{"/v1/responses", `{"model":"chat","input":"hi"}`},
		{"/v1/messages", `{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		start := time.Now()
		resp, err := client.Post(base+c.path, "application/json", strings.NewReader(c.body))
		require.NoError(t, err, "%s: the request waited for a slot", c.path)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode, "%s: %s", c.path, b)
		if c.path == "/v1/messages" { // Anthropic's error shape, which has no code
			require.Contains(t, string(b), `"type":"invalid_request_error","message":"this model is served by prefill/decode workers`, c.path)
		} else {
			require.Contains(t, string(b), `"unsupported_endpoint"`, c.path)
		}
		t.Logf("%s: 400 in %v", c.path, time.Since(start))
	}

	// The queue's one place is still free: a chat request takes it and is served once the
	// holding stream leaves.
	done := make(chan int, 1)
	go func() {
		status, _, _ := streamErr(g.Addr("web"), `{"model":"chat","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"after the holder"}]}`)
		done <- status
	}()
	cancel()
	select {
	case status := <-done:
		require.Equal(t, 200, status)
	case <-time.After(30 * time.Second):
		t.Fatal("the queued chat request was not served after the holder left")
	}
}
