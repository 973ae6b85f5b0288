package gateway_test

import (
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// codedUpstreamEnv makes the test binary, started as a scaled service's replica, run the
// upstream of TestHeldStreamNamesACodedAnswer (TestCodedEventStreamUpstreamProcess).
const codedUpstreamEnv = "SLUICE_TEST_CODED_SSE_UPSTREAM"

// A streaming caller held through a cold start has had its event stream's head from the
// gateway, so the upstream is asked for Accept-Encoding: identity. An upstream that codes its
// event stream all the same (gzip) cannot be relayed under that head: the stream ends with an
// error event that says so, not with "the upstream answered OK".
func TestHeldStreamNamesACodedAnswer(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, engine := range []string{"gnet", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			_, addr, _ := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.load_balancer]
strategy = "least-connections"
[services.llm.scaling]
executor = "exec"
max_replicas = 1
keepalive_interval = "50ms"
[services.llm.scaling.exec]
command = [%q, "-test.run=^TestCodedEventStreamUpstreamProcess$", "127.0.0.1:{port}"]
env = ["%s=1"]
stop_timeout = "2s"
`, engineTOML(engine), exe, codedUpstreamEnv))
			status, body := streamChatBody(t, addr, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, 200, status)
			require.Contains(t, body, "event: error\n", "%q", body)
			require.Contains(t, body, "coded its event stream", "%q", body)
			require.Contains(t, body, "gzip", "the coding it used: %q", body)
			require.Contains(t, body, "identity", "what it was asked for: %q", body)
			require.NotContains(t, body, "answered OK", "%q", body)
			require.NotContains(t, body, "[DONE]", "%q", body)
		})
	}
}

// TestCodedEventStreamUpstreamProcess is no test: it is the upstream the replicas of
// TestHeldStreamNamesACodedAnswer run (the test binary started with codedUpstreamEnv set and
// the address to listen on as its argument). It answers /health 200 and any other request
// with a gzip-coded event stream, whatever Accept-Encoding asked for.
func TestCodedEventStreamUpstreamProcess(t *testing.T) {
	if os.Getenv(codedUpstreamEnv) != "1" {
		t.Skip("the upstream of TestHeldStreamNamesACodedAnswer, run as its replica")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"))
		_ = zw.Close()
	})
	srv := &http.Server{Addr: flag.Arg(0), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// The scaler stops the replica with SIGTERM, which ends this process; an orphan (its
	// gateway gone without stopping it) ends on its own.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatal(err)
	}
}
