package llmsim

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// responseObject is the part of a Responses API response object the tests read.
type responseObject struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	CreatedAt         int64  `json:"created_at"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Instructions *string `json:"instructions"`
	Output       []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Annotations []any  `json:"annotations"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens *int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

func (r *responseObject) text(t *testing.T) string {
	t.Helper()
	require.Len(t, r.Output, 1)
	require.Len(t, r.Output[0].Content, 1)
	return r.Output[0].Content[0].Text
}

// responseEvent is a Responses API stream event.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber *int            `json:"sequence_number"`
	ItemID         string          `json:"item_id"`
	OutputIndex    *int            `json:"output_index"`
	ContentIndex   *int            `json:"content_index"`
	Delta          string          `json:"delta"`
	Text           string          `json:"text"`
	Response       *responseObject `json:"response"`
	Item           json.RawMessage `json:"item"`
	Part           json.RawMessage `json:"part"`
}

func createResponse(t *testing.T, url, body string) responseObject {
	t.Helper()
	var out responseObject
	resp := postJSON(t, url, "/v1/responses", body, nil, &out)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return out
}

// The Responses and Messages APIs build the prompt chat builds for the same conversation:
// same prompt tokens, same cache blocks, same output for the seed.
func TestResponsesAndMessagesShareChatsGeneration(t *testing.T) {
	f, url := startOne(t, nil)
	system := "You answer in one word."
	user := strings.Repeat("a question that fills several cache blocks. ", 12)
	chat := chatWithSystem(t, url, system, user, "")
	require.Zero(t, chat.Usage.PromptTokensDetails.CachedTokens)
	prompt := chat.Usage.PromptTokens
	wantCached := (prompt - 1) / 16 * 16
	require.Positive(t, wantCached)

	sys, _ := json.Marshal(system)
	usr, _ := json.Marshal(user)
	for _, body := range []string{
		`{"model":"m","instructions":` + string(sys) + `,"input":` + string(usr) + `}`,
		`{"model":"m","instructions":` + string(sys) + `,"input":[{"role":"user","content":[{"type":"input_text","text":` + string(usr) + `}]}]}`,
		`{"model":"m","input":[{"type":"message","role":"system","content":` + string(sys) + `},{"role":"user","content":` + string(usr) + `}]}`,
	} {
		r := createResponse(t, url, body)
		require.Equal(t, "response", r.Object, body)
		require.True(t, strings.HasPrefix(r.ID, "resp_"), r.ID)
		require.Equal(t, "completed", r.Status)
		require.Equal(t, chat.Choices[0].Message.Content, r.text(t), "same prompt and seed, same output")
		require.Equal(t, prompt, r.Usage.InputTokens)
		require.Equal(t, wantCached, r.Usage.InputTokensDetails.CachedTokens, "repeated prompt hits the cache")
		require.Equal(t, chat.Usage.CompletionTokens, r.Usage.OutputTokens)
		require.Equal(t, r.Usage.InputTokens+r.Usage.OutputTokens, r.Usage.TotalTokens)
		require.NotNil(t, r.Usage.OutputTokensDetails.ReasoningTokens)
	}

	var msg anthropicMessage
	resp := postJSON(t, url, "/v1/messages", `{"model":"m","max_tokens":100,"system":`+string(sys)+`,"messages":[{"role":"user","content":`+string(usr)+`}]}`, nil, &msg)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, chat.Choices[0].Message.Content, msg.text(t))
	require.Equal(t, wantCached, msg.Usage.CacheReadInputTokens)
	require.Equal(t, prompt, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens)

	st := f.Stats(0)
	require.EqualValues(t, 5, st.Requests)
	require.EqualValues(t, 5, st.Completed)
	require.EqualValues(t, 5*prompt, st.PromptTokens)
	require.EqualValues(t, 4*wantCached, st.CachedTokens)
	require.EqualValues(t, 1, st.FullMisses)
}

func TestResponsesStreamEvents(t *testing.T) {
	_, url := startOne(t, nil)
	whole := createResponse(t, url, `{"model":"m","input":"stream me","instructions":"sys","temperature":0.5}`)
	require.NotNil(t, whole.Instructions)
	require.Equal(t, "sys", *whole.Instructions)

	evs, resp := postStream(t, url, "/v1/responses", `{"model":"m","input":"stream me","instructions":"sys","stream":true}`, nil)
	require.Equal(t, "miss", resp.Header.Get(CacheHeader)) // a prompt shorter than a block is never cached
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range 8 {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	require.Equal(t, want, types(evs))

	var deltas strings.Builder
	var done responseEvent
	itemID := ""
	for i, e := range evs {
		var ev responseEvent
		require.NoError(t, json.Unmarshal([]byte(e.data), &ev), e.data)
		require.Equal(t, e.typ, ev.Type, "data type matches the event name")
		require.NotNil(t, ev.SequenceNumber, e.data)
		require.Equal(t, i, *ev.SequenceNumber)
		switch ev.Type {
		case "response.created", "response.in_progress":
			require.Equal(t, "in_progress", ev.Response.Status)
			require.Empty(t, ev.Response.Output)
			require.Nil(t, ev.Response.Usage)
		case "response.output_item.added":
			var item struct{ ID, Status string }
			require.NoError(t, json.Unmarshal(ev.Item, &item))
			require.Equal(t, "in_progress", item.Status)
			itemID = item.ID
		case "response.output_text.delta":
			require.Equal(t, itemID, ev.ItemID)
			require.Equal(t, 0, *ev.OutputIndex)
			require.Equal(t, 0, *ev.ContentIndex)
			require.NotEmpty(t, ev.Delta)
			deltas.WriteString(ev.Delta)
		case "response.output_text.done":
			require.Equal(t, deltas.String(), ev.Text)
		case "response.completed":
			done = ev
		}
	}
	require.True(t, strings.HasPrefix(itemID, "msg_"), itemID)
	require.Equal(t, whole.text(t), deltas.String(), "streamed and whole outputs agree")
	require.Equal(t, "completed", done.Response.Status)
	require.Equal(t, deltas.String(), done.Response.text(t))
	require.Equal(t, 8, done.Response.Usage.OutputTokens)
	require.Equal(t, whole.Usage.InputTokens, done.Response.Usage.InputTokens)
	for _, e := range evs {
		require.NotEqual(t, "[DONE]", e.data)
	}
}

func TestResponsesMaxOutputTokensIsIncomplete(t *testing.T) {
	_, url := startOne(t, nil)
	r := createResponse(t, url, `{"model":"m","input":"x","max_output_tokens":3}`)
	require.Equal(t, "incomplete", r.Status)
	require.NotNil(t, r.IncompleteDetails)
	require.Equal(t, "max_output_tokens", r.IncompleteDetails.Reason)
	require.Equal(t, "incomplete", r.Output[0].Status)
	require.Equal(t, 3, r.Usage.OutputTokens)

	evs, _ := postStream(t, url, "/v1/responses", `{"model":"m","input":"x","max_output_tokens":3,"stream":true}`, nil)
	require.Equal(t, "response.incomplete", evs[len(evs)-1].typ)
	n := 0
	for _, e := range evs {
		if e.typ == "response.output_text.delta" {
			n++
		}
	}
	require.Equal(t, 3, n)
}

func TestResponsesErrors(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.Models = []string{"m"} })
	for _, tc := range []struct {
		name, body string
		status     int
		param      string
	}{
		{"bad json", `{"model":`, 400, ""},
		{"no model", `{"input":"x"}`, 400, "model"},
		{"unknown model", `{"model":"nope","input":"x"}`, 404, "model"},
		{"no input", `{"model":"m"}`, 400, "input"},
		{"empty input", `{"model":"m","input":""}`, 400, "input"},
		{"empty items", `{"model":"m","input":[]}`, 400, "input"},
		{"bad role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "input"},
		{"tool output item", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, 400, "input"},
		{"previous response", `{"model":"m","input":"x","previous_response_id":"resp_1"}`, 400, "previous_response_id"},
		{"conversation", `{"model":"m","input":"x","conversation":"conv_1"}`, 400, "conversation"},
		{"background", `{"model":"m","input":"x","background":true}`, 400, "background"},
		{"max_output_tokens 0", `{"model":"m","input":"x","max_output_tokens":0}`, 400, "max_output_tokens"},
		{"temperature", `{"model":"m","input":"x","temperature":2.5}`, 400, "temperature"},
		{"top_p", `{"model":"m","input":"x","top_p":1.5}`, 400, "top_p"},
		{"json schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s","schema":{}}}}`, 400, "text.format"},
		{"forced tool", `{"model":"m","input":"x","tool_choice":"required"}`, 400, "tool_choice"},
		{"logprobs", `{"model":"m","input":"x","top_logprobs":2}`, 400, "top_logprobs"},
		{"include logprobs", `{"model":"m","input":"x","include":["message.output_text.logprobs"]}`, 400, "include"},
		{"stream_options without stream", `{"model":"m","input":"x","stream_options":{"include_obfuscation":false}}`, 400, "stream_options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, context.Background(), newClient(), url+"/v1/responses", tc.body, nil)
			require.Equal(t, tc.status, resp.StatusCode)
			e := readAPIError(t, resp)
			if tc.param != "" {
				require.NotNil(t, e.Error.Param)
				require.Equal(t, tc.param, *e.Error.Param)
			}
		})
	}
	// Fields OpenAI accepts that change nothing here are accepted.
	r := createResponse(t, url, `{"model":"m","input":"x","user":"u","metadata":{"k":"v"},"store":true,"parallel_tool_calls":false,"truncation":"auto","reasoning":{"effort":"low"},"include":["reasoning.encrypted_content"],"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[{"type":"function","name":"f","parameters":{}}],"prompt_cache_key":"k","safety_identifier":"s","service_tier":"auto"}`)
	require.Equal(t, "completed", r.Status)
}

func TestResponsesFaults(t *testing.T) {
	f, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/responses", `{"model":"m","input":"x"}`, faultHdr("status=503"))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	e := readAPIError(t, resp)
	require.Equal(t, "injected_fault", *e.Error.Code)

	// reset-after counts every event, the lifecycle events included.
	resp = post(t, context.Background(), newClient(), url+"/v1/responses", `{"model":"m","input":"x","stream":true}`, faultHdr("reset-after=6"))
	evs, err := scanEvents(resp.Body)
	resp.Body.Close()
	require.Error(t, err)
	require.Len(t, evs, 6)

	// drop-done leaves out the terminal response.completed.
	evs, _ = postStream(t, url, "/v1/responses", `{"model":"m","input":"x","stream":true}`, faultHdr("drop-done"))
	require.Equal(t, "response.output_item.done", evs[len(evs)-1].typ)

	// repeat makes every delta the same token.
	evs, _ = postStream(t, url, "/v1/responses", `{"model":"m","input":"x","stream":true}`, faultHdr("repeat"))
	var first string
	for _, e := range evs {
		if e.typ != "response.output_text.delta" {
			continue
		}
		var ev responseEvent
		require.NoError(t, json.Unmarshal([]byte(e.data), &ev))
		if first == "" {
			first = ev.Delta
		}
		require.Equal(t, first, ev.Delta)
	}
	require.EqualValues(t, 4, f.Stats(0).Faults)
}

// A Responses or Messages stream whose client leaves stops generating at once.
func TestNewAPIsClientDisconnect(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"m","input":"x","stream":true}`},
		{"/v1/messages", `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"x"}],"stream":true}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			f, url := startOne(t, func(ic *InstanceConfig) {
				ic.ITL = Duration(20 * time.Millisecond)
				ic.Tokens = 1000
			})
			ctx, cancel := context.WithCancel(context.Background())
			resp := post(t, ctx, newClient(), url+tc.path, tc.body, nil)
			got := make(chan struct{}, 2000)
			go readEvents(resp.Body, func(sseEvent) { got <- struct{}{} })
			for range 6 { // the opening events and a few deltas
				select {
				case <-got:
				case <-time.After(5 * time.Second):
					require.FailNow(t, "no event")
				}
			}
			cancel()
			resp.Body.Close()
			// The abort is counted as the stream stops, and its running slot is given back just
			// after: wait for both.
			waitFor(t, "aborted counted, slot freed", 5*time.Second, func() bool {
				st := f.Stats(0)
				return st.Aborted == 1 && st.Running == 0
			})
			require.Less(t, f.Stats(0).CompletionTokens, int64(100))
		})
	}
}
