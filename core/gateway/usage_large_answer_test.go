package gateway_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The usage of a JSON answer is counted whatever its size: an embeddings batch, whose usage
// follows megabytes of vectors, adds its prompt tokens to the consumer's count, and is not
// counted as an answer without usage.
func TestModelUsageOfLargeAnswersIsCounted(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base, admin := startModelGatewayAdmin(t, engine, sim)
			const (
				prompt  = `sluice_model_tokens_total{model="chat-model",target="primary",consumer="team-b",kind="prompt"}`
				missing = `sluice_model_usage_missing_total{model="chat-model"}`
			)
			p0, m0 := metricValue(t, admin, prompt), metricValue(t, admin, missing)

			inputs := make([]string, 64)
			for i := range inputs {
				inputs[i] = fmt.Sprintf("document %d of a batch that a retrieval pipeline embeds", i)
			}
			in, err := json.Marshal(inputs)
			require.NoError(t, err)
			for _, format := range []string{"float", "base64"} {
				r := call(t, "POST", base+"/v1/embeddings", teamBKey,
					fmt.Sprintf(`{"model":"chat-model","input":%s,"dimensions":3072,"encoding_format":%q}`, in, format))
				require.Equal(t, 200, r.status, r.raw)
				require.Greater(t, len(r.raw), 512<<10, "the answer is larger than a chat answer by far")
				usage, ok := r.body["usage"].(map[string]any)
				require.True(t, ok, "the simulator reports usage")
				p0 += usage["prompt_tokens"].(float64)
				waitMetric(t, admin+"/metrics", prompt, func(v float64) bool { return v == p0 })
			}
			require.Equal(t, m0, metricValue(t, admin, missing), "no answer counted without usage")
		})
	}
}
