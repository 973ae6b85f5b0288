package gateway_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// bigLine is the size of the enormous SSE line in these tests: larger than any buffer the
// relay reads into and than the bound on one event of the usage reader (1 MiB).
const bigLine = 3 << 20

// requireOneEnormousLine checks a streamed chat body: exactly one line longer than bigLine,
// a whole data line, and the stream complete after it.
func requireOneEnormousLine(t *testing.T, body string) {
	t.Helper()
	long := 0
	for _, l := range strings.Split(body, "\n") {
		if len(l) > bigLine {
			long++
			require.True(t, strings.HasPrefix(l, "data: {") && strings.HasSuffix(l, "}"), "the enormous line is relayed whole")
			require.Contains(t, l, strings.Repeat("x", bigLine), "every byte of it")
		}
	}
	require.Equal(t, 1, long)
	require.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "the stream goes on to its end")
}

// An upstream that sends one enormous SSE line (a tool call's arguments, an inline image):
// every engine relays it whole and the stream goes on; on a model route, whose usage reader
// bounds the events it keeps, the usage event after it is still read and counted.
func TestEnormousSSELineIsRelayedAndUsageStillCounted(t *testing.T) {
	sim := startSimulator(t)
	fault := "big-line=" + strconv.Itoa(bigLine)
	for _, engine := range engines {
		t.Run(engine+"/plain route", func(t *testing.T) {
			_, addr := startGatewayServers(t, engine, fmt.Sprintf("servers = [{ url = %q }]", "http://"+sim))
			status, body := streamChat(t, addr, fault)
			require.Equal(t, 200, status)
			requireOneEnormousLine(t, body)
		})
		t.Run(engine+"/model route", func(t *testing.T) {
			base, admin := startModelGatewayAdmin(t, engine, sim)
			metric := func(re *regexp.Regexp) float64 {
				t.Helper()
				s := re.FindStringSubmatch(call(t, "GET", admin+"/metrics", "", "").raw)
				if s == nil {
					return 0
				}
				v, err := strconv.ParseFloat(s[1], 64)
				require.NoError(t, err)
				return v
			}
			completion := regexp.MustCompile(`sluice_model_tokens_total\{model="chat-model",target="primary",consumer="team-a",kind="completion"\} (\d+)`)
			missing := regexp.MustCompile(`sluice_model_usage_missing_total\{model="chat-model"\} (\d+)`)
			c0, m0 := metric(completion), metric(missing)
			r := call(t, "POST", base+"/v1/chat/completions", teamAKey,
				`{"model":"chat-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
				llmsim.FaultHeader, fault)
			require.Equal(t, 200, r.status)
			requireOneEnormousLine(t, r.raw)
			waitFor(t, func() bool { return metric(completion) == c0+5 })
			require.Equal(t, m0, metric(missing), "the usage after the enormous event was read")
		})
	}
}
