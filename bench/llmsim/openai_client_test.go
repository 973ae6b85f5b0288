package llmsim

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAIGoClient drives the simulator with the official Go SDK, streamed and not.
func TestOpenAIGoClient(t *testing.T) {
	_, url := startOne(t, nil)
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello from the SDK")},
	}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content == "" || resp.Usage.CompletionTokens != 8 {
		t.Fatalf("response %+v", resp)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != resp.Choices[0].Message.Content {
		t.Fatalf("streamed %q, unstreamed %q (same seed and prompt)", acc.Choices[0].Message.Content, resp.Choices[0].Message.Content)
	}
	if acc.Usage.CompletionTokens != 8 || acc.Usage.PromptTokens == 0 {
		t.Fatalf("usage %+v", acc.Usage)
	}
	if chunks != 10 {
		t.Fatalf("%d chunks, want 8 tokens + finish + usage", chunks)
	}
	if _, err := client.Models.List(ctx); err != nil {
		t.Fatal(err)
	}
}
