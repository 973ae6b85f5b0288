package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// BenchmarkPrimaryLatencyWithMirror measures what a mirror costs the primary: the latency of
// chat completions through the gateway (p50 and p99, in microseconds) with no mirror, with
// every request mirrored to a dead shadow, and with every request mirrored to a shadow that
// never answers (its queue full, copies dropped). Compare the three in one run:
//
//	go test -run '^$' -bench PrimaryLatencyWithMirror -benchtime 3000x ./core/gateway/
func BenchmarkPrimaryLatencyWithMirror(b *testing.B) {
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(time.Millisecond)
	cfg.Defaults.Tokens = 1
	fleet, err := llmsim.Start(cfg)
	require.NoError(b, err)
	b.Cleanup(func() { _ = fleet.Close() })
	sim := fleet.Addrs()[0]
	stuck := serveUpstreamU(b, func(u *upstream, _ net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
		<-u.stop
		return false
	})
	for _, tc := range []struct{ name, mirror string }{
		{"none", ""},
		{"dead-shadow", fmt.Sprintf("[services.up.mirror]\nservice = \"shadow\"\npercentage = 100\n[services.shadow.load_balancer]\nservers = [{ url = \"http://%s\" }]\n", deadUpstream(b))},
		{"stuck-shadow", fmt.Sprintf("[services.up.mirror]\nservice = \"shadow\"\npercentage = 100\n[services.shadow.load_balancer]\nservers = [{ url = \"http://%s\" }]\n", stuck.addr())},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, addr := startGatewayTOML(b, "gnet", "PathPrefix(`/`)", "", fmt.Sprintf("servers = [{ url = \"http://%s\" }]\n%s", sim, tc.mirror))
			client := &http.Client{Timeout: 10 * time.Second}
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
				require.NoError(b, err)
				_, _ = bufio.NewReader(resp.Body).WriteTo(discard{})
				_ = resp.Body.Close()
				require.Equal(b, 200, resp.StatusCode)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
