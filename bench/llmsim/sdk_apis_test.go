package llmsim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// The official SDKs run the APIs beyond chat against the simulator: the OpenAI Node SDK's
// embeddings.create (its default base64 request and the float one give the same non-zero
// vectors) and responses.create (streamed, not, and the stream helper), and openai-go's
// Responses client (and the Node SDK's chat check).
func TestOfficialSDKsEmbeddingsAndResponses(t *testing.T) {
	f, url := startOne(t, nil)
	base := url + "/v1"
	node := testenv.RunOpenAINodeAPIsCheck(t, base, "sim-model")
	require.Equal(t, "base64", node.Embeddings.DefaultEncoding)
	require.Equal(t, testInstance().EmbeddingDims, node.Embeddings.Dims)
	require.Equal(t, 8, node.Responses.Stream.Deltas)
	require.EqualValues(t, 5, f.Stats(0).Requests, "2 embeddings and 3 responses")

	goRes := testenv.RunOpenAIGoResponsesCheck(t, base, "sim-model")
	require.Equal(t, 8, goRes.Deltas)
	require.EqualValues(t, 8, goRes.NonStreamUsage.OutputTokens)
	// Both SDKs sent the same instructions and input: the same prompt, so the same text.
	require.Equal(t, node.Responses.NonStream.Text, goRes.NonStreamText)
	require.Equal(t, node.Responses.NonStream.Text, node.Responses.Helper.Text)
	require.EqualValues(t, 7, f.Stats(0).Completed)

	// Chat completions through the Node SDK, after the refactor into encodings.
	chat := testenv.RunOpenAINodeCheck(t, base, "sim-model")
	require.Equal(t, 8, chat.Stream.ContentChunks)
}
