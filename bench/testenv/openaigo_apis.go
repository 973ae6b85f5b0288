package testenv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// GoAPIsResult is what OpenAIGoAPIsCheck measured.
type GoAPIsResult struct {
	// CompletionText is the non-streaming completion's text; StreamText the streamed deltas'.
	CompletionText, StreamText string
	// CompletionUsage and StreamUsage are their usage (tokens).
	CompletionUsage, StreamUsage openai.CompletionUsage
	// Embeddings and Dims count the vectors of the embeddings request and their length.
	Embeddings, Dims int
	// Models are the ids models.list returned, in its order.
	Models []string
}

// OpenAIGoAPIsCheck runs openai-go against baseURL (an OpenAI base URL such as
// "http://127.0.0.1:8080/v1") for model, no retries, on the APIs beyond chat and Responses:
//   - completions: one non-streaming and one streaming completion with
//     stream_options.include_usage; the text is non-empty, finish_reason is set, usage is
//     present and consistent (total = prompt + completion > 0), and the stream ended after a
//     `data: [DONE]` line;
//   - embeddings: two inputs as floats (no encoding_format) and as base64 (decoded by the
//     SDK); every vector is non-empty, finite and not all zeros, both encodings give the same
//     numbers, and usage counts the prompt;
//   - models: models.list, paged as the SDK pages it; every entry is a model, and with
//     wantModels non-nil the ids are exactly those (in any order).
//
// opts go after the check's own options (option.WithAPIKey replaces its "sk-test"). Any
// failed check or transport error is returned; ctx bounds the whole check.
func OpenAIGoAPIsCheck(ctx context.Context, baseURL, model string, wantModels []string, opts ...option.RequestOption) (GoAPIsResult, error) {
	var res GoAPIsResult
	var sawDone atomic.Bool
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := newGoClient(baseURL, transport, &sawDone, opts)

	// 1. Completions, non-streaming.
	params := openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(model),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say something.")},
		MaxTokens: openai.Int(16),
	}
	c, err := client.Completions.New(ctx, params)
	if err != nil {
		return res, fmt.Errorf("completions non-stream: %w", err)
	}
	if len(c.Choices) != 1 {
		return res, fmt.Errorf("completions non-stream: %d choices: %s", len(c.Choices), c.RawJSON())
	}
	res.CompletionText, res.CompletionUsage = c.Choices[0].Text, c.Usage
	switch {
	case res.CompletionText == "":
		return res, fmt.Errorf("completions non-stream: empty text: %s", c.RawJSON())
	case c.Choices[0].FinishReason == "":
		return res, fmt.Errorf("completions non-stream: no finish_reason: %s", c.RawJSON())
	}
	if err := checkUsage(c.Usage, "completions non-stream"); err != nil {
		return res, err
	}

	// 2. Completions, streaming with include_usage.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	finish, usageSeen := "", false
	for stream.Next() {
		chunk := stream.Current()
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Text)
			if ch.FinishReason != "" {
				finish = string(ch.FinishReason)
			}
		}
		if chunk.JSON.Usage.Valid() {
			res.StreamUsage, usageSeen = chunk.Usage, true
		}
	}
	err = stream.Err()
	stream.Close()
	res.StreamText = text.String()
	switch {
	case err != nil:
		return res, fmt.Errorf("completions stream: %w", err)
	case !sawDone.Load():
		return res, errors.New("completions stream: ended without a data: [DONE] line")
	case res.StreamText == "":
		return res, errors.New("completions stream: empty text")
	case finish == "":
		return res, errors.New("completions stream: no chunk with finish_reason")
	case !usageSeen:
		return res, errors.New("completions stream: no usage chunk despite stream_options.include_usage")
	}
	if err := checkUsage(res.StreamUsage, "completions stream"); err != nil {
		return res, err
	}

	// 3. Embeddings, as floats and as base64.
	input := openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"The quick brown fox.", "jumped over the lazy dog"}}
	flt, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model, Input: input})
	if err != nil {
		return res, fmt.Errorf("embeddings (float): %w", err)
	}
	b64, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model, Input: input, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64})
	if err != nil {
		return res, fmt.Errorf("embeddings (base64): %w", err)
	}
	if len(flt.Data) != 2 || len(b64.Data) != 2 {
		return res, fmt.Errorf("embeddings: %d (float) and %d (base64) vectors for 2 inputs", len(flt.Data), len(b64.Data))
	}
	for i := range flt.Data {
		a, b := flt.Data[i].Embedding, b64.Data[i].Embedding
		if err := checkVector(a); err != nil {
			return res, fmt.Errorf("embeddings (float) %d: %w", i, err)
		}
		if !slices.Equal(a, b) {
			return res, fmt.Errorf("embeddings %d: base64 gives %d values %.4v…, float %d values %.4v…", i, len(b), b[:min(3, len(b))], len(a), a[:min(3, len(a))])
		}
		res.Dims = len(a)
	}
	res.Embeddings = len(flt.Data)
	if flt.Usage.PromptTokens <= 0 {
		return res, fmt.Errorf("embeddings: usage.prompt_tokens %d: %s", flt.Usage.PromptTokens, flt.Usage.RawJSON())
	}

	// 4. The model list.
	pager := client.Models.ListAutoPaging(ctx)
	for pager.Next() {
		m := pager.Current()
		if m.ID == "" || string(m.Object) != "model" {
			return res, fmt.Errorf("models: not a model: %s", m.RawJSON())
		}
		res.Models = append(res.Models, m.ID)
	}
	if err := pager.Err(); err != nil {
		return res, fmt.Errorf("models: %w", err)
	}
	if len(res.Models) == 0 {
		return res, errors.New("models: empty list")
	}
	if wantModels != nil {
		got, want := slices.Sorted(slices.Values(res.Models)), slices.Sorted(slices.Values(wantModels))
		if !slices.Equal(got, want) {
			return res, fmt.Errorf("models: ids %q, want %q", got, want)
		}
	}
	return res, nil
}

// checkVector refuses an empty, non-finite or all-zero embedding.
func checkVector(v []float64) error {
	if len(v) == 0 {
		return errors.New("empty vector")
	}
	nonZero := false
	for j, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("value %d is %v", j, x)
		}
		nonZero = nonZero || x != 0
	}
	if !nonZero {
		return errors.New("all zeros")
	}
	return nil
}

// RunOpenAIGoAPIsCheck is OpenAIGoAPIsCheck with a 60 s deadline that fails t on any failure
// and logs the measurements on success.
func RunOpenAIGoAPIsCheck(t testing.TB, baseURL, model string, wantModels []string, opts ...option.RequestOption) GoAPIsResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := OpenAIGoAPIsCheck(ctx, baseURL, model, wantModels, opts...)
	if err != nil {
		t.Fatalf("openai-go APIs check against %s (model %q): %v", baseURL, model, err)
	}
	t.Logf("openai-go APIs check: completion %d chars (usage %d+%d), streamed %d chars (usage %d+%d), %d embeddings of %d dims, models %q",
		len(res.CompletionText), res.CompletionUsage.PromptTokens, res.CompletionUsage.CompletionTokens,
		len(res.StreamText), res.StreamUsage.PromptTokens, res.StreamUsage.CompletionTokens, res.Embeddings, res.Dims, res.Models)
	return res
}

// OpenAIGoError sends one request with openai-go to baseURL for model, without retries, and
// returns the *openai.Error it failed with: the SDK's typed error for an HTTP answer, holding
// the status, the error body's type, code and param, and the response (its headers, such as
// Retry-After). endpoint picks the API: "chat", "completions", "embeddings", "responses" or
// "models" (models.list). opts go after the client's own options (option.WithAPIKey replaces
// its "sk-test"). The error is non-nil when the request succeeded or failed otherwise (no
// answer, ctx ended, an unknown endpoint).
func OpenAIGoError(ctx context.Context, baseURL, model, endpoint string, opts ...option.RequestOption) (*openai.Error, error) {
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := newGoClient(baseURL, transport, nil, opts)
	var err error
	switch endpoint {
	case "chat":
		_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(1)})
	case "completions":
		_, err = client.Completions.New(ctx, openai.CompletionNewParams{
			Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(1)})
	case "embeddings":
		_, err = client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
	case "responses":
		_, err = client.Responses.New(ctx, responses.ResponseNewParams{
			Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}, MaxOutputTokens: openai.Int(1)})
	case "models":
		pager := client.Models.ListAutoPaging(ctx)
		for pager.Next() {
		}
		err = pager.Err()
	default:
		return nil, fmt.Errorf("OpenAIGoError: unknown endpoint %q", endpoint)
	}
	var apiErr *openai.Error
	switch {
	case err == nil:
		return nil, fmt.Errorf("%s %s (model %q): the request succeeded", endpoint, baseURL, model)
	case !errors.As(err, &apiErr):
		return nil, fmt.Errorf("%s %s (model %q): not an API error: %T: %w", endpoint, baseURL, model, err, err)
	}
	return apiErr, nil
}
