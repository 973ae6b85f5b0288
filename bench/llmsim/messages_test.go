package llmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// anthropicMessage is the part of a Messages API message the tests read.
type anthropicMessage struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens          int `json:"input_tokens"`
		OutputTokens         int `json:"output_tokens"`
		CacheReadInputTokens int `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

func (m *anthropicMessage) text(t *testing.T) string {
	t.Helper()
	require.Len(t, m.Content, 1)
	require.Equal(t, "text", m.Content[0].Type)
	return m.Content[0].Text
}

// anthropicEvent is a Messages API stream event.
type anthropicEvent struct {
	Type    string            `json:"type"`
	Index   *int              `json:"index"`
	Message *anthropicMessage `json:"message"`
	Delta   struct {
		Type         string  `json:"type"`
		Text         string  `json:"text"`
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *struct {
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func readAnthropicError(t *testing.T, resp *http.Response) anthropicError {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e anthropicError
	require.NoErrorf(t, json.Unmarshal(b, &e), "%s", b)
	require.Equalf(t, "error", e.Type, "%s", b)
	require.NotEmptyf(t, e.Error.Type, "%s", b)
	require.NotEmptyf(t, e.Error.Message, "%s", b)
	return e
}

func TestMessagesWholeAndStream(t *testing.T) {
	_, url := startOne(t, nil)
	body := `{"model":"m","max_tokens":100,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]},{"role":"assistant","content":"hi"},{"role":"user","content":"again"}]}`
	var msg anthropicMessage
	resp := postJSON(t, url, "/v1/messages", body, nil, &msg)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
	require.Equal(t, "message", msg.Type)
	require.Equal(t, "assistant", msg.Role)
	require.Equal(t, "m", msg.Model)
	require.Equal(t, "end_turn", *msg.StopReason)
	require.Nil(t, msg.StopSequence)
	require.Equal(t, 8, msg.Usage.OutputTokens)
	text := msg.text(t)

	// The same conversation through chat is the same prompt.
	chat := doCompletion(t, newClient(), url, "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hello"},{"role":"assistant","content":"hi"},{"role":"user","content":"again"}]}`)
	require.Equal(t, text, chat.Choices[0].Message.Content)
	require.Equal(t, chat.Usage.PromptTokens, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens)

	evs, _ := postStream(t, url, "/v1/messages", strings.Replace(body, `"max_tokens":100`, `"max_tokens":100,"stream":true`, 1), nil)
	want := []string{"message_start", "content_block_start", "ping"}
	for range 8 {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	require.Equal(t, want, types(evs))
	var deltas strings.Builder
	for _, e := range evs {
		var ev anthropicEvent
		require.NoError(t, json.Unmarshal([]byte(e.data), &ev), e.data)
		require.Equal(t, e.typ, ev.Type)
		switch ev.Type {
		case "message_start":
			require.Empty(t, ev.Message.Content)
			require.Nil(t, ev.Message.StopReason)
			require.Equal(t, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens, ev.Message.Usage.InputTokens+ev.Message.Usage.CacheReadInputTokens)
		case "content_block_start", "content_block_stop":
			require.Equal(t, 0, *ev.Index)
		case "content_block_delta":
			require.Equal(t, 0, *ev.Index)
			require.Equal(t, "text_delta", ev.Delta.Type)
			deltas.WriteString(ev.Delta.Text)
		case "message_delta":
			require.Equal(t, "end_turn", *ev.Delta.StopReason)
			require.Nil(t, ev.Delta.StopSequence)
			require.Equal(t, 8, ev.Usage.OutputTokens)
		}
	}
	require.Equal(t, text, deltas.String())

	var capped anthropicMessage
	postJSON(t, url, "/v1/messages", strings.Replace(body, `"max_tokens":100`, `"max_tokens":3`, 1), nil, &capped)
	require.Equal(t, "max_tokens", *capped.StopReason)
	require.Equal(t, 3, capped.Usage.OutputTokens)
}

func TestMessagesErrors(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.Models = []string{"m"} })
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct {
		name, body, errType, mentions string
		status                        int
	}{
		{"bad json", `{"model":`, "invalid_request_error", "JSON", 400},
		{"no max_tokens", `{"model":"m",` + msgs + `}`, "invalid_request_error", "max_tokens", 400},
		{"max_tokens 0", `{"model":"m","max_tokens":0,` + msgs + `}`, "invalid_request_error", "max_tokens", 400},
		{"no model", `{"max_tokens":5,` + msgs + `}`, "invalid_request_error", "model", 400},
		{"unknown model", `{"model":"nope","max_tokens":5,` + msgs + `}`, "not_found_error", "nope", 404},
		{"no messages", `{"model":"m","max_tokens":5,"messages":[]}`, "invalid_request_error", "messages", 400},
		{"system role", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "invalid_request_error", "role", 400},
		{"bad content", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}`, "invalid_request_error", "content", 400},
		{"bad system", `{"model":"m","max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, "invalid_request_error", "system", 400},
		{"temperature", `{"model":"m","max_tokens":5,"temperature":1.5,` + msgs + `}`, "invalid_request_error", "temperature", 400},
		{"empty stop", `{"model":"m","max_tokens":5,"stop_sequences":[""],` + msgs + `}`, "invalid_request_error", "stop_sequences", 400},
		{"forced tool", `{"model":"m","max_tokens":5,"tool_choice":{"type":"any"},` + msgs + `}`, "invalid_request_error", "tool_choice", 400},
		{"thinking", `{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":1024},` + msgs + `}`, "invalid_request_error", "thinking", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, context.Background(), newClient(), url+"/v1/messages", tc.body, nil)
			require.Equal(t, tc.status, resp.StatusCode)
			e := readAnthropicError(t, resp)
			require.Equal(t, tc.errType, e.Error.Type)
			require.Contains(t, e.Error.Message, tc.mentions)
		})
	}
	resp, err := newClient().Get(url + "/v1/messages")
	require.NoError(t, err)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	readAnthropicError(t, resp)
}

func TestMessagesFaultsHaveAnthropicShape(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.MaxRunning = 1
		ic.MaxWaiting = 0
	})
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
	for _, tc := range []struct {
		fault   string
		status  int
		errType string
	}{
		{"status=429", 429, "rate_limit_error"},
		{"status=529", 529, "overloaded_error"},
		{"status=500", 500, "api_error"},
		{"bogus", 400, "invalid_request_error"},
	} {
		resp := post(t, context.Background(), newClient(), url+"/v1/messages", body, faultHdr(tc.fault))
		require.Equal(t, tc.status, resp.StatusCode, tc.fault)
		require.Equal(t, tc.errType, readAnthropicError(t, resp).Error.Type, tc.fault)
	}

	// A full queue is a 429 in Anthropic's shape: one stalled stream holds the only slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := post(t, ctx, newClient(), url+"/v1/messages", strings.Replace(body, `"max_tokens":5`, `"max_tokens":5,"stream":true`, 1), faultHdr("stall-after=1"))
	defer held.Body.Close()
	waitFor(t, "slot held", 5*time.Second, func() bool { return f.Stats(0).Running == 1 })
	resp := post(t, context.Background(), newClient(), url+"/v1/messages", body, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, "rate_limit_error", readAnthropicError(t, resp).Error.Type)

	// reset-after counts the opening events; drop-done leaves out message_stop.
	cancel()
	waitFor(t, "slot freed", 5*time.Second, func() bool { return f.Stats(0).Running == 0 })
	stream := strings.Replace(body, `"max_tokens":5`, `"max_tokens":5,"stream":true`, 1)
	resp = post(t, context.Background(), newClient(), url+"/v1/messages", stream, faultHdr("reset-after=4"))
	evs, err := scanEvents(resp.Body)
	resp.Body.Close()
	require.Error(t, err)
	require.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta"}, types(evs))
	// The reset reaches the client before the handler has given its slot back.
	waitFor(t, "slot freed after the reset", 5*time.Second, func() bool { return f.Stats(0).Running == 0 })
	evs, _ = postStream(t, url, "/v1/messages", stream, faultHdr("drop-done"))
	require.Equal(t, "message_delta", evs[len(evs)-1].typ)
}

// The per-instance fault rate and the request seed apply to the Responses and Messages APIs
// as to chat.
func TestNewAPIsFaultRateAndSeed(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.FaultRate = 1
		ic.Fault = "status=529"
	})
	resp := post(t, context.Background(), newClient(), url+"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, nil)
	require.Equal(t, 529, resp.StatusCode)
	require.Equal(t, "overloaded_error", readAnthropicError(t, resp).Error.Type)
	resp = post(t, context.Background(), newClient(), url+"/v1/responses", `{"model":"m","input":"x"}`, nil)
	require.Equal(t, 529, resp.StatusCode)
	readAPIError(t, resp)
	require.EqualValues(t, 2, f.Stats(0).Faults)

	_, url1 := startOne(t, nil)
	_, url2 := startOne(t, nil)
	r1 := createResponse(t, url1, `{"model":"m","input":"x","seed":1}`)
	r2 := createResponse(t, url2, `{"model":"m","input":"x","seed":1}`)
	r3 := createResponse(t, url1, `{"model":"m","input":"x","seed":2}`)
	a := r1.text(t)
	require.Equal(t, a, r2.text(t), "same seed, same output on every instance")
	require.NotEqual(t, a, r3.text(t))
	var m1, m2 anthropicMessage
	postJSON(t, url1, "/v1/messages", `{"model":"m","max_tokens":50,"seed":1,"messages":[{"role":"user","content":"x"}]}`, nil, &m1)
	postJSON(t, url2, "/v1/messages", `{"model":"m","max_tokens":50,"seed":1,"messages":[{"role":"user","content":"x"}]}`, nil, &m2)
	require.Equal(t, m1.text(t), m2.text(t))
	require.Equal(t, a, m1.text(t), "a Responses string input and a Messages user message are one prompt")
}
