package affinity

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

// samePrint requires that every body gives the same canonical stream, checkpoints and
// conversation key as the first.
func samePrint(t *testing.T, ep openai.Endpoint, bodies ...string) {
	t.Helper()
	want := fingerprint(t, ep, []byte(bodies[0]))
	for _, b := range bodies[1:] {
		got := fingerprint(t, ep, []byte(b))
		require.Equal(t, string(want.Canonical()), string(got.Canonical()), "body: %s", b)
		require.Equal(t, want.Checkpoints, got.Checkpoints, "body: %s", b)
		require.Equal(t, want.Conversation, got.Conversation, "body: %s", b)
	}
}

// differentPrint requires that each body's conversation key differs from the first's.
func differentPrint(t *testing.T, ep openai.Endpoint, bodies ...string) {
	t.Helper()
	base := fingerprint(t, ep, []byte(bodies[0]))
	for _, b := range bodies[1:] {
		got := fingerprint(t, ep, []byte(b))
		require.NotEqual(t, string(base.Canonical()), string(got.Canonical()), "body: %s", b)
		require.NotEqual(t, base.Conversation, got.Conversation, "body: %s", b)
	}
}

func TestCanonicalStreamShape(t *testing.T) {
	body := `{"model":"gpt-4o","temperature":0.2,"prompt_cache_key":"tenant-a",
		"messages":[{"role":"system","content":"Be brief."},
			{"content":[{"type":"text","text":"hi"}],"role":"user","name":"bob"},
			{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"42"}],
		"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","default":1.0}}}}}]}`
	p := fingerprint(t, openai.ChatCompletions, []byte(body))
	require.Equal(t, `{"prompt_cache_key":"tenant-a",`+
		`"tools":[{"function":{"name":"f","parameters":{"properties":{"a":{"default":1.0,"type":"number"}},"type":"object"}},"type":"function"}],`+
		`"messages":[{"content":[{"text":"Be brief.","type":"text"}],"role":"system"},`+
		`{"content":[{"text":"hi","type":"text"}],"name":"bob","role":"user"},`+
		`{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"a\":1}","name":"f"},"id":"c1","type":"function"}]},`+
		`{"content":[{"text":"42","type":"text"}],"role":"tool","tool_call_id":"c1"}]}`, string(p.Canonical()))
	require.False(t, p.Truncated)
	require.Equal(t, len(p.Canonical()), p.Scanned)
}

func TestNormalisationKeyOrder(t *testing.T) {
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"hi","name":"a"}],"tools":[{"type":"function","function":{"name":"f","description":"d"}}]}`,
		`{"tools":[{"function":{"description":"d","name":"f"},"type":"function"}],"messages":[{"name":"a","content":"hi","role":"user"}],"model":"m"}`,
	)
	samePrint(t, openai.Messages,
		`{"model":"m","max_tokens":9,"system":"s","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"}]}]}`,
		`{"messages":[{"content":[{"content":"r","tool_use_id":"x","type":"tool_result"}],"role":"user"}],"system":"s","max_tokens":9,"model":"m"}`,
	)
}

func TestNormalisationWhitespace(t *testing.T) {
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"a  b\n"}]}`,
		" {\n\t\"model\" : \"m\" ,\r\n \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"a  b\\n\" } ] \n} ",
	)
}

func TestNormalisationEscapes(t *testing.T) {
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"hi/é😀\n\"\\ \u007f\u2028"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"\u0068i\/\u00E9\ud83d\ude00\u000a\u0022\u005c \u007F\u2028"}]}`,
		`{"model":"m","messages":[{"r\u006fle":"\u0075ser","c\u006fntent":"h\u0069\/\u00e9\uD83D\uDE00\n\"\\ `+"\x7f\u2028"+`"}]}`,
	)
	// Control characters have one spelling: the short escape where JSON has one.
	p := fingerprint(t, openai.ChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":"\u0008\u000c\u0001\b"}]}`))
	require.Contains(t, string(p.Canonical()), `"text":"\b\f\u0001\b"`)
	// A lone surrogate reads as U+FFFD, as encoding/json reads it.
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"x\ud800y"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x`+"\uFFFD"+`y"}]}`,
	)
}

func TestNormalisationIgnoresFieldsOutsideThePrompt(t *testing.T) {
	samePrint(t, openai.ChatCompletions,
		`{"model":"a","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"b","messages":[{"role":"user","content":"hi"}],"temperature":1.5,"top_p":0.5,"max_tokens":9,
			"max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},"metadata":{"k":"v"},
			"user":"u-1","n":2,"seed":4,"tool_choice":"auto","response_format":{"type":"json_object"}}`,
	)
	samePrint(t, openai.Responses,
		`{"model":"a","input":"hi","instructions":"s"}`,
		`{"model":"b","input":"hi","instructions":"s","max_output_tokens":5,"store":false,"stream":true,"user":"u","metadata":{"a":"b"},"temperature":0}`,
	)
	samePrint(t, openai.Messages,
		`{"model":"a","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"b","max_tokens":500,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u"},"stream":true,"temperature":0.5,"top_k":3}`,
	)
}

func TestNormalisationEquivalentShapes(t *testing.T) {
	// A string content is one text part; null members and empty arrays say nothing.
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}],"name":null},{"role":"assistant","content":"yo","tool_calls":[],"refusal":null}]}`,
	)
	// Anthropic cache_control marks where a cache entry ends; it is not prompt text.
	samePrint(t, openai.Messages,
		`{"model":"m","max_tokens":5,"system":"s","tools":[{"name":"t","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"t","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`,
	)
	// Responses: a string input is one user message; item ids, statuses and the type
	// "message" do not reach the prompt; input_text and output_text are text.
	samePrint(t, openai.Responses,
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","input":[{"type":"message","id":"msg_1","status":"completed","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
	)
	// Numbers are the values Python reads; of duplicate keys the last counts.
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"maximum":100.0,"minimum":-0.5,"default":0}}}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"g","name":"f","strict":true,"parameters":{"maximum":1e2,"minimum":-5.0E-1,"default":-0}}}]}`,
	)
	// No tools is no tools.
	samePrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":null,"prompt_cache_key":null}`,
	)
}

// A number reaches the prompt as the Python engines (vLLM, SGLang) render the value their
// JSON decoder read: an integer literal is an int, any other a float, so 1 and 1.0 render as
// "1" and "1.0", and 1.0, 1.00 and 1e0 alike. The canonical stream writes each number as
// Python's json module writes that value (json.dumps(json.loads(literal))).
func TestNumbersAreReadAsPythonReadsThem(t *testing.T) {
	for lit, want := range map[string]string{
		"1": "1", "0": "0", "-0": "0", "-17": "-17",
		"12345678901234567890123": "12345678901234567890123", // an int has every digit
		"9007199254740993":        "9007199254740993",
		"1.0":                     "1.0", "1.00": "1.0", "1e0": "1.0", "10E-1": "1.0", "1E2": "100.0", "1.5e3": "1500.0",
		"-0.0": "-0.0", "0.1": "0.1", "123.456e5": "12345600.0", "9007199254740993.0": "9007199254740992.0",
		"0.0001": "0.0001", "0.00001": "1e-05", "-1.25e-7": "-1.25e-07", "5e-324": "5e-324",
		"1e15": "1000000000000000.0", "9999999999999998.0": "9999999999999998.0", "1e16": "1e+16",
		"1e400": "Infinity", "-1e400": "-Infinity",
	} {
		p := fingerprint(t, openai.ChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"default":`+lit+`}}}]}`))
		require.Contains(t, string(p.Canonical()), `"default":`+want+`}`, "literal %s", lit)
	}
	tool := func(n string) string {
		return `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"t":{"type":"number","default":` + n + `}}}}}]}`
	}
	differentPrint(t, openai.ChatCompletions, tool("1"), tool("1.0"))
	differentPrint(t, openai.ChatCompletions, tool("100"), tool("1e2"))
	differentPrint(t, openai.ChatCompletions, tool("9007199254740993"), tool("9007199254740992"))
	differentPrint(t, openai.ChatCompletions, tool("0.0"), tool("-0.0"))
	samePrint(t, openai.ChatCompletions, tool("1.0"), tool("1e0"), tool("1.000"), tool("0.1E1"))
}

func TestNormalisationKeepsWhatReachesThePrompt(t *testing.T) {
	differentPrint(t, openai.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi "}]}`,
		`{"model":"m","messages":[{"role":"system","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi","name":"bob"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"k"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:x"}}]}]}`,
	)
	differentPrint(t, openai.Responses,
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":"hi","instructions":"s"}`,
		`{"model":"m","input":"hi","previous_response_id":"resp_1"}`,
		`{"model":"m","input":[{"role":"assistant","content":"hi"}]}`,
	)
}

func TestFingerprintSpansAreOnlyAShortcut(t *testing.T) {
	for _, c := range []struct {
		ep   openai.Endpoint
		body string
	}{
		{openai.ChatCompletions, string(chatBody(8 << 10))},
		{openai.Responses, `{"model":"m","input":[{"role":"user","content":"hi"}],"instructions":"be brief"}`},
		{openai.Messages, `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"}]}`},
	} {
		with := fingerprint(t, c.ep, []byte(c.body))
		var without Print
		require.NoError(t, Fingerprint(c.ep, []byte(c.body), openai.Span{}, openai.Span{}, &without))
		require.Equal(t, string(with.Canonical()), string(without.Canonical()))
		require.Equal(t, with.Checkpoints, without.Checkpoints)
	}
}

func TestFingerprintErrors(t *testing.T) {
	var p Print
	deepest := `{"messages":[{"role":"user","content":` + strings.Repeat(`{"a":`, MaxDepth-3) + `1` + strings.Repeat("}", MaxDepth-3) + `}]}`
	require.NoError(t, Fingerprint(openai.ChatCompletions, []byte(deepest), openai.Span{}, openai.Span{}, &p))
	for _, ep := range []openai.Endpoint{openai.Completions, openai.Embeddings, 0} {
		require.ErrorIs(t, Fingerprint(ep, []byte(`{"model":"m","prompt":"x"}`), openai.Span{}, openai.Span{}, &p), ErrUnsupportedEndpoint)
	}
	for _, body := range []string{``, `[]`, `"x"`, `{"model":"m",`, `{"messages":[{"role":"user","content":"x}]}`,
		`{"messages":[{"role":"user","content":tru}]}`, `{"messages":[{"role":"user","content":01}]}`,
		`{"messages":[{"role":"user","content":"\x"}]}`, `{"messages":[{"role":"user" "content":"x"}]}`,
		`{"messages":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
		`{"messages":[{"role":"user","content":` + strings.Repeat(`{"a":`, MaxDepth-2) + `1` + strings.Repeat("}", MaxDepth-2) + `}]}`} {
		require.ErrorIs(t, Fingerprint(openai.ChatCompletions, []byte(body), openai.Span{}, openai.Span{}, &p), ErrMalformed, body)
		require.Empty(t, p.Checkpoints)
		require.Zero(t, p.Scanned)
	}
}

// TestConversationKeyIsStable pins the conversation key of a fixed request: it is part of
// what gateway replicas agree on without talking (rendezvous hashing), so a change of the
// canonical form must be deliberate.
func TestConversationKeyIsStable(t *testing.T) {
	p := fingerprint(t, openai.ChatCompletions, chat("You are terse.", "What is a KV cache?", "A cache.", "More?"))
	require.Equal(t, `{"messages":[{"content":[{"text":"You are terse.","type":"text"}],"role":"system"},{"content":[{"text":"What is a KV cache?","type":"text"}],"role":"user"},{"content":[{"text":"A cache.","type":"text"}],"role":"assistant"},{"content":[{"text":"More?","type":"text"}],"role":"user"}]}`, string(p.Canonical()))
	require.Equal(t, uint64(0x2030e3919a489934), p.Conversation)
}

// A Responses item reference ({"id": ...}, with or without type "item_reference") stands for
// an earlier item the server puts in the prompt: its id is the item's content, so two
// conversations that reference different items differ, and the two spellings of one
// reference are one. A message item's own id still says nothing.
func TestResponsesItemReferencesKeepTheirID(t *testing.T) {
	conv := func(items string) string {
		return `{"model":"m","input":[` + items + `,{"role":"user","content":"Summarise it."}]}`
	}
	differentPrint(t, openai.Responses,
		conv(`{"id":"msg_1"}`),
		conv(`{"id":"msg_2"}`),
		conv(`{"type":"item_reference","id":"msg_2"}`),
		conv(`{"role":"user","content":"Summarise it."}`),
	)
	samePrint(t, openai.Responses,
		conv(`{"id":"msg_1"}`),
		conv(`{"type":"item_reference","id":"msg_1"}`),
		conv(`{"id":"msg_1","type":null}`),
		conv(` { "type" : "item_reference" , "id" : "msg_\u0031" } `),
	)
	p := fingerprint(t, openai.Responses, []byte(conv(`{"type":"item_reference","id":"msg_1"}`)))
	require.Contains(t, string(p.Canonical()), `"input":[{"id":"msg_1"},`)
	samePrint(t, openai.Responses,
		conv(`{"type":"message","id":"msg_1","role":"assistant","content":"ok"}`),
		conv(`{"type":"message","id":"msg_9","role":"assistant","content":"ok"}`),
	)
}
