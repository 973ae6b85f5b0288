package snapshot_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// A scaled service whose executor cannot be set up is refused for that reason alone: its
// servers are its scaler's, so the missing load_balancer is no second problem.
func TestAScalerThatFailsIsTheOnlyError(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "missing-ca.pem")
	cfg, err := config.LoadBytes("t.toml", []byte(fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[routers.r]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "kube"
max_replicas = 2
[services.llm.scaling.kube]
namespace = "models"
deployment = "vllm"
service = "vllm"
url = "http://vllm.models.svc:8000"
api_server = "https://127.0.0.1:1"
token_file = %q
ca_file = %q
`, ca, ca)))
	require.NoError(t, err)
	_, err = snapshot.Compile(cfg, nil, 1)
	var list config.ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 1, "%v", err)
	require.Contains(t, list[0].Error(), "services.llm.scaling.kube: ")
}
