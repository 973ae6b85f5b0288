package llmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// windowInstance is testInstance with a context window of limit tokens and the default
// prefill cost (100 µs per uncached token), as a real prompt pays it once admitted.
func windowInstance(limit int) func(*InstanceConfig) {
	return func(ic *InstanceConfig) {
		ic.MaxModelLen = limit
		ic.PerUncachedToken = Duration(defaultPerUncachedToken)
	}
}

// windowCase is one generation endpoint's request with a user prompt of some bytes and an
// output cap (0: none; Messages, where max_tokens is required, sends 1).
type windowCase struct {
	name, path, promptParam, capParam string
	body                              func(text string, capTok int) string
	prompt                            func(text string) []byte // what llmsim counts
}

var windowCases = []windowCase{
	{"chat", "/v1/chat/completions", "messages", "max_tokens",
		func(text string, capTok int) string {
			return chatBody(text, false, capField("max_tokens", capTok))
		},
		func(text string) []byte { return chatPromptOf("", text) }},
	{"chat max_completion_tokens", "/v1/chat/completions", "messages", "max_completion_tokens",
		func(text string, capTok int) string {
			return chatBody(text, true, capField("max_completion_tokens", capTok))
		},
		func(text string) []byte { return chatPromptOf("", text) }},
	{"completions", "/v1/completions", "prompt", "max_tokens",
		func(text string, capTok int) string {
			b, _ := json.Marshal(text)
			return `{"model":"m","prompt":` + string(b) + withCap("max_tokens", capTok) + `}`
		},
		func(text string) []byte { return []byte(text) }},
	{"responses", "/v1/responses", "input", "max_output_tokens",
		func(text string, capTok int) string {
			b, _ := json.Marshal(text)
			return `{"model":"m","instructions":"be brief","input":` + string(b) + withCap("max_output_tokens", capTok) + `}`
		},
		func(text string) []byte { return chatPromptOf("be brief", text) }},
	{"messages", "/v1/messages", "messages", "max_tokens",
		func(text string, capTok int) string {
			b, _ := json.Marshal(text)
			return `{"model":"m","max_tokens":` + strconv.Itoa(max(capTok, 1)) + `,"stream":true,"messages":[{"role":"user","content":` + string(b) + `}]}`
		},
		func(text string) []byte { return chatPromptOf("", text) }},
}

func capField(name string, capTok int) string {
	if capTok == 0 {
		return ""
	}
	return `"` + name + `":` + strconv.Itoa(capTok)
}

func withCap(name string, capTok int) string {
	if capTok == 0 {
		return ""
	}
	return "," + capField(name, capTok)
}

// chatPromptOf is the prompt llmsim serialises for an optional system message and one user
// message.
func chatPromptOf(system, user string) []byte {
	var msgs []chatMessage
	if system != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: mustJSON(system)})
	}
	msgs = append(msgs, chatMessage{Role: "user", Content: mustJSON(user)})
	return appendChatPrompt(nil, msgs, nil)
}

func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// textOfTokens returns a user text whose prompt, as tc serialises it, is exactly n tokens.
func textOfTokens(t *testing.T, tc windowCase, n int) string {
	t.Helper()
	overhead := len(tc.prompt(""))
	text := strings.Repeat("w", 4*n-overhead)
	require.Equal(t, n, CountTokens(len(tc.prompt(text))), "%s: prompt size", tc.name)
	return text
}

// windowRefusal is what a refusal by the window says, whatever the API's error shape.
type windowRefusal struct {
	errType, message string
	param, code      *string // nil on /v1/messages (Anthropic's shape has neither)
}

func readWindowRefusal(t *testing.T, tc windowCase, resp *http.Response) windowRefusal {
	t.Helper()
	if tc.path == "/v1/messages" {
		e := readAnthropicError(t, resp)
		return windowRefusal{errType: e.Error.Type, message: e.Error.Message}
	}
	e := readAPIError(t, resp)
	return windowRefusal{errType: e.Error.Type, message: e.Error.Message, param: e.Error.Param, code: e.Error.Code}
}

// A request that does not fit the context window is refused with a 400, on every generation
// endpoint, before admission: it takes no queue slot and no prefill. A prompt of the window's
// size leaves no room for output; a prompt plus its output cap over the window is refused
// naming the cap. A request that fits is served.
func TestContextWindowRefusesBeforeAdmission(t *testing.T) {
	const limit = 1000
	for _, tc := range windowCases {
		t.Run(tc.name, func(t *testing.T) {
			f, url := startOne(t, windowInstance(limit))
			c := newClient()
			for _, over := range []struct {
				name            string
				prompt, capTok  int
				param, wantText string
			}{
				{"prompt fills the window", limit, 0, tc.promptParam,
					"This model's maximum context length is 1000 tokens. However, your request has 1000 input tokens. Please reduce the length of the input messages."},
				{"prompt over the window", 5 * limit, 0, tc.promptParam,
					"This model's maximum context length is 1000 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages."},
				{"prompt and cap over the window", 900, 101, tc.capParam,
					"'" + tc.capParam + "' is too large: 101. This model's maximum context length is 1000 tokens and your request has 900 input tokens (101 > 1000 - 900)."},
			} {
				body := tc.body(textOfTokens(t, tc, over.prompt), over.capTok)
				resp := post(t, context.Background(), c, url+tc.path, body, nil)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, over.name)
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"), over.name)
				e := readWindowRefusal(t, tc, resp)
				require.Equal(t, "invalid_request_error", e.errType, over.name)
				require.Equal(t, over.wantText, e.message, over.name)
				if tc.path != "/v1/messages" {
					require.NotNil(t, e.param, over.name)
					require.Equal(t, over.param, *e.param, over.name)
					require.NotNil(t, e.code, over.name)
					require.Equal(t, "context_length_exceeded", *e.code, over.name)
				}
			}
			// Refused before admission: nothing was queued or prefilled.
			st := f.Stats(0)
			require.EqualValues(t, 3, st.Requests)
			require.Zero(t, st.PromptTokens, "prompt tokens admitted")
			require.Zero(t, st.Running+st.Waiting)

			// The largest request that fits: the prompt and its cap fill the window exactly.
			body := tc.body(textOfTokens(t, tc, limit-10), 10)
			resp := post(t, context.Background(), c, url+tc.path, body, nil)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			require.Eventually(t, func() bool { return f.Stats(0).Completed == 1 }, 5*time.Second, time.Millisecond)
			require.EqualValues(t, limit-10, f.Stats(0).PromptTokens)
		})
	}
}

// The default window (131,072 tokens, as /v1/models reports it) refuses a prompt of a few
// MiB at once with a 400, on every generation endpoint, instead of prefilling it for minutes
// at the default 100 µs per token and answering after a gateway's timeout.
func TestDefaultContextWindowRefusesHugePrompt(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) { ic.PerUncachedToken = Duration(defaultPerUncachedToken) })
	c := newClient()
	var models struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	require.Equal(t, 200, getJSON(t, c, url+"/v1/models", &models))
	require.Equal(t, 131072, models.Data[0].MaxModelLen)
	huge := strings.Repeat("lorem ipsum ", 350_000) // 4.2 MB: 1,050,000 tokens, 105 s of prefill
	for _, tc := range windowCases {
		n := CountTokens(len(tc.prompt(huge)))
		resp := post(t, context.Background(), c, url+tc.path, tc.body(huge, 0), nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.name)
		e := readWindowRefusal(t, tc, resp)
		require.Equal(t, "This model's maximum context length is 131072 tokens. However, your request has "+
			strconv.Itoa(n)+" input tokens. Please reduce the length of the input messages.", e.message, tc.name)
	}
	require.Zero(t, f.Stats(0).PromptTokens, "prompt tokens admitted")
}

// --max-model-len 0 removes the window: a prompt and cap far over the default are served,
// and /v1/models reports no max_model_len.
func TestContextWindowZeroDisablesIt(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) { ic.MaxModelLen = 0 })
	c := newClient()
	huge := strings.Repeat("w", 4*200_000) // 200,000 tokens
	for _, tc := range windowCases {
		resp := post(t, context.Background(), c, url+tc.path, tc.body(huge, 300_000), nil)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", tc.name, b)
	}
	require.Eventually(t, func() bool { return f.Stats(0).Completed == int64(len(windowCases)) }, 5*time.Second, time.Millisecond)
	var models struct {
		Data []map[string]any `json:"data"`
	}
	require.Equal(t, 200, getJSON(t, c, url+"/v1/models", &models))
	require.NotContains(t, models.Data[0], "max_model_len")
	var model map[string]any
	require.Equal(t, 200, getJSON(t, c, url+"/v1/models/m", &model))
	require.NotContains(t, model, "max_model_len")
}

// Embeddings: each input is one sequence and may fill the window (no output); a longer one
// is refused, naming input.
func TestContextWindowEmbeddings(t *testing.T) {
	const limit = 100
	f, url := startOne(t, windowInstance(limit))
	c := newClient()
	var model struct {
		MaxModelLen int `json:"max_model_len"`
	}
	require.Equal(t, 200, getJSON(t, c, url+"/v1/models/m", &model))
	require.Equal(t, limit, model.MaxModelLen)

	fits := strings.Repeat("e", 4*limit)
	resp := post(t, context.Background(), c, url+"/v1/embeddings", `{"model":"m","input":["short","`+fits+`"]}`, nil)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	resp = post(t, context.Background(), c, url+"/v1/embeddings", `{"model":"m","input":["short","`+fits+`e"]}`, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	e := readAPIError(t, resp)
	require.Equal(t, "This model's maximum context length is 100 tokens. However, you requested 101 tokens in the input for embedding generation (input 1). Please reduce the length of the input.", e.Error.Message)
	require.NotNil(t, e.Error.Param)
	require.Equal(t, "input", *e.Error.Param)
	require.NotNil(t, e.Error.Code)
	require.Equal(t, "context_length_exceeded", *e.Error.Code)
	require.EqualValues(t, limit+2, f.Stats(0).PromptTokens, "only the request that fits was admitted")
}
