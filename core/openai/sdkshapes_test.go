package openai

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Messages the SDKs' own types build and OpenAI's API (or vLLM) takes pass Peek.
func TestPeekTakesWhatTheSDKsBuild(t *testing.T) {
	// openai-go's ChatCompletionMessage.ToParam (the assistant's answer put back in the
	// history) leaves content out when the answer was a refusal or audio; the Node SDK's
	// ChatCompletionAssistantMessageParam has content, refusal and audio all optional.
	for _, msg := range []string{
		`{"role":"assistant","refusal":"I can't help with that."}`,
		`{"role":"assistant","content":null,"refusal":"No."}`,
		`{"role":"assistant","audio":{"id":"audio_abc123"}}`,
		`{"role":"assistant","content":null,"audio":{"id":"audio_abc123"}}`,
		`{"role":"assistant","content":[{"type":"refusal","refusal":"No."}]}`,
		`{"role":"assistant","content":[{"type":"text","text":"a"}],"name":"bot"}`,
		`{"role":"developer","content":[{"type":"text","text":"Be brief."}]}`,
		`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"42"}]}`,
		`{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},{"type":"file","file":{"file_id":"file-1"}}]}`,
	} {
		peek(t, ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"hi"},`+msg+`]}`)
	}

	// Completions' prompt is nullable in OpenAI's API and in the SDKs' types (Node:
	// "prompt: string | ... | null"; Python: Union[..., None]): null is "<|endoftext|>".
	r := peek(t, Completions, `{"model":"m","prompt":null,"max_tokens":5}`)
	require.False(t, r.Prompt.Present())
	require.Equal(t, int64(5), r.OutputCap())

	// Responses input items the SDKs build besides messages.
	peek(t, Responses, `{"model":"m","input":[
		{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:,","detail":"auto"},{"type":"input_file","file_id":"file-1"}]},
		{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"yo","annotations":[]},{"type":"refusal","refusal":"no"}]},
		{"type":"reasoning","id":"rs_1","summary":[]},
		{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c","output":"42"},
		{"type":"item_reference","id":"msg_2"},{"id":"msg_3"}
	]}`)
}

// An integer parameter written with a fraction or an exponent that has the value of an
// integer (3.0, 1e3) is that integer, as vLLM's pydantic models (lax mode) and llama.cpp read
// it; a value with a fractional part is refused.
func TestPeekIntegersWrittenAsFloats(t *testing.T) {
	for lit, want := range map[string]int64{
		"3.0": 3, "3.00": 3, "3e0": 3, "1e3": 1000, "1E+3": 1000, "30e-1": 3, "1.0000000000000001": 1,
		"9.223372036854775e18": 9223372036854774784,
	} {
		r := peek(t, ChatCompletions, `{"model":"m",`+chatMsgs+`,"max_tokens":`+lit+`,"max_completion_tokens":`+lit+`,"n":1.0}`)
		require.Equal(t, want, r.MaxTokens, "max_tokens %s", lit)
		require.Equal(t, want, r.MaxCompletionTokens, "max_completion_tokens %s", lit)
	}
	r := peek(t, Responses, `{"model":"m","input":"x","max_output_tokens":16.0}`)
	require.Equal(t, int64(16), r.OutputCap())
	r = peek(t, Completions, `{"model":"m","prompt":[1.0,2e0,3],"max_tokens":-0.0,"echo":true}`)
	require.Zero(t, r.MaxTokens)
	peek(t, Embeddings, `{"model":"m","input":[[1.0],[2E1]]}`)
	peek(t, Messages, `{"model":"m","max_tokens":1024.0,"top_k":0.0,`+chatMsgs+`}`)

	for _, c := range []errCase{
		{"max_tokens fraction", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":3.5}`, "max_tokens", CodeInvalidType, "max_tokens: expected an integer"},
		{"n fraction", ChatCompletions, `{"model":"m",` + chatMsgs + `,"n":1.5}`, "n", CodeInvalidType, "n: expected an integer"},
		{"max_tokens tiny fraction", Messages, `{"model":"m",` + chatMsgs + `,"max_tokens":1e-3}`, "max_tokens", CodeInvalidType, "max_tokens: expected an integer"},
		{"max_tokens float zero", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":0.0}`, "max_tokens", CodeBelowMinInteger, "max_tokens: must be at least 1"},
		{"max_tokens float overflow", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":9.3e18}`, "max_tokens", CodeAboveMaxInteger, "max_tokens: must be at most 9223372036854775807"},
		{"max_tokens 2^63 as float", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":9223372036854775807.0}`, "max_tokens", CodeAboveMaxInteger, "max_tokens: must be at most 9223372036854775807"},
		{"max_tokens infinite", ChatCompletions, `{"model":"m",` + chatMsgs + `,"max_tokens":1e400}`, "max_tokens", CodeAboveMaxInteger, "max_tokens: must be at most 9223372036854775807"},
		{"max_tokens negative float", Completions, `{"model":"m","prompt":"p","max_tokens":-1e400}`, "max_tokens", CodeBelowMinInteger, "max_tokens: must be at least 0"},
		{"token id fraction", Completions, `{"model":"m","prompt":[1,2.5]}`, "prompt[1]", CodeInvalidValue, "prompt[1]: expected a token id (an integer ≥ 0)"},
		{"token id negative float", Embeddings, `{"model":"m","input":[[1],[-2.0]]}`, "input[1][0]", CodeInvalidValue, "input[1][0]: expected a token id (an integer ≥ 0)"},
	} {
		t.Run(c.name, func(t *testing.T) { checkErr(t, c) })
	}
}

// A body that starts with a byte order mark is refused with a message that says so, not as
// an unexpected character: RFC 8259 (8.1) forbids adding one to JSON sent over a network,
// no SDK sends one, and Go upstreams (encoding/json) refuse it.
func TestPeekByteOrderMark(t *testing.T) {
	for _, c := range []struct{ body, what string }{
		{"\xef\xbb\xbf{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
			"the body starts with a UTF-8 byte order mark (EF BB BF), which JSON sent over a network must not have (RFC 8259, section 8.1)"},
		{"\xff\xfe{\x00}\x00", "the body is not UTF-8 (it starts with a UTF-16 or UTF-32 byte order mark); JSON sent over a network must be UTF-8 (RFC 8259, section 8.1)"},
		{"\xfe\xff\x00{\x00}", "the body is not UTF-8 (it starts with a UTF-16 or UTF-32 byte order mark); JSON sent over a network must be UTF-8 (RFC 8259, section 8.1)"},
		{"\x00\x00\xfe\xff\x00\x00\x00{", "the body is not UTF-8 (it starts with a UTF-16 or UTF-32 byte order mark); JSON sent over a network must be UTF-8 (RFC 8259, section 8.1)"},
	} {
		var r Request
		err := Peek(ChatCompletions, []byte(c.body), &r)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, "body %q", c.body)
		require.Equal(t, CodeInvalidJSON, ve.Code)
		require.Zero(t, ve.Offset)
		require.Equal(t, "invalid JSON at byte 0: "+c.what, ve.Message, "body %q", c.body)
	}
	// A BOM elsewhere is a character like any other: in a string it is text, outside one it
	// is not a value.
	peek(t, ChatCompletions, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xef\xbb\xbfx\"}]}")
	var r Request
	err := Peek(ChatCompletions, []byte(" \xef\xbb\xbf{}"), &r)
	require.EqualError(t, err, "invalid JSON at byte 1: expected a value")
}
