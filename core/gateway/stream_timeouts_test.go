package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// streamChat sends a streamed chat completion through the gateway at addr with the simulator
// fault spec fault ("" for none) and returns the status and the whole body the client got.
func streamChat(t *testing.T, addr, fault string) (int, string) {
	t.Helper()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set(llmsim.FaultHeader, fault)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the stream ends cleanly, with or without an error event")
	return resp.StatusCode, string(b)
}

// startStreamingSim runs one simulator instance that streams tokens tokens, a token every
// 2 ms after a 20 ms prefill.
func startStreamingSim(t *testing.T, tokens int) string {
	t.Helper()
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(20 * time.Millisecond)
	cfg.Defaults.ITL = llmsim.Duration(2 * time.Millisecond)
	cfg.Defaults.Tokens = tokens
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f.Addrs()[0]
}

// The four deadlines of a streamed response, each against the simulator fault that trips it;
// a generation that is slow but alive is not cut by the idle or first-token deadline. The
// bounds leave wide margins over the simulator's timing (a loaded 2-core machine runs the
// race detector), and nothing asserts on elapsed time: the error event's code says which
// deadline cut the stream.
func TestStreamTimeoutsCutStuckStreamsNotSlowOnes(t *testing.T) {
	sim := startStreamingSim(t, 8)
	cases := []struct {
		name, lb, fault string
		wantCode        string // "" : the stream completes with [DONE]
		minEvents       int
	}{
		{"stuck before the first token", `first_token_timeout = "300ms"`, "stall-after=0", "first_token_timeout", 0},
		{"slow but alive", `first_token_timeout = "1s"` + "\n" + `stream_idle_timeout = "600ms"`, "slow=60ms", "", 8},
		{"stuck mid-stream", `stream_idle_timeout = "300ms"`, "stall-after=3", "stream_idle_timeout", 3},
		// 8 tokens 120 ms apart take about a second, each gap well inside the idle timeout.
		{"longer than the stream may last", `stream_timeout = "400ms"`, "slow=120ms", "stream_timeout", 1},
		{"no deadline set", ``, "", "", 8},
	}
	for _, engine := range engines {
		for _, tc := range cases {
			t.Run(engine+"/"+tc.name, func(t *testing.T) {
				_, addr := startGatewayServers(t, engine, fmt.Sprintf("servers = [{ url = %q }]\n%s", "http://"+sim, tc.lb))
				status, body := streamChat(t, addr, tc.fault)
				require.Equal(t, 200, status, body)
				if tc.wantCode == "" {
					require.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "the stream completes: %q", body)
					require.GreaterOrEqual(t, strings.Count(body, `"chat.completion.chunk"`), tc.minEvents)
					require.NotContains(t, body, "event: error")
					return
				}
				requireCut(t, body, tc.wantCode, tc.minEvents)
			})
		}
	}
}

// requireCut checks that a stream was ended by the gateway's error event with code, after at
// least minEvents chunks, and without [DONE].
func requireCut(t *testing.T, body, code string, minEvents int) {
	t.Helper()
	require.Contains(t, body, "event: error", "the stream ends with the gateway's error event: %q", body)
	require.Contains(t, body, `"code":"`+code+`"`, body)
	require.NotContains(t, body, "[DONE]", "a cut stream never looks complete")
	require.GreaterOrEqual(t, strings.Count(body, `"chat.completion.chunk"`), minEvents, body)
}

// The time to the response head: a non-streamed answer that the simulator holds back longer
// than response_header_timeout gets a 504 with an OpenAI-shaped error, and first_token_timeout,
// which only watches streams, does not cut a non-streamed answer that takes longer than it.
func TestResponseHeaderTimeoutAndNonStreamedAnswers(t *testing.T) {
	sim := startStreamingSim(t, 4)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGatewayServers(t, engine, fmt.Sprintf("servers = [{ url = %q }]\n%s", "http://"+sim,
				`response_header_timeout = "1s"`+"\n"+`first_token_timeout = "50ms"`))
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body, llmsim.FaultHeader, "slow=3s")
			require.Equal(t, 504, r.status, r.raw)
			require.Equal(t, "upstream_timeout", errField(r, "code"), r.raw)

			r = call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body, llmsim.FaultHeader, "slow=30ms")
			require.Equal(t, 200, r.status, "about 150 ms to the whole answer, past first_token_timeout: %s", r.raw)
		})
	}
}
