package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A replica command that fails at once is started again after the restart backoff, once per
// replica the load asks for, not at once on another slot: with max_replicas = 4 and one
// request waiting, the command runs about once a second, not four times. The slot tried next
// is one that has not failed yet (or failed longest ago), so that a slot whose port another
// process took does not keep the service down while other slots are free.
func TestFailingReplicaCommandWaitsOutItsBackoff(t *testing.T) {
	starts := filepath.Join(t.TempDir(), "starts")
	_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "exec"
max_replicas = 4
target_utilization = 1.0
buffer_timeout = "2500ms"
[services.llm.scaling.exec]
command = ["/bin/sh", "-c", "echo {port} >> %s; exit 1"]
`, starts))
	r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	require.Equal(t, 504, r.status, r.raw)
	require.Equal(t, "cold_start_timeout", errField(r, "code"))
	waitScaling(t, admin, 10*time.Second, "the failed replicas stopped", func(s scalingView) bool { return s.Ready+s.Starting == 0 })
	b, err := os.ReadFile(starts)
	require.NoError(t, err)
	ports := strings.Fields(string(b))
	// 2.5 s of waiting for one replica: a start at once, then one after each second's backoff.
	require.LessOrEqual(t, len(ports), 4, "the command ran %d times within 2.5 s for one replica, on ports %v", len(ports), ports)
	require.GreaterOrEqual(t, len(ports), 2, "the failed replica was not started again: %v", ports)
	require.NotEqual(t, ports[0], ports[1], "the retry did not move to a slot that had not failed: %v", ports)
}
