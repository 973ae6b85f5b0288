package pd_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// GET /api/gateway/workers judges each worker for a prefill/decode target as the target's
// requests are served: prefill and decode workers are eligible (a phase "decode" target needs
// both), a worker of neither role is wrong_role, and a prefill worker of another deployment
// generation is left out for its generation, not for being no decode worker.
func TestAdminWorkersJudgesPrefillDecodeTargetsByRole(t *testing.T) {
	aggregated := fastInstance()
	aggregated.WorkerID = "aggregated"
	oldPrefill := fastInstance()
	oldPrefill.WorkerID, oldPrefill.Role, oldPrefill.Generation = "prefill-oldgen", llmsim.RolePrefill, 2
	f := startFleet(t, nil, aggregated, oldPrefill)
	g := startGateway(t, f.gatewayTOML("", ""))
	status, data := stream(t, g, chatBody("hello"))
	require.Equal(t, 200, status, data)

	resp, err := http.Get("http://" + g.AdminAddr() + "/api/gateway/workers")
	require.NoError(t, err)
	defer resp.Body.Close()
	var rows []struct {
		Observation struct {
			WorkerID string `json:"worker_id"`
		} `json:"observation"`
		Targets []struct {
			Model    string  `json:"model"`
			Target   string  `json:"target"`
			Eligible bool    `json:"eligible"`
			Reason   *string `json:"reason"`
		} `json:"targets"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rows))
	want := map[string]string{
		"prefill-a": "", "prefill-b": "", "decode-a": "", "decode-b": "",
		"aggregated": "wrong_role", "prefill-oldgen": "deployment_generation",
	}
	got := map[string]string{}
	for _, r := range rows {
		require.Len(t, r.Targets, 1, "worker %s", r.Observation.WorkerID)
		v := r.Targets[0]
		require.Equal(t, "chat", v.Model)
		require.Equal(t, "t", v.Target)
		reason := ""
		if v.Reason != nil {
			reason = *v.Reason
		}
		require.Equal(t, reason == "", v.Eligible, "worker %s: eligible and reason disagree", r.Observation.WorkerID)
		got[r.Observation.WorkerID] = reason
	}
	require.Equal(t, want, got)
}
