package pd_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
