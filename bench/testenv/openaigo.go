package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// GoCheckResult is what OpenAIGoCheck measured.
type GoCheckResult struct {
	// NonStreamContent is the message content of the non-streaming completion.
	NonStreamContent string
	// NonStreamUsage is its usage (tokens).
	NonStreamUsage openai.CompletionUsage
	// StreamContent is the concatenated delta content of the streaming completion.
	StreamContent string
	// StreamChunks counts all chunks; StreamContentChunks those with non-empty delta content.
	StreamChunks, StreamContentChunks int
	// StreamUsage is the usage chunk's usage (tokens).
	StreamUsage openai.CompletionUsage
	// TTFT is the time from the streaming request to its first content chunk.
	TTFT time.Duration
	// NonStreamTime and StreamTime are the wall times of the two requests.
	NonStreamTime, StreamTime time.Duration
}

// doneLineRE matches a `data: [DONE]` line of an SSE stream (WHATWG SSE: the space after the
// colon is optional; lines end in CR, LF or CRLF).
var doneLineRE = regexp.MustCompile(`[\r\n]data: ?\[DONE\]`)

// doneProbe passes an SSE body through and records whether a `data: [DONE]` line went by.
type doneProbe struct {
	io.ReadCloser
	tail []byte
	seen *atomic.Bool
}

func (d *doneProbe) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if n > 0 && !d.seen.Load() {
		buf := append(d.tail, p[:n]...)
		if doneLineRE.Match(buf) {
			d.seen.Store(true)
		}
		if len(buf) > 16 {
			buf = buf[len(buf)-16:]
		}
		d.tail = append(d.tail[:0], buf...)
	}
	return n, err
}

// newGoClient is an openai-go client of baseURL over transport, without retries, sending
// "sk-test" as its key unless opts say otherwise. With sawDone, SSE bodies are watched for a
// `data: [DONE]` line.
func newGoClient(baseURL string, transport *http.Transport, sawDone *atomic.Bool, opts []option.RequestOption) openai.Client {
	all := []option.RequestOption{
		option.WithBaseURL(baseURL),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: transport}),
	}
	if sawDone != nil {
		all = append(all, option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			if err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				resp.Body = &doneProbe{ReadCloser: resp.Body, tail: []byte{'\n'}, seen: sawDone}
			}
			return resp, err
		}))
	}
	return openai.NewClient(append(all, opts...)...)
}

func checkUsage(u openai.CompletionUsage, where string) error {
	if !u.JSON.TotalTokens.Valid() || !u.JSON.PromptTokens.Valid() || !u.JSON.CompletionTokens.Valid() {
		return fmt.Errorf("%s: usage missing or incomplete: %s", where, u.RawJSON())
	}
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		return fmt.Errorf("%s: usage inconsistent: %s", where, u.RawJSON())
	}
	return nil
}

// OpenAIGoCheck runs github.com/openai/openai-go/v3 against baseURL (an OpenAI base URL such as
// "http://127.0.0.1:8080/v1") for model: one non-streaming chat completion and one streaming chat
// completion with stream_options.include_usage, 16 max_tokens each, no retries. It checks that
// content is non-empty, finish_reason is set, usage is present and consistent
// (total = prompt + completion > 0), and that the stream ended without an error after a
// `data: [DONE]` line (openai-go itself ends quietly at EOF too, so the raw body is watched).
// opts go after the check's own options (so option.WithAPIKey replaces its "sk-test").
// Any failed check or transport error is returned; ctx bounds the whole check.
func OpenAIGoCheck(ctx context.Context, baseURL, model string, opts ...option.RequestOption) (GoCheckResult, error) {
	var res GoCheckResult
	var sawDone atomic.Bool
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := newGoClient(baseURL, transport, &sawDone, opts)
	params := openai.ChatCompletionNewParams{
		Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a test."),
			openai.UserMessage("Say something."),
		},
		MaxTokens: openai.Int(16),
	}

	// 1. Non-streaming.
	start := time.Now()
	c, err := client.Chat.Completions.New(ctx, params)
	res.NonStreamTime = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("non-stream: %w", err)
	}
	if len(c.Choices) != 1 {
		return res, fmt.Errorf("non-stream: %d choices: %s", len(c.Choices), c.RawJSON())
	}
	res.NonStreamContent = c.Choices[0].Message.Content
	if res.NonStreamContent == "" {
		return res, fmt.Errorf("non-stream: empty content: %s", c.RawJSON())
	}
	if c.Choices[0].FinishReason == "" {
		return res, fmt.Errorf("non-stream: no finish_reason: %s", c.RawJSON())
	}
	res.NonStreamUsage = c.Usage
	if err := checkUsage(c.Usage, "non-stream"); err != nil {
		return res, err
	}

	// 2. Streaming with include_usage.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	start = time.Now()
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var text strings.Builder
	finish := ""
	usageSeen := false
	for stream.Next() {
		chunk := stream.Current()
		res.StreamChunks++
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				if res.StreamContentChunks == 0 {
					res.TTFT = time.Since(start)
				}
				res.StreamContentChunks++
				text.WriteString(ch.Delta.Content)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
		if chunk.JSON.Usage.Valid() {
			res.StreamUsage = chunk.Usage
			usageSeen = true
		}
	}
	res.StreamTime = time.Since(start)
	res.StreamContent = text.String()
	if err := stream.Err(); err != nil {
		return res, fmt.Errorf("stream: %w", err)
	}
	switch {
	case !sawDone.Load():
		return res, errors.New("stream: ended without a data: [DONE] line")
	case res.StreamContent == "":
		return res, fmt.Errorf("stream: empty content in %d chunks", res.StreamChunks)
	case finish == "":
		return res, errors.New("stream: no chunk with finish_reason")
	case !usageSeen:
		return res, errors.New("stream: no usage chunk despite stream_options.include_usage")
	}
	if err := checkUsage(res.StreamUsage, "stream"); err != nil {
		return res, err
	}
	if res.StreamUsage.CompletionTokens < int64(res.StreamContentChunks) {
		return res, fmt.Errorf("stream: usage.completion_tokens %d < %d content chunks", res.StreamUsage.CompletionTokens, res.StreamContentChunks)
	}
	return res, nil
}

// RunOpenAIGoCheck is OpenAIGoCheck with a 60 s deadline that fails t on any failure and logs
// the measurements on success.
func RunOpenAIGoCheck(t testing.TB, baseURL, model string, opts ...option.RequestOption) GoCheckResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := OpenAIGoCheck(ctx, baseURL, model, opts...)
	if err != nil {
		t.Fatalf("openai-go check against %s (model %q): %v", baseURL, model, err)
	}
	t.Logf("openai-go check: non-stream %v (%d chars, usage %d+%d), stream %v TTFT %v (%d chunks, %d content, usage %d+%d)",
		res.NonStreamTime.Round(time.Microsecond), len(res.NonStreamContent), res.NonStreamUsage.PromptTokens, res.NonStreamUsage.CompletionTokens,
		res.StreamTime.Round(time.Microsecond), res.TTFT.Round(time.Microsecond), res.StreamChunks, res.StreamContentChunks,
		res.StreamUsage.PromptTokens, res.StreamUsage.CompletionTokens)
	return res
}

// GoResponsesResult is what OpenAIGoResponsesCheck measured.
type GoResponsesResult struct {
	// NonStreamText and StreamText are the output texts of the two requests.
	NonStreamText, StreamText string
	// Events counts the stream's events; Deltas its response.output_text.delta events.
	Events, Deltas int
	// NonStreamUsage and StreamUsage are the responses' usage.
	NonStreamUsage, StreamUsage responses.ResponseUsage
}

func checkResponseUsage(u responses.ResponseUsage, where string) error {
	if !u.JSON.InputTokens.Valid() || !u.JSON.OutputTokens.Valid() || !u.JSON.TotalTokens.Valid() || !u.InputTokensDetails.JSON.CachedTokens.Valid() {
		return fmt.Errorf("%s: usage missing or incomplete: %s", where, u.RawJSON())
	}
	if u.InputTokens <= 0 || u.OutputTokens <= 0 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		return fmt.Errorf("%s: usage inconsistent: %s", where, u.RawJSON())
	}
	return nil
}

// OpenAIGoResponsesCheck runs openai-go's Responses client against baseURL (an OpenAI base URL
// such as "http://127.0.0.1:8080/v1") for model: one non-streaming and one streaming
// response to the same instructions and input, no retries. It checks that the response is
// completed with a non-empty output text and consistent usage, that the stream's events
// have consecutive sequence numbers from 0, start with response.created and end with
// response.completed, that the deltas make the completed response's text, and that both
// texts agree (same prompt). opts go after the check's own options (option.WithAPIKey
// replaces its "sk-test"). Any failed check or transport error is returned; ctx bounds the
// whole check.
func OpenAIGoResponsesCheck(ctx context.Context, baseURL, model string, opts ...option.RequestOption) (GoResponsesResult, error) {
	var res GoResponsesResult
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := newGoClient(baseURL, transport, nil, opts)
	params := responses.ResponseNewParams{
		Model:        model,
		Instructions: openai.String("You are a test."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Say something.")},
	}
	r, err := client.Responses.New(ctx, params)
	if err != nil {
		return res, fmt.Errorf("non-stream: %w", err)
	}
	res.NonStreamText, res.NonStreamUsage = r.OutputText(), r.Usage
	switch {
	case r.Status != responses.ResponseStatusCompleted:
		return res, fmt.Errorf("non-stream: status %q: %s", r.Status, r.RawJSON())
	case res.NonStreamText == "":
		return res, fmt.Errorf("non-stream: empty output text: %s", r.RawJSON())
	}
	if err := checkResponseUsage(r.Usage, "non-stream"); err != nil {
		return res, err
	}

	stream := client.Responses.NewStreaming(ctx, params)
	defer stream.Close()
	var text strings.Builder
	var completed *responses.Response
	first, last := "", ""
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(res.Events) {
			return res, fmt.Errorf("stream: event %d (%s) has sequence_number %d", res.Events, ev.Type, ev.SequenceNumber)
		}
		if res.Events == 0 {
			first = ev.Type
		}
		last = ev.Type
		res.Events++
		switch ev.Type {
		case "response.output_text.delta":
			res.Deltas++
			text.WriteString(ev.Delta)
		case "response.completed":
			c := ev.Response
			completed = &c
		}
	}
	if err := stream.Err(); err != nil {
		return res, fmt.Errorf("stream: %w", err)
	}
	res.StreamText = text.String()
	switch {
	case first != "response.created" || last != "response.completed":
		return res, fmt.Errorf("stream: events from %q to %q, want response.created to response.completed", first, last)
	case completed == nil:
		return res, errors.New("stream: no response.completed")
	case completed.OutputText() != res.StreamText:
		return res, fmt.Errorf("stream: deltas make %q, response.completed says %q", res.StreamText, completed.OutputText())
	case res.StreamText != res.NonStreamText:
		return res, fmt.Errorf("stream: text %q differs from the non-streamed %q", res.StreamText, res.NonStreamText)
	}
	res.StreamUsage = completed.Usage
	if err := checkResponseUsage(completed.Usage, "stream"); err != nil {
		return res, err
	}
	return res, nil
}

// RunOpenAIGoResponsesCheck is OpenAIGoResponsesCheck with a 60 s deadline that fails t on
// any failure and logs the measurements on success.
func RunOpenAIGoResponsesCheck(t testing.TB, baseURL, model string, opts ...option.RequestOption) GoResponsesResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := OpenAIGoResponsesCheck(ctx, baseURL, model, opts...)
	if err != nil {
		t.Fatalf("openai-go responses check against %s (model %q): %v", baseURL, model, err)
	}
	t.Logf("openai-go responses check: %d chars, %d events (%d deltas), usage %d+%d",
		len(res.NonStreamText), res.Events, res.Deltas, res.StreamUsage.InputTokens, res.StreamUsage.OutputTokens)
	return res
}
