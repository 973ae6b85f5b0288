package gateway_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/lifecycle/scaling/kubetest"
)

// The kube executor against a fake API server on loopback: a burst on a Deployment scaled to
// zero sets its replicas by the formula through the scale subresource (retrying a write that
// lost the resourceVersion race), the requests wait until the Service's EndpointSlices show a
// ready replica, and the Deployment goes back to zero replicas once idle.
func TestKubeExecutorScalesADeploymentFromZero(t *testing.T) {
	// Replicas become ready well after the poll below has seen the burst queued.
	api, err := kubetest.Start("models", "llm", "llm-svc", 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(api.Close)
	api.InjectConflicts(1)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte(api.Token+"\n"), 0o600))
	sim := startRevisionSim(t, 0) // stands for the Service's pods

	_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "kube"
min_replicas = 0
max_replicas = 4
container_concurrency = 2
target_utilization = 0.7
scale_down_delay = "200ms"
scale_to_zero_after = "300ms"
[services.llm.scaling.kube]
namespace = "models"
deployment = "llm"
service = "llm-svc"
url = "http://%s"
api_server = %q
token_file = %q
`, sim.Addrs()[0], api.URL, token))

	const n = 4
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r apiResult
			r, errs[i] = tryCall("POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
			statuses[i] = r.status
		}()
	}
	// ⌈4 / (2 × 0.7)⌉ = 3 replicas, asked for while the requests wait.
	waitScaling(t, admin, 10*time.Second, "the burst queued", func(s scalingView) bool { return s.Queued == n && s.Target == 3 })
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []int{200, 200, 200, 200}, statuses)

	deadline := time.Now().Add(10 * time.Second)
	for {
		if replicas, _ := api.Replicas(); replicas == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the Deployment never went back to zero")
		time.Sleep(10 * time.Millisecond) // polling interval, not an assertion
	}
	scales, conflicts := api.Scales()
	require.Equal(t, 3, slices.Max(scales), "scaled up to the formula's 3 (through 1 when the first request came alone)")
	require.Equal(t, 0, scales[len(scales)-1])
	require.Equal(t, 1, conflicts, "the write that lost the race was read again and retried")
	// The gateway learns of the replicas' end from its next look at the Deployment: wait for it.
	waitScaling(t, admin, 10*time.Second, "no replica ready", func(s scalingView) bool { return s.Ready == 0 })
}

// The kube executor's warnings (a scale that failed, a list of the EndpointSlices that
// failed) name the API server, the Deployment and the Service as the configuration writes
// them: their errors quote the URL requested, whose values from the environment (a private
// host, a port, a name) are never shown, in the log as elsewhere.
func TestKubeExecutorLogNeverShowsEnvValues(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // every request to the API server is refused
	t.Setenv("SLUICE_TEST_KUBE_API", addr)
	t.Setenv("SLUICE_TEST_KUBE_DEPLOYMENT", "private-deployment")
	t.Setenv("SLUICE_TEST_KUBE_SERVICE", "private-service")
	logs := new(syncBuffer)
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	startConfigGateway(t, `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "kube"
min_replicas = 1
[services.llm.scaling.kube]
deployment = "${SLUICE_TEST_KUBE_DEPLOYMENT}"
service = "${SLUICE_TEST_KUBE_SERVICE}"
url = "http://127.0.0.1:1"
api_server = "http://${SLUICE_TEST_KUBE_API}"
`)
	require.Eventually(t, func() bool {
		s := logs.String()
		return strings.Contains(s, "scaling: kube: scale failed") && strings.Contains(s, "scaling: kube: endpointslices")
	}, 10*time.Second, 5*time.Millisecond)
	for l := range strings.Lines(logs.String()) {
		if !strings.Contains(l, "scaling: kube:") {
			continue
		}
		for _, v := range []string{addr, "private-deployment", "private-service"} {
			require.NotContains(t, l, v, "the log shows a value from the environment")
		}
		require.Contains(t, l, "http://${SLUICE_TEST_KUBE_API}/apis/", "the error names the URL as written")
	}
}
