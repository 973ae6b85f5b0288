package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func peek(t *testing.T, ep Endpoint, body string) *Request {
	t.Helper()
	var r Request
	require.NoError(t, Peek(ep, []byte(body), &r), "body %s", body)
	return &r
}

func span(body string, s Span) string { return string(s.Of([]byte(body))) }

func TestPeekChat(t *testing.T) {
	body := `{
  "model": "gpt-4o",
  "messages": [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": "data:,"}}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "assistant", "tool_calls": [{"id": "c2"}]},
    {"role": "function", "name": "f", "content": null}
  ],
  "stream": true,
  "stream_options": {"include_usage": true, "include_obfuscation": false},
  "max_tokens": 100,
  "max_completion_tokens": 50,
  "temperature": 2, "top_p": 0, "n": 1, "presence_penalty": -2, "frequency_penalty": 2.0,
  "prompt_cache_key": "tenant-\u0061",
  "user": "u-1",
  "tools": [], "seed": 7, "unknown_extension": {"x": [1, 2]}
}`
	r := peek(t, ChatCompletions, body)
	require.Equal(t, ChatCompletions, r.Endpoint)
	require.Equal(t, "gpt-4o", string(r.Model))
	require.Equal(t, `"gpt-4o"`, span(body, r.ModelSpan))
	require.True(t, r.Stream)
	require.True(t, r.IncludeUsage)
	require.Equal(t, int64(100), r.MaxTokens)
	require.Equal(t, int64(50), r.MaxCompletionTokens)
	require.Equal(t, int64(50), r.OutputCap())
	require.True(t, strings.HasPrefix(span(body, r.Prompt), `[
    {"role": "developer"`))
	require.True(t, strings.HasSuffix(span(body, r.Prompt), `"content": null}
  ]`))
	require.False(t, r.System.Present())
	require.Equal(t, "tenant-a", string(r.PromptCacheKey))
	require.Equal(t, "u-1", string(r.User))
}

func TestPeekChatMinimal(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":""}]}`
	r := peek(t, ChatCompletions, body)
	require.Equal(t, "m", string(r.Model))
	require.False(t, r.Stream)
	require.False(t, r.IncludeUsage)
	require.Zero(t, r.OutputCap())
	require.Nil(t, r.PromptCacheKey)
	require.Nil(t, r.User)
	require.Equal(t, `[{"role":"user","content":""}]`, span(body, r.Prompt))
}

func TestPeekNullMeansAbsent(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":null,"stream_options":null,
		"max_tokens":null,"max_completion_tokens":null,"temperature":null,"top_p":null,"n":null,
		"presence_penalty":null,"frequency_penalty":null,"prompt_cache_key":null,"user":null}`
	r := peek(t, ChatCompletions, body)
	require.False(t, r.Stream)
	require.Zero(t, r.OutputCap())
	require.Nil(t, r.User)
	require.Nil(t, r.PromptCacheKey)
}

func TestPeekCompletions(t *testing.T) {
	for _, prompt := range []string{`"Say this is a test"`, `""`, `["a","b"]`, `[1,2,3]`, `[[1],[2,3]]`} {
		body := `{"model":"gpt-3.5-turbo-instruct","prompt":` + prompt + `,"max_tokens":7,"stream":false,"n":2,"user":"x"}`
		r := peek(t, Completions, body)
		require.Equal(t, "gpt-3.5-turbo-instruct", string(r.Model))
		require.Equal(t, prompt, span(body, r.Prompt))
		require.Equal(t, int64(7), r.OutputCap())
		require.Equal(t, "x", string(r.User))
	}
	// max_tokens 0 with echo scores the prompt and generates nothing (OpenAI's completions,
	// vLLM): in range on completions only.
	r := peek(t, Completions, `{"model":"m","prompt":"The sky is blue","max_tokens":0,"echo":true,"logprobs":1}`)
	require.Zero(t, r.MaxTokens)
	require.Zero(t, r.OutputCap())
}

func TestPeekEmbeddings(t *testing.T) {
	for _, input := range []string{`"hello"`, `["a","b"]`, `[1,2,3]`, `[[1,2],[3]]`} {
		body := `{"input":` + input + `,"model":"text-embedding-3-small","encoding_format":"float","dimensions":64,"user":"u"}`
		r := peek(t, Embeddings, body)
		require.Equal(t, "text-embedding-3-small", string(r.Model))
		require.Equal(t, input, span(body, r.Prompt))
		require.False(t, r.Stream)
		require.Equal(t, "u", string(r.User))
	}
	// messages and max_tokens are not embeddings parameters: skipped, whatever they hold.
	peek(t, Embeddings, `{"model":"e","input":"x","messages":5,"max_tokens":-1,"temperature":"hot"}`)
}

func TestPeekResponses(t *testing.T) {
	body := `{"model":"gpt-4.1","instructions":"Be brief.","input":[
		{"role":"user","content":"Hi"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},
		{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c","output":"42"},
		{"role":"developer","content":[{"type":"input_text","text":"x"}]}
	],"stream":true,"stream_options":{"include_usage":false},"max_output_tokens":16,"max_tokens":0,
	"temperature":1.5,"top_p":1,"prompt_cache_key":"k","user":"u","store":false}`
	r := peek(t, Responses, body)
	require.Equal(t, "gpt-4.1", string(r.Model))
	require.True(t, r.Stream)
	require.Equal(t, int64(16), r.MaxOutputTokens)
	require.Zero(t, r.MaxTokens, "max_tokens is not a Responses parameter")
	require.Equal(t, int64(16), r.OutputCap())
	require.Equal(t, `"Be brief."`, span(body, r.System))
	require.True(t, strings.HasPrefix(span(body, r.Prompt), `[`))
	require.Equal(t, "k", string(r.PromptCacheKey))

	r = peek(t, Responses, `{"model":"m","input":"hi"}`)
	require.Equal(t, "m", string(r.Model))
	// input is optional on the Responses API (previous_response_id, prompt templates).
	r = peek(t, Responses, `{"model":"m","previous_response_id":"resp_1"}`)
	require.False(t, r.Prompt.Present())
	r = peek(t, Responses, `{"model":"m","input":null}`)
	require.False(t, r.Prompt.Present())
	// An item reference may leave out its type, or give it as null (OpenAI's API; openai-go's
	// ResponseInputItemParamOfItemReference sends {"id": ...} alone); a null type is an absent
	// one on a message too.
	peek(t, Responses, `{"model":"m","input":[{"role":"user","content":"hi"},{"id":"msg_1"},{"id":"msg_2","type":null},{"type":"item_reference","id":"msg_3"}]}`)
	peek(t, Responses, `{"model":"m","input":[{"type":null,"role":"user","content":"hi"}]}`)
}

func TestPeekMessages(t *testing.T) {
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":"Hello"},{"role":"assistant","content":[{"type":"text","text":"Hi"}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"42"}]}],
		"stream":true,"temperature":1,"top_p":0.9,"top_k":0,"metadata":{"user_id":"u"}}`
	r := peek(t, Messages, body)
	require.Equal(t, "claude-sonnet-4-5", string(r.Model))
	require.Equal(t, int64(1024), r.MaxTokens)
	require.Equal(t, int64(1024), r.OutputCap())
	require.True(t, r.Stream)
	require.True(t, strings.HasPrefix(span(body, r.System), `[{"type":"text"`))
	require.True(t, strings.HasPrefix(span(body, r.Prompt), `[{"role":"user"`))
	require.Nil(t, r.User, "user is not an Anthropic parameter")

	r = peek(t, Messages, `{"model":"c","max_tokens":1,"system":"Be brief.","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, `"Be brief."`, string(r.System.Of([]byte(`{"model":"c","max_tokens":1,"system":"Be brief.","messages":[{"role":"user","content":"x"}]}`))))
}

// TestPeekEscapedKeys: keys are compared after decoding their escapes, as every JSON parser
// does, so a key written with escapes is the parameter it names.
func TestPeekEscapedKeys(t *testing.T) {
	body := `{"mod\u0065l":"m","\u006d\u0065\u0073\u0073\u0061\u0067\u0065\u0073":[{"r\u006fle":"user","c\u006fntent":"x"}],"str\u0065am":true,
		"\u006d\u0061\u0078\u005f\u0063\u006f\u006d\u0070\u006c\u0065\u0074\u0069\u006f\u006e\u005f\u0074\u006f\u006b\u0065\u006e\u0073":9,
		"stream_options":{"\u0069\u006e\u0063\u006c\u0075\u0064\u0065\u005f\u0075\u0073\u0061\u0067\u0065":true}}`
	r := peek(t, ChatCompletions, body)
	require.Equal(t, "m", string(r.Model))
	require.True(t, r.Stream)
	require.True(t, r.IncludeUsage)
	require.Equal(t, int64(9), r.MaxCompletionTokens)
}

// TestPeekCaseOfMembersItDoesNotRead: only members the gateway reads are guarded against
// their case variants; other keys in any case pass to the upstream as they are.
func TestPeekCaseOfMembersItDoesNotRead(t *testing.T) {
	peek(t, ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x","Name":"n","Type":"t"}],"stream":true,"stream_options":{"Continuous_Usage_Stats":true}}`)
	peek(t, Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","Text":"a"}]}]}`)
}

func TestPeekEscapedValues(t *testing.T) {
	body := `{"model":"org\/m\u00e9\ud83d\ude00","messages":[{"role":"\u0075ser","content":"x"}],"user":"a\"b","prompt_cache_key":"\u006b"}`
	var r Request
	r.scratch = make([]byte, 0, 2) // grows while decoding: the slices must still be right
	require.NoError(t, Peek(ChatCompletions, []byte(body), &r))
	require.Equal(t, "org/mé😀", string(r.Model))
	require.Equal(t, `a"b`, string(r.User))
	require.Equal(t, "k", string(r.PromptCacheKey))
	require.Equal(t, `"org\/m\u00e9\ud83d\ude00"`, span(body, r.ModelSpan))

	// A lone surrogate elsewhere is U+FFFD, as encoding/json decodes it.
	r2 := peek(t, ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x"}],"user":"\ud800"}`)
	require.Equal(t, "\uFFFD", string(r2.User))
}

func TestPeekReuse(t *testing.T) {
	var r Request
	require.NoError(t, Peek(ChatCompletions, []byte(`{"model":"a\u0062","messages":[{"role":"user","content":"x"}],"stream":true,"user":"u"}`), &r))
	require.Equal(t, "ab", string(r.Model))
	require.NoError(t, Peek(Completions, []byte(`{"model":"c","prompt":"p"}`), &r))
	require.Equal(t, Request{Endpoint: Completions, Model: []byte("c"), ModelSpan: Span{9, 12}, Prompt: Span{22, 25}, scratch: r.scratch,
		model: strRef{lo: 10, hi: 11, set: true}}, r)
}

// After the body it peeked is overwritten, a Request rebased on a copy reads the strings the
// body had, escaped or not.
func TestPeekRebase(t *testing.T) {
	body := []byte(`{"model":"alias-name","prompt_cache_key":"conv-1","user":"b\u006fb","messages":[{"role":"user","content":"x"}]}`)
	var r Request
	require.NoError(t, Peek(ChatCompletions, body, &r))
	orig := append([]byte(nil), body...)
	r.Rebase(orig)
	rewritten := RewriteModel(orig, &r, "m", nil)
	copy(body, rewritten) // in place, as the model router does
	require.Equal(t, "alias-name", string(r.Model))
	require.Equal(t, "conv-1", string(r.PromptCacheKey))
	require.Equal(t, "bob", string(r.User))
	require.Equal(t, `[{"role":"user","content":"x"}]`, string(r.Prompt.Of(orig)))
}

func TestPeekUnknownEndpoint(t *testing.T) {
	var r Request
	require.ErrorIs(t, Peek(0, []byte(`{}`), &r), ErrUnknownEndpoint)
	require.ErrorIs(t, Peek(Messages+1, []byte(`{}`), &r), ErrUnknownEndpoint)
}

func TestEndpointForPath(t *testing.T) {
	for _, ep := range []Endpoint{ChatCompletions, Completions, Embeddings, Responses, Messages} {
		got, ok := EndpointForPath([]byte(ep.Path()))
		require.True(t, ok)
		require.Equal(t, ep, got)
		require.Equal(t, ep.Path(), ep.String())
		require.Equal(t, ep == Messages, ep.AnthropicErrors())
	}
	for _, p := range []string{"/v1/chat/completions/", "/V1/messages", "/v1/models", ""} {
		_, ok := EndpointForPath([]byte(p))
		require.False(t, ok, p)
	}
	require.Equal(t, "", Endpoint(0).Path())
}

// chatMsgs is a valid chat body's tail after the model.
const chatMsgs = `"messages":[{"role":"user","content":"x"}]`

type errCase struct {
	name  string
	ep    Endpoint
	body  string
	param string
	code  string
	msg   string
}

func checkErr(t *testing.T, c errCase) {
	t.Helper()
	var r Request
	err := Peek(c.ep, []byte(c.body), &r)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve, "body %s", c.body)
	require.Equal(t, 400, ve.Status)
	require.Equal(t, c.param, ve.Param)
	require.Equal(t, c.code, ve.Code)
	require.Equal(t, c.msg, ve.Message)
	require.Equal(t, c.msg, ve.Error())
	if c.code != CodeInvalidJSON {
		require.Equal(t, -1, ve.Offset)
		require.True(t, json.Valid([]byte(c.body)), "a semantic error case must be valid JSON: %s", c.body)
	}
}

func TestValidationErrors(t *testing.T) {
	for _, c := range []errCase{
		// The body as a whole.
		{"array body", ChatCompletions, `[{"model":"m"}]`, "", CodeInvalidType, "the request body must be a JSON object"},
		{"string body", ChatCompletions, ` "m" `, "", CodeInvalidType, "the request body must be a JSON object"},
		{"null body", Embeddings, `null`, "", CodeInvalidType, "the request body must be a JSON object"},

		// model.
		{"model missing", ChatCompletions, `{` + chatMsgs + `}`, "model", CodeMissingParameter, "model: missing required parameter"},
		{"model number", ChatCompletions, `{"model":4,` + chatMsgs + `}`, "model", CodeInvalidType, "model: expected a non-empty string"},
		{"model null", ChatCompletions, `{"model":null,` + chatMsgs + `}`, "model", CodeInvalidType, "model: expected a non-empty string"},
		{"model object", Embeddings, `{"model":{"id":"m"},"input":"x"}`, "model", CodeInvalidType, "model: expected a non-empty string"},
		{"model empty", ChatCompletions, `{"model":"",` + chatMsgs + `}`, "model", CodeInvalidValue, "model: expected a non-empty string"},
		{"model control", ChatCompletions, `{"model":"a\nb",` + chatMsgs + `}`, "model", CodeInvalidValue, "model: must not contain control characters"},
		{"model NUL", ChatCompletions, `{"model":"a\u0000",` + chatMsgs + `}`, "model", CodeInvalidValue, "model: must not contain control characters"},
		{"model lone surrogate", ChatCompletions, `{"model":"a\udc00",` + chatMsgs + `}`, "model", CodeInvalidValue, `model: contains a \u escape of a lone UTF-16 surrogate`},
		{"model missing on messages", Messages, `{"max_tokens":1,` + chatMsgs + `}`, "model", CodeMissingParameter, "model: missing required parameter"},

		// Duplicates and spellings.
		{"model twice", ChatCompletions, `{"model":"a",` + chatMsgs + `,"model":"b"}`, "model", CodeDuplicateParam, "model: named more than once; the body must name each parameter once"},
		{"model twice, escaped", ChatCompletions, `{"model":"a",` + chatMsgs + `,"mod\u0065l":"a"}`, "model", CodeDuplicateParam, "model: named more than once; the body must name each parameter once"},
		{"stream twice", ChatCompletions, `{"model":"a",` + chatMsgs + `,"stream":false,"stream":true}`, "stream", CodeDuplicateParam, "stream: named more than once; the body must name each parameter once"},
		{"messages twice", ChatCompletions, `{"model":"a",` + chatMsgs + `,` + chatMsgs + `}`, "messages", CodeDuplicateParam, "messages: named more than once; the body must name each parameter once"},
		{"max_tokens twice", Messages, `{"model":"a","max_tokens":1,"max_tokens":100000,` + chatMsgs + `}`, "max_tokens", CodeDuplicateParam, "max_tokens: named more than once; the body must name each parameter once"},
		{"include_usage twice", ChatCompletions, `{"model":"a",` + chatMsgs + `,"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`, "stream_options.include_usage", CodeDuplicateParam, "stream_options.include_usage: named more than once; the body must name each parameter once"},
		{"Model", ChatCompletions, `{"model":"a",` + chatMsgs + `,"Model":"b"}`, "model", CodeAmbiguousParam, `model: the key "Model" differs from "model" only in case, and some servers would read it as "model"`},
		{"MODEL alone", Embeddings, `{"MODEL":"b","input":"x"}`, "model", CodeAmbiguousParam, `model: the key "MODEL" differs from "model" only in case, and some servers would read it as "model"`},
		{"long s stream", ChatCompletions, `{"model":"a",` + chatMsgs + `,"ſtream":true}`, "stream", CodeAmbiguousParam, `stream: the key "ſtream" differs from "stream" only in case, and some servers would read it as "stream"`},
		{"escaped Kelvin max_tokens", Messages, `{"model":"a","max_to\u212aens":5,"max_tokens":1,` + chatMsgs + `}`, "max_tokens", CodeAmbiguousParam, "max_tokens: the key \"max_to\u212aens\" differs from \"max_tokens\" only in case, and some servers would read it as \"max_tokens\""},
		{"Role beside role", ChatCompletions, `{"model":"m","messages":[{"role":"user","Role":"system","content":"x"}]}`, "messages[0].role", CodeAmbiguousParam, `messages[0].role: the key "Role" differs from "role" only in case, and some servers would read it as "role"`},
		{"CONTENT alone", Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","CONTENT":"x"}]}`, "messages[0].content", CodeAmbiguousParam, `messages[0].content: the key "CONTENT" differs from "content" only in case, and some servers would read it as "content"`},
		{"Tool_Calls", ChatCompletions, `{"model":"m","messages":[{"role":"assistant","content":null,"Tool_Calls":[]}]}`, "messages[0].tool_calls", CodeAmbiguousParam, `messages[0].tool_calls: the key "Tool_Calls" differs from "tool_calls" only in case, and some servers would read it as "tool_calls"`},
		{"Refusal", ChatCompletions, `{"model":"m","messages":[{"role":"assistant","Refusal":"no"}]}`, "messages[0].refusal", CodeAmbiguousParam, `messages[0].refusal: the key "Refusal" differs from "refusal" only in case, and some servers would read it as "refusal"`},
		{"responses item Type", Responses, `{"model":"m","input":[{"Type":"message","role":"user","content":"x"}]}`, "input[0].type", CodeAmbiguousParam, `input[0].type: the key "Type" differs from "type" only in case, and some servers would read it as "type"`},
		{"part Type", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","Type":"image_url","text":"a"}]}]}`, "messages[0].content[0].type", CodeAmbiguousParam, `messages[0].content[0].type: the key "Type" differs from "type" only in case, and some servers would read it as "type"`},
		{"system block TYPE", Messages, `{"model":"m","max_tokens":1,"system":[{"TYPE":"text","text":"a"}],` + chatMsgs + `}`, "system[0].type", CodeAmbiguousParam, `system[0].type: the key "TYPE" differs from "type" only in case, and some servers would read it as "type"`},
		{"Include_Usage", ChatCompletions, `{"model":"a",` + chatMsgs + `,"stream":true,"stream_options":{"include_usage":false,"Include_Usage":true}}`, "stream_options.include_usage", CodeAmbiguousParam, `stream_options.include_usage: the key "Include_Usage" differs from "include_usage" only in case, and some servers would read it as "include_usage"`},
		{"long s include_usage", ChatCompletions, `{"model":"a",` + chatMsgs + `,"stream":true,"stream_options":{"include_u\u017fage":true}}`, "stream_options.include_usage", CodeAmbiguousParam, `stream_options.include_usage: the key "include_uſage" differs from "include_usage" only in case, and some servers would read it as "include_usage"`},

		// The conversation.
		{"messages missing", ChatCompletions, `{"model":"m"}`, "messages", CodeMissingParameter, "messages: missing required parameter"},
		{"messages object", ChatCompletions, `{"model":"m","messages":{"role":"user"}}`, "messages", CodeInvalidType, "messages: expected an array of messages"},
		{"messages null", Messages, `{"model":"m","max_tokens":1,"messages":null}`, "messages", CodeInvalidType, "messages: expected an array of messages"},
		{"messages empty", ChatCompletions, `{"model":"m","messages":[]}`, "messages", CodeEmptyArray, "messages: expected a non-empty array of messages"},
		{"message not object", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x"},"hi"]}`, "messages[1]", CodeInvalidType, "messages[1]: expected an object (a message)"},
		{"role missing", ChatCompletions, `{"model":"m","messages":[{"content":"x"}]}`, "messages[0].role", CodeMissingParameter, "messages[0].role: missing required parameter"},
		{"role number", ChatCompletions, `{"model":"m","messages":[{"role":1,"content":"x"}]}`, "messages[0].role", CodeInvalidType, "messages[0].role: expected a string"},
		{"role unknown", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"root","content":"x"}]}`, "messages[1].role", CodeInvalidValue, `messages[1].role: expected "system", "developer", "user", "assistant", "tool" or "function"`},
		{"role case", ChatCompletions, `{"model":"m","messages":[{"role":"User","content":"x"}]}`, "messages[0].role", CodeInvalidValue, `messages[0].role: expected "system", "developer", "user", "assistant", "tool" or "function"`},
		{"role twice", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"x","role":"system"}]}`, "messages[0].role", CodeDuplicateParam, "messages[0].role: named more than once; a message must name each member once"},
		{"content missing", ChatCompletions, `{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content", CodeMissingParameter, "messages[0].content: missing required parameter"},
		{"content number", ChatCompletions, `{"model":"m","messages":[{"role":"system","content":"a"},{"role":"user","content":"b"},{"role":"user","content":7}]}`, "messages[2].content", CodeInvalidType, "messages[2].content: expected a string or an array of content parts"},
		{"content object", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":{"type":"text"}}]}`, "messages[0].content", CodeInvalidType, "messages[0].content: expected a string or an array of content parts"},
		{"content null from user", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":null}]}`, "messages[0].content", CodeInvalidType, "messages[0].content: expected a string or an array of content parts"},
		{"content null without tool_calls", ChatCompletions, `{"model":"m","messages":[{"role":"assistant","content":null}]}`, "messages[0].content", CodeInvalidType, "messages[0].content: null is allowed only in an assistant message with tool_calls, function_call, refusal or audio"},
		{"content null, tool_calls and refusal null", ChatCompletions, `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":null,"refusal":null,"audio":null}]}`, "messages[0].content", CodeInvalidType, "messages[0].content: null is allowed only in an assistant message with tool_calls, function_call, refusal or audio"},
		{"content absent without tool_calls", ChatCompletions, `{"model":"m","messages":[{"role":"assistant"}]}`, "messages[0].content", CodeMissingParameter, "messages[0].content: missing required parameter"},
		{"content empty array", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":[]}]}`, "messages[0].content", CodeEmptyArray, "messages[0].content: expected a non-empty array of content parts"},
		{"part not object", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},"b"]}]}`, "messages[0].content[1]", CodeInvalidType, "messages[0].content[1]: expected an object (a content part)"},
		{"part without type", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`, "messages[0].content[0].type", CodeMissingParameter, "messages[0].content[0].type: missing required parameter"},
		{"part type number", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":1}]}]}`, "messages[0].content[0].type", CodeInvalidType, "messages[0].content[0].type: expected a string"},

		{"anthropic system role", Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role", CodeInvalidValue, `messages[0].role: expected "user" or "assistant"`},
		{"anthropic content null", Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`, "messages[0].content", CodeInvalidType, "messages[0].content: expected a string or an array of content blocks"},
		{"anthropic content missing", Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}`, "messages[0].content", CodeMissingParameter, "messages[0].content: missing required parameter"},
		{"anthropic empty blocks", Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[]}]}`, "messages[0].content", CodeEmptyArray, "messages[0].content: expected a non-empty array of content blocks"},
		{"anthropic system number", Messages, `{"model":"m","max_tokens":1,"system":1,` + chatMsgs + `}`, "system", CodeInvalidType, "system: expected a string or an array of content blocks"},
		{"anthropic system block", Messages, `{"model":"m","max_tokens":1,"system":["x"],` + chatMsgs + `}`, "system[0]", CodeInvalidType, "system[0]: expected an object (a content part)"},
		{"anthropic messages empty", Messages, `{"model":"m","max_tokens":1,"messages":[]}`, "messages", CodeEmptyArray, "messages: expected a non-empty array of messages"},

		{"responses input number", Responses, `{"model":"m","input":3}`, "input", CodeInvalidType, "input: expected a string or an array of input items"},
		{"responses item not object", Responses, `{"model":"m","input":["hi"]}`, "input[0]", CodeInvalidType, "input[0]: expected an object (an input item)"},
		{"responses tool role", Responses, `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role", CodeInvalidValue, `input[0].role: expected "user", "assistant", "system" or "developer"`},
		{"responses message without role", Responses, `{"model":"m","input":[{"type":"message","content":"x"}]}`, "input[0].role", CodeMissingParameter, "input[0].role: missing required parameter"},
		{"responses content null", Responses, `{"model":"m","input":[{"role":"assistant","content":null}]}`, "input[0].content", CodeInvalidType, "input[0].content: expected a string or an array of content parts"},
		{"responses item without role, type or id", Responses, `{"model":"m","input":[{"content":"x"}]}`, "input[0].role", CodeMissingParameter, "input[0].role: missing required parameter"},
		{"responses id is not a role", Responses, `{"model":"m","input":[{"id":"msg_1","content":null,"role":"user"}]}`, "input[0].content", CodeInvalidType, "input[0].content: expected a string or an array of content parts"},
		{"responses type number", Responses, `{"model":"m","input":[{"type":1,"role":"user","content":"x"}]}`, "input[0].type", CodeInvalidType, "input[0].type: expected a string"},
		{"responses instructions", Responses, `{"model":"m","instructions":["x"]}`, "instructions", CodeInvalidType, "instructions: expected a string"},

		{"prompt missing", Completions, `{"model":"m"}`, "prompt", CodeMissingParameter, "prompt: missing required parameter"},
		{"prompt object", Completions, `{"model":"m","prompt":{}}`, "prompt", CodeInvalidType, "prompt: expected a string, an array of strings, an array of token ids or an array of token id arrays"},
		{"prompt empty array", Completions, `{"model":"m","prompt":[]}`, "prompt", CodeEmptyArray, "prompt: expected a non-empty array"},
		{"prompt mixed", Completions, `{"model":"m","prompt":["a",1]}`, "prompt[1]", CodeInvalidType, "prompt[1]: expected a string, as prompt[0]"},
		{"prompt null element", Completions, `{"model":"m","prompt":["a",null]}`, "prompt[1]", CodeInvalidType, "prompt[1]: expected a string, a token id or an array of token ids"},
		{"prompt fractional token", Completions, `{"model":"m","prompt":[1,2.5]}`, "prompt[1]", CodeInvalidValue, "prompt[1]: expected a token id (an integer ≥ 0)"},
		{"input missing", Embeddings, `{"model":"m"}`, "input", CodeMissingParameter, "input: missing required parameter"},
		{"input empty string", Embeddings, `{"model":"m","input":""}`, "input", CodeInvalidValue, "input: expected a non-empty string"},
		{"input empty element", Embeddings, `{"model":"m","input":["a",""]}`, "input[1]", CodeInvalidValue, "input[1]: expected a non-empty string"},
		{"input negative token", Embeddings, `{"model":"m","input":[[1],[2,-3]]}`, "input[1][1]", CodeInvalidValue, "input[1][1]: expected a token id (an integer ≥ 0)"},
		{"input empty token array", Embeddings, `{"model":"m","input":[[1],[]]}`, "input[1]", CodeEmptyArray, "input[1]: expected a non-empty array of token ids"},
		{"input string in token array", Embeddings, `{"model":"m","input":[["a"]]}`, "input[0][0]", CodeInvalidType, "input[0][0]: expected a token id (an integer ≥ 0)"},
		{"input too many", Embeddings, `{"model":"m","input":[` + strings.Repeat(`"a",`, 2048) + `"a"]}`, "input", CodeInvalidValue, "input: at most 2048 inputs"},

		// Numbers.
		{"temperature high", ChatCompletions, `{"model":"m",` + chatMsgs + `,"temperature":2.01}`, "temperature", CodeAboveMaxDecimal, "temperature: expected a number between 0 and 2"},
		{"temperature negative", Completions, `{"model":"m","prompt":"p","temperature":-0.1}`, "temperature", CodeBelowMinDecimal, "temperature: expected a number between 0 and 2"},
		{"temperature string", ChatCompletions, `{"model":"m",` + chatMsgs + `,"temperature":"1"}`, "temperature", CodeInvalidType, "temperature: expected a number"},
		{"temperature anthropic", Messages, `{"model":"m","max_tokens":1,` + chatMsgs + `,"temperature":1.5}`, "temperature", CodeAboveMaxDecimal, "temperature: expected a number between 0 and 1"},
		{"temperature huge", Responses, `{"model":"m","temperature":1e999}`, "temperature", CodeAboveMaxDecimal, "temperature: expected a number between 0 and 2"},
		{"top_p high", ChatCompletions, `{"model":"m",` + chatMsgs + `,"top_p":1.5}`, "top_p", CodeAboveMaxDecimal, "top_p: expected a number between 0 and 1"},
		{"top_p negative", Messages, `{"model":"m","max_tokens":1,` + chatMsgs + `,"top_p":-1}`, "top_p", CodeBelowMinDecimal, "top_p: expected a number between 0 and 1"},
		{"presence_penalty", ChatCompletions, `{"model":"m",` + chatMsgs + `,"presence_penalty":-2.5}`, "presence_penalty", CodeBelowMinDecimal, "presence_penalty: expected a number between -2 and 2"},
		{"frequency_penalty", Completions, `{"model":"m","prompt":"p","frequency_penalty":3}`, "frequency_penalty", CodeAboveMaxDecimal, "frequency_penalty: expected a number between -2 and 2"},
		{"n zero", ChatCompletions, `{"model":"m",` + chatMsgs + `,"n":0}`, "n", CodeBelowMinInteger, "n: must be at least 1"},
		{"n fractional", ChatCompletions, `{"model":"m",` + chatMsgs + `,"n":1.25}`, "n", CodeInvalidType, "n: expected an integer"},
		{"max_tokens zero", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":0}`, "max_tokens", CodeBelowMinInteger, "max_tokens: must be at least 1"},
		{"max_tokens negative", Completions, `{"model":"m","prompt":"p","max_tokens":-5}`, "max_tokens", CodeBelowMinInteger, "max_tokens: must be at least 0"},
		{"max_tokens zero on messages", Messages, `{"model":"m",` + chatMsgs + `,"max_tokens":0}`, "max_tokens", CodeBelowMinInteger, "max_tokens: must be at least 1"},
		{"max_tokens exponent", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":15e-1}`, "max_tokens", CodeInvalidType, "max_tokens: expected an integer"},
		{"max_tokens string", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":"100"}`, "max_tokens", CodeInvalidType, "max_tokens: expected an integer"},
		{"max_tokens overflow", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":9223372036854775808}`, "max_tokens", CodeAboveMaxInteger, "max_tokens: must be at most 9223372036854775807"},
		{"max_tokens negative overflow", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":-99999999999999999999}`, "max_tokens", CodeBelowMinInteger, "max_tokens: must be at least 1"},
		{"max_completion_tokens zero", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_completion_tokens":0}`, "max_completion_tokens", CodeBelowMinInteger, "max_completion_tokens: must be at least 1"},
		{"max_output_tokens zero", Responses, `{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens", CodeBelowMinInteger, "max_output_tokens: must be at least 1"},
		{"top_k negative", Messages, `{"model":"m","max_tokens":1,` + chatMsgs + `,"top_k":-1}`, "top_k", CodeBelowMinInteger, "top_k: must be at least 0"},
		{"anthropic max_tokens missing", Messages, `{"model":"m",` + chatMsgs + `}`, "max_tokens", CodeMissingParameter, "max_tokens: missing required parameter"},
		{"anthropic max_tokens null", Messages, `{"model":"m","max_tokens":null,` + chatMsgs + `}`, "max_tokens", CodeMissingParameter, "max_tokens: missing required parameter"},

		// Booleans and stream options.
		{"stream string", ChatCompletions, `{"model":"m",` + chatMsgs + `,"stream":"true"}`, "stream", CodeInvalidType, "stream: expected a boolean"},
		{"stream number", Messages, `{"model":"m","max_tokens":1,` + chatMsgs + `,"stream":1}`, "stream", CodeInvalidType, "stream: expected a boolean"},
		{"stream on embeddings", Embeddings, `{"model":"m","input":"x","stream":"yes"}`, "stream", CodeInvalidType, "stream: expected a boolean"},
		{"stream_options array", ChatCompletions, `{"model":"m",` + chatMsgs + `,"stream":true,"stream_options":[]}`, "stream_options", CodeInvalidType, "stream_options: expected an object"},
		{"include_usage string", ChatCompletions, `{"model":"m",` + chatMsgs + `,"stream":true,"stream_options":{"include_usage":"yes"}}`, "stream_options.include_usage", CodeInvalidType, "stream_options.include_usage: expected a boolean"},
		{"stream_options without stream", ChatCompletions, `{"model":"m",` + chatMsgs + `,"stream_options":{"include_usage":true}}`, "stream_options", CodeInvalidValue, "stream_options: only allowed when stream is true"},
		{"stream_options with stream false", Responses, `{"model":"m","stream":false,"stream_options":{}}`, "stream_options", CodeInvalidValue, "stream_options: only allowed when stream is true"},

		// Other strings.
		{"user number", ChatCompletions, `{"model":"m",` + chatMsgs + `,"user":1}`, "user", CodeInvalidType, "user: expected a string"},
		{"prompt_cache_key object", Responses, `{"model":"m","prompt_cache_key":{}}`, "prompt_cache_key", CodeInvalidType, "prompt_cache_key: expected a string"},

		// Order: the first fault in the body, then what is missing.
		{"first fault wins", ChatCompletions, `{"temperature":9,"model":5,"messages":[]}`, "temperature", CodeAboveMaxDecimal, "temperature: expected a number between 0 and 2"},
	} {
		t.Run(c.name, func(t *testing.T) { checkErr(t, c) })
	}
}

// TestSyntaxErrors: a malformed body is refused as malformed, at the byte where it stops being
// JSON, even when other faults come before that byte.
func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct {
		body string
		off  int
		what string
	}{
		{``, 0, "the body is empty"},
		{`   `, 3, "unexpected end of input"},
		{`{`, 1, "unexpected end of input"},
		{`{"model":"m"`, 12, "unexpected end of input"},
		{`{"model":"m",}`, 13, "expected a string (an object key)"},
		{`{"model" "m"}`, 9, "expected ':' after an object key"},
		{`{"model":"m" "x":1}`, 13, "expected ',' or '}' after an object member"},
		{`{"model":"m","x":[1 2]}`, 20, "expected ',' or ']' after an array element"},
		{`{"model":"m","x":[1,]}`, 20, "expected a value"},
		{`{"model":"m","x":{"a":1,}}`, 24, "expected a string (an object key)"},
		{`{"model":"m","x":{"a" 1}}`, 22, "expected ':' after an object key"},
		{`{"model":"m","x":[}`, 18, "expected a value"},
		{`{"model":"m","x":{]}`, 18, "expected a string (an object key)"},
		{"{\"model\":\"a\tb\"}", 11, "control character in a string (it must be escaped)"},
		{`{"model":"\x"}`, 10, "invalid escape in a string"},
		{`{"model":"\u12G4"}`, 10, "invalid escape in a string"},
		{`{"model":"\u12"}`, 10, "invalid escape in a string"},
		{"{\"model\":\"\xff\"}", 10, "invalid UTF-8 in a string"},
		{"{\"model\":\"\xed\xa0\x80\"}", 10, "invalid UTF-8 in a string"},
		{"{\"x\":\"\xc3\"}", 6, "invalid UTF-8 in a string"},
		{`{"n":01}`, 6, "expected ',' or '}' after an object member"},
		{`{"n":-}`, 5, "invalid number"},
		{`{"n":1.}`, 5, "invalid number"},
		{`{"n":1e}`, 5, "invalid number"},
		{`{"n":+1}`, 5, "expected a value"},
		{`{"n":.5}`, 5, "expected a value"},
		{`{"n":NaN}`, 5, "expected a value"},
		{`{"n":tru}`, 5, "invalid literal (expected true, false or null)"},
		{`{"n":nul`, 8, "unexpected end of input"},
		{`{"stream":True}`, 10, "expected a value"},
		{`{"model":"m"}x`, 13, "unexpected data after the top-level value"},
		{`{"model":"m"}{}`, 13, "unexpected data after the top-level value"},
		{`[1] 2`, 4, "unexpected data after the top-level value"},
		{"\xef\xbb\xbf{}", 0, synBOM},
		{`{"model":5,"messages":[`, 23, "unexpected end of input"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text"}` + "\x00" + `]}]}`, 66, "expected ',' or ']' after an array element"},
		{`{"a":"` + strings.Repeat("x", 100) + "\x01" + `"}`, 106, "control character in a string (it must be escaped)"},
		{`{"a":"` + strings.Repeat("x", 100), 106, "unexpected end of input"},
		{`{"a":"\`, 7, "unexpected end of input"},
		{`{"a":"\u00`, 10, "unexpected end of input"},
	} {
		var r Request
		err := Peek(ChatCompletions, []byte(c.body), &r)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, "body %q", c.body)
		require.Equal(t, CodeInvalidJSON, ve.Code, "body %q: %v", c.body, err)
		require.Equal(t, "", ve.Param)
		require.Equal(t, c.off, ve.Offset, "body %q: %v", c.body, err)
		require.Equal(t, "invalid JSON at byte "+itoa(c.off)+": "+c.what, ve.Message, "body %q", c.body)
		if c.what != "invalid UTF-8 in a string" { // encoding/json replaces invalid UTF-8 with U+FFFD
			require.False(t, json.Valid([]byte(c.body)), "encoding/json accepts %q", c.body)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestDepth(t *testing.T) {
	nest := func(levels int) string {
		// The top-level object is level 1; x holds levels-1 nested arrays.
		return `{"model":"m",` + chatMsgs + `,"x":` + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + `}`
	}
	peek(t, ChatCompletions, nest(MaxDepth))
	var r Request
	err := Peek(ChatCompletions, []byte(nest(MaxDepth+1)), &r)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "invalid JSON at byte "+itoa(len(`{"model":"m",`+chatMsgs+`,"x":`)+MaxDepth-1)+": nesting deeper than 512 levels", ve.Message)

	// Nesting inside a message counts from the top level too.
	deep := `{"model":"m","messages":[{"role":"user","content":"x","x":` + strings.Repeat("[", MaxDepth-2) + strings.Repeat("]", MaxDepth-2) + `}]}`
	err = Peek(ChatCompletions, []byte(deep), &r)
	require.ErrorAs(t, err, &ve)
	require.Contains(t, ve.Message, "nesting deeper than 512 levels")

	// A very deep body is refused without exhausting the stack.
	err = Peek(ChatCompletions, []byte(`{"x":`+strings.Repeat(`{"a":[`, 1<<20)), &r)
	require.ErrorAs(t, err, &ve)
	require.Equal(t, CodeInvalidJSON, ve.Code)
}

// TestSyntaxBeatsSemantics: a fault found before the body turns out malformed does not hide
// that it is malformed.
func TestSyntaxBeatsSemantics(t *testing.T) {
	var r Request
	err := Peek(ChatCompletions, []byte(`{"model":5,"messages":"x","temperature":9,"x":[1,}`), &r)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, CodeInvalidJSON, ve.Code)
	require.Equal(t, 49, ve.Offset)
}

func TestAppendErrorBody(t *testing.T) {
	ve := &ValidationError{Status: 400, Param: "messages[2].content", Code: CodeInvalidType,
		Message: `messages[2].content: expected a string or an array of content parts "x"`}
	require.Equal(t, `{"error":{"message":"messages[2].content: expected a string or an array of content parts \"x\"","type":"invalid_request_error","param":"messages[2].content","code":"invalid_type"}}`+"\n",
		string(AppendErrorBody(nil, ve, ChatCompletions)))
	require.Equal(t, `{"type":"error","error":{"type":"invalid_request_error","message":"messages[2].content: expected a string or an array of content parts \"x\""}}`+"\n",
		string(AppendErrorBody(nil, ve, Messages)))

	noParam := &ValidationError{Status: 400, Code: CodeInvalidJSON, Message: "invalid JSON at byte 0: the body is empty"}
	body := AppendErrorBody([]byte("prefix:"), noParam, Responses)
	require.Equal(t, `prefix:{"error":{"message":"invalid JSON at byte 0: the body is empty","type":"invalid_request_error","param":null,"code":"invalid_json"}}`+"\n", string(body))

	var v struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body[len("prefix:"):], &v))
	require.Nil(t, v.Error.Param)

	buf := make([]byte, 0, 512)
	require.Zero(t, testing.AllocsPerRun(100, func() { AppendErrorBody(buf, ve, ChatCompletions) }))
}

func TestPeekDoesNotAllocate(t *testing.T) {
	bodies := [][]byte{
		chatBody(1 << 10),
		chatBody(4 << 10),
		[]byte(`{"model":"org\/m","messages":[{"role":"\u0075ser","content":[{"typ\u0065":"text","text":"x"}]}],"user":"a\"b","stream":true}`),
		[]byte(`{"model":"c","max_tokens":10,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}],"stream":true,"temperature":0.3}`),
		[]byte(`{"model":"e","input":[[1,2,3],[4]],"user":"u"}`),
		[]byte(`{"model":"p","prompt":[1.0,2e0],"max_tokens":1024.0,"n":1e0}`),
		[]byte(`{"model":"m","messages":[{"role":"assistant","refusal":"no"}],"max_completion_tokens":3.0}`),
	}
	eps := []Endpoint{ChatCompletions, ChatCompletions, ChatCompletions, Messages, Embeddings, Completions, ChatCompletions}
	var r Request
	for i, b := range bodies {
		require.NoError(t, Peek(eps[i], b, &r))
		require.Zero(t, testing.AllocsPerRun(100, func() { _ = Peek(eps[i], b, &r) }), "body %d", i)
	}
}
