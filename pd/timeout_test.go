package pd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/gateway"
)

// execution_timeout_ms bounds the exchange: a prefill that outlasts it gets the client a 504
// and both workers an abort.
func TestExecutionTimeoutAbortsBothWorkers(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillA || i == prefillB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	})
	g := startGateway(t, f.gatewayTOML("", "execution_timeout_ms = 300"))
	status, data := stream(t, g, chatBody("too slow"))
	require.Equal(t, 504, status, data)
	require.Contains(t, data[0], `"upstream_timeout"`)
	var id string
	for _, w := range []int{prefillA, prefillB} {
		if ids := f.executions(w, "prefill"); len(ids) > 0 {
			id = ids[0]
		}
	}
	require.NotEmpty(t, id)
	calls := f.calls(id)
	require.Len(t, calls, 2)
	for w := range calls {
		f.waitCall(t, indexOf(f.ids, w), "abort", id)
	}
	require.Empty(t, f.executions(decodeA, "decode"))
	require.Empty(t, f.executions(decodeB, "decode"))
}

// execution_timeout_ms covers the decode stream too: a stream that outlasts it ends with the
// gateway's error event naming the timeout, as a request that was not streamed gets it in its
// 504, and both workers get an abort. Metrics and the access log count it as a timeout, not
// as a stream the upstream failed.
func TestExecutionTimeoutEndsTheStream(t *testing.T) {
	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) { executionTimeoutEndsTheStream(t, engine) })
	}
}

func executionTimeoutEndsTheStream(t *testing.T, engine string) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == decodeA || i == decodeB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	})
	logPath := filepath.Join(t.TempDir(), "access.log")
	toml := f.gatewayTOML("", fmt.Sprintf("execution_timeout_ms = 500\n[log]\naccess_log = %q\n", logPath))
	toml = strings.Replace(toml, "[entrypoints.web]\n", "[entrypoints.web]\nengine = \""+engine+"\"\n", 1)
	g := startGateway(t, toml)
	// The series are process-wide: counted from what they hold before the request.
	upstream := func(reason string) float64 {
		return metricSum(t, fetchMetrics(t, g), `sluice_upstream_errors_total\{router="openai",[^}]*reason="`+reason+`"\}`)
	}
	aborts := func() float64 {
		return metricSum(t, fetchMetrics(t, g), `sluice_pd_aborts_total\{model="chat",target="t",reason="timeout"\}`)
	}
	timeouts0, streams0, aborts0 := upstream("timeout"), upstream("stream"), aborts()

	status, data := stream(t, g, chatBody("a slow stream"))
	require.Equal(t, 200, status, "the stream had begun")
	require.NotContains(t, data, "[DONE]")
	require.NotEmpty(t, data)
	require.Contains(t, data[len(data)-1], `"upstream_timeout"`)
	require.Contains(t, data[len(data)-1], "execution_timeout_ms")
	var id string
	for _, w := range []int{decodeA, decodeB} {
		if ids := f.executions(w, "decode"); len(ids) > 0 {
			id = ids[0]
		}
	}
	require.NotEmpty(t, id)
	for w := range f.calls(id) {
		f.waitCall(t, indexOf(f.ids, w), "abort", id)
	}
	line := waitAccessLine(t, logPath)
	require.Equal(t, "timeout", line["upstream_error"], "%v", line)
	require.Equal(t, timeouts0+1, upstream("timeout"))
	require.Equal(t, streams0, upstream("stream"))
	require.Equal(t, aborts0+1, aborts())

	// Not streamed, the same deadline is the same error, as the answer.
	status, data = stream(t, g, `{"model":"chat","messages":[{"role":"user","content":"a slow answer"}]}`)
	require.Equal(t, 504, status, data)
	require.Contains(t, data[0], `"upstream_timeout"`)
}

// fetchMetrics returns g's admin metrics page.
func fetchMetrics(t *testing.T, g *gateway.Gateway) string {
	t.Helper()
	resp, err := http.Get("http://" + g.AdminAddr() + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	return string(b)
}

// metricSum returns the sum of the series matching re on the metrics page (0 when none does).
func metricSum(t *testing.T, page, re string) float64 {
	t.Helper()
	var sum float64
	for _, m := range regexp.MustCompile(`(?m)^`+re+` (\S+)$`).FindAllStringSubmatch(page, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

// waitAccessLine polls the access log at path until it holds a line and returns the first.
func waitAccessLine(t *testing.T, path string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			if first, _, ok := strings.Cut(string(b), "\n"); ok {
				var line map[string]any
				require.NoError(t, json.Unmarshal([]byte(first), &line), first)
				return line
			}
		}
		require.True(t, time.Now().Before(deadline), "no access log line within 5s")
		time.Sleep(5 * time.Millisecond) // polling for the event, not asserting on time
	}
}
