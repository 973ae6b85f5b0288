package llmsim

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// embeddingsResponse decodes /v1/embeddings with the embedding left raw (numbers or base64).
type embeddingsResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func embed(t *testing.T, url, body string) embeddingsResponse {
	t.Helper()
	var out embeddingsResponse
	resp := postJSON(t, url, "/v1/embeddings", body, nil, &out)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return out
}

func TestEmbeddingsEncodings(t *testing.T) {
	_, url := startOne(t, nil)
	const input = `"input":["first text","second"],"dimensions":16`
	floats := embed(t, url, `{"model":"m",`+input+`}`)
	explicit := embed(t, url, `{"model":"m",`+input+`,"encoding_format":"float"}`)
	b64 := embed(t, url, `{"model":"m",`+input+`,"encoding_format":"base64"}`)
	require.Len(t, floats.Data, 2)
	require.Len(t, b64.Data, 2)
	require.Equal(t, floats, explicit)
	require.Equal(t, floats.Usage, b64.Usage)
	for i := range floats.Data {
		var fs []float64
		require.NoError(t, json.Unmarshal(floats.Data[i].Embedding, &fs))
		require.Len(t, fs, 16)
		var s string
		require.NoError(t, json.Unmarshal(b64.Data[i].Embedding, &s), "base64 embeddings are strings")
		raw, err := base64.StdEncoding.DecodeString(s)
		require.NoError(t, err)
		require.Len(t, raw, 16*4, "little-endian float32 values")
		var norm float64
		for j, f := range fs {
			v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			require.Equal(t, f, float64(v), "float %d: the JSON number is the float32 value exactly", j)
			norm += f * f
		}
		require.InDelta(t, 1, norm, 1e-5, "unit vector")
	}
	require.NotEqual(t, floats.Data[0].Embedding, floats.Data[1].Embedding)

	// Token id inputs: one array is one input, an array of arrays one input each.
	toks := embed(t, url, `{"model":"m","input":[[1,2,3],[4]],"encoding_format":"base64"}`)
	require.Len(t, toks.Data, 2)
	require.Equal(t, 4, toks.Usage.PromptTokens)
	require.Len(t, embed(t, url, `{"model":"m","input":[1,2,3]}`).Data, 1)

	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","input":"x","encoding_format":"int8"}`, "encoding_format"},
		{`{"model":"m","input":""}`, "input"},
		{`{"model":"m","input":[]}`, "input"},
		{`{"model":"m","input":["a",""]}`, "input"},
		{`{"model":"m","input":[[]]}`, "input"},
		{`{"model":"m","input":{"text":"x"}}`, "input"},
		{`{"model":"m","input":"x","dimensions":0}`, "dimensions"},
		{`{"input":"x"}`, "model"},
	} {
		resp := post(t, context.Background(), newClient(), url+"/v1/embeddings", tc.body, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.body)
		e := readAPIError(t, resp)
		require.NotNil(t, e.Error.Param, tc.body)
		require.Equal(t, tc.param, *e.Error.Param, tc.body)
	}
}

// refusedFields are request fields /v1/chat/completions or /v1/completions refuses with a 400
// naming param: body is the field as it goes into a request of path.
var refusedFields = []struct {
	path, body, param string
}{
	{"/v1/chat/completions", `"logprobs":true`, "logprobs"},
	{"/v1/chat/completions", `"top_logprobs":3`, "top_logprobs"},
	{"/v1/chat/completions", `"response_format":{"type":"json_object"}`, "response_format"},
	{"/v1/chat/completions", `"tool_choice":"required"`, "tool_choice"},
	{"/v1/chat/completions", `"tool_choice":{"type":"function","function":{"name":"f"}}`, "tool_choice"},
	{"/v1/chat/completions", `"modalities":["text","audio"]`, "modalities"},
	{"/v1/chat/completions", `"audio":{"voice":"alloy","format":"mp3"}`, "audio"},
	{"/v1/chat/completions", `"web_search_options":{}`, "web_search_options"},
	{"/v1/chat/completions", `"stop":["a","b","c","d","e"]`, "stop"},
	{"/v1/chat/completions", `"stop":""`, "stop"},
	{"/v1/chat/completions", `"stop":5`, "stop"},
	{"/v1/chat/completions", `"temperature":2.5`, "temperature"},
	{"/v1/chat/completions", `"top_p":-0.1`, "top_p"},
	{"/v1/chat/completions", `"presence_penalty":3`, "presence_penalty"},
	{"/v1/chat/completions", `"frequency_penalty":-3`, "frequency_penalty"},
	{"/v1/chat/completions", `"n":3`, "n"},
	{"/v1/chat/completions", `"stream_options":{"include_usage":true}`, "stream_options"},
	{"/v1/chat/completions", `"max_tokens":0`, "max_tokens"},
	// Over the default context window (131,072 tokens) with the prompt's few tokens.
	{"/v1/chat/completions", `"max_tokens":131072`, "max_tokens"},
	{"/v1/chat/completions", `"max_tokens":5,"max_completion_tokens":200000`, "max_completion_tokens"},
	{"/v1/completions", `"max_tokens":131072`, "max_tokens"},
	{"/v1/completions", `"echo":true`, "echo"},
	{"/v1/completions", `"best_of":2`, "best_of"},
	{"/v1/completions", `"suffix":"end"`, "suffix"},
	{"/v1/completions", `"logprobs":2`, "logprobs"},
}

// refusedRequest is the request of path carrying field.
func refusedRequest(path, field string) string {
	if path == "/v1/completions" {
		return `{"model":"m","prompt":"x",` + field + `}`
	}
	return `{"model":"m","messages":[{"role":"user","content":"x"}],` + field + `}`
}

// Fields the OpenAI SDKs send are honoured, accepted without effect, or refused with a 400
// naming them.
func TestChatAndCompletionFields(t *testing.T) {
	_, url := startOne(t, nil)
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range refusedFields {
		body := refusedRequest(tc.path, tc.body)
		resp := post(t, context.Background(), newClient(), url+tc.path, body, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		e := readAPIError(t, resp)
		require.NotNil(t, e.Error.Param, body)
		require.Equal(t, tc.param, *e.Error.Param, body)
	}
	// Accepted: they change nothing a simulated reply can show.
	accepted := `"user":"u","metadata":{"k":"v"},"store":false,"seed":3,"temperature":0.2,"top_p":0.9,` +
		`"presence_penalty":0.5,"frequency_penalty":0.5,"logit_bias":{"1":2},"logprobs":false,"top_logprobs":0,` +
		`"response_format":{"type":"text"},"tool_choice":"auto","parallel_tool_calls":true,"modalities":["text"],` +
		`"reasoning_effort":"low","service_tier":"auto","prompt_cache_key":"k","safety_identifier":"s","n":1,"stop":null,` +
		`"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}`
	evs, _ := postStream(t, url, "/v1/chat/completions", `{"model":"m",`+msgs+`,`+accepted+`}`, nil)
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)
	out := doCompletion(t, newClient(), url, "/v1/completions", `{"model":"m","prompt":"x","echo":false,"best_of":1,"suffix":"","user":"u","seed":3,"stop":"zz"}`)
	require.NotEmpty(t, out.Choices[0].Text)
}

// chatDeltas streams a chat request and returns its content deltas, the finish reason and
// the usage's completion tokens.
func chatDeltas(t *testing.T, url, body string) ([]string, string, int) {
	t.Helper()
	evs, _ := postStream(t, url, "/v1/chat/completions", body, nil)
	var deltas []string
	finish, completion := "", 0
	for _, e := range evs {
		if e.data == "[DONE]" {
			continue
		}
		c := parseChunk(t, e.data)
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				deltas = append(deltas, ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			completion = c.Usage.CompletionTokens
		}
	}
	return deltas, finish, completion
}

func TestStopSequences(t *testing.T) {
	_, url := startOne(t, nil)
	tokens, finish, _ := chatDeltas(t, url, chatBody("stop me", true, ""))
	require.Len(t, tokens, 8)
	require.Equal(t, "stop", finish)
	full := strings.Join(tokens, "")

	// A stop sequence spanning tokens 3 and 4: its last rune and the next token's first.
	r3, r4 := []rune(tokens[3]), []rune(tokens[4])
	stop := string(r3[len(r3)-1:]) + string(r4[:1])
	at := strings.Index(full, stop)
	want := full[:at]
	wantTokens := 0
	for n := 0; n < at+len(stop); wantTokens++ {
		n += len(tokens[wantTokens])
	}
	stopJSON, _ := json.Marshal(stop)

	whole := doCompletion(t, newClient(), url, "/v1/chat/completions", chatBody("stop me", false, `"stop":["never here",`+string(stopJSON)+`]`))
	require.Equal(t, want, whole.Choices[0].Message.Content)
	require.Equal(t, "stop", whole.Choices[0].FinishReason)
	require.Equal(t, wantTokens, whole.Usage.CompletionTokens)

	deltas, finish, completion := chatDeltas(t, url, chatBody("stop me", true, `"stop":`+string(stopJSON)))
	require.Equal(t, want, strings.Join(deltas, ""), "the stream never shows the stop sequence")
	require.Equal(t, "stop", finish)
	require.Equal(t, wantTokens, completion)

	// A stop sequence that never matches holds back nothing in the end.
	deltas, _, _ = chatDeltas(t, url, chatBody("stop me", true, `"stop":"\u0000never"`))
	require.Equal(t, full, strings.Join(deltas, ""))

	var msg anthropicMessage
	postJSON(t, url, "/v1/messages", `{"model":"m","max_tokens":100,"stop_sequences":[`+string(stopJSON)+`],"messages":[{"role":"user","content":"stop me"}]}`, nil, &msg)
	require.Equal(t, "stop_sequence", *msg.StopReason)
	require.Equal(t, stop, *msg.StopSequence)
	require.Equal(t, wantTokens, msg.Usage.OutputTokens)
}

func TestModelRetrieve(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.Models = []string{"org/m"} })
	var m struct{ ID, Object string }
	require.Equal(t, http.StatusOK, getJSON(t, newClient(), url+"/v1/models/org/m", &m))
	require.Equal(t, "org/m", m.ID)
	require.Equal(t, "model", m.Object)
	resp, err := newClient().Get(url + "/v1/models/other")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	readAPIError(t, resp)
}

// Integer fields written as whole floats (3.0, 1e1), as a Python client may send them, are
// read as vLLM's pydantic models read them: as the integer. A fraction is refused with a 400
// that names the field, and the message names no Go type.
func TestIntegerFieldsWrittenAsFloats(t *testing.T) {
	_, url := startOne(t, nil)
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m",` + msgs + `,"max_tokens":3.0,"n":1.0,"top_logprobs":0.0}`},
		{"/v1/chat/completions", `{"model":"m",` + msgs + `,"max_completion_tokens":3e0}`},
		{"/v1/completions", `{"model":"m","prompt":"x","max_tokens":3.0,"best_of":1.0}`},
		{"/v1/messages", `{"model":"m",` + msgs + `,"max_tokens":3.0,"top_k":1.0}`},
		{"/v1/responses", `{"model":"m","input":"x","max_output_tokens":3.0}`},
		{"/v1/chat/completions", `{"model":"m",` + msgs + `,"seed":3.0}`},
		{"/v1/completions", `{"model":"m","prompt":"x","max_tokens":3,"seed":-2.0}`},
		{"/v1/messages", `{"model":"m",` + msgs + `,"max_tokens":3,"seed":1e0}`},
		{"/v1/responses", `{"model":"m","input":"x","seed":3.0}`},
	} {
		resp := post(t, context.Background(), newClient(), url+tc.path, tc.body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", tc.path, tc.body, b)
		if tc.path != "/v1/completions" {
			continue
		}
		var out completion
		require.NoError(t, json.Unmarshal(b, &out))
		require.Equal(t, 3, out.Usage.CompletionTokens, "max_tokens 3.0 caps the output at 3")
	}
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", `{"model":"m",`+msgs+`,"max_tokens":3.5}`, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	e := readAPIError(t, resp)
	require.Contains(t, e.Error.Message, "max_tokens")
	require.Contains(t, e.Error.Message, "fractional part")
	require.NotContains(t, e.Error.Message, "Go struct")

	// A seed written as a whole float varies the output as the integer does.
	asInt := doCompletion(t, newClient(), url, "/v1/completions", `{"model":"m","prompt":"x","seed":7}`)
	asFloat := doCompletion(t, newClient(), url, "/v1/completions", `{"model":"m","prompt":"x","seed":7.0}`)
	require.Equal(t, asInt.Choices[0].Text, asFloat.Choices[0].Text)
}
