package sse

import (
	"strings"
	"testing"
)

func TestIsDone(t *testing.T) {
	for s, want := range map[string]bool{"[DONE]": true, "[DONE] ": false, "": false, "{}": false, "[done]": false} {
		if IsDone([]byte(s)) != want {
			t.Errorf("IsDone(%q) != %v", s, want)
		}
	}
}

// usageCases are JSON objects and the usage ParseUsage reads from each.
var usageCases = []struct {
	name, data string
	want       Usage
	ok         bool
}{
	{"final chunk",
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":34,"total_tokens":1234,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":5}}}`,
		Usage{PromptTokens: 1200, CompletionTokens: 34, TotalTokens: 1234, CachedTokens: 1024, ReasoningTokens: 5, CachedKnown: true}, true},
	{"responses API",
		`{"id":"resp_1","object":"response","usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":47}}`,
		Usage{InputTokens: 40, CachedTokens: 32, OutputTokens: 7, TotalTokens: 47, CachedKnown: true}, true},
	{"no cached prompt token",
		`{"usage":{"prompt_tokens":900,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":900}}`,
		Usage{PromptTokens: 900, TotalTokens: 900, CachedKnown: true}, true},
	{"details without cached tokens",
		`{"usage":{"prompt_tokens":900,"prompt_tokens_details":{"audio_tokens":0},"total_tokens":900}}`,
		Usage{PromptTokens: 900, TotalTokens: 900}, true},
	{"cached tokens null",
		`{"usage":{"prompt_tokens":900,"prompt_tokens_details":{"cached_tokens":null},"total_tokens":900}}`,
		Usage{PromptTokens: 900, TotalTokens: 900}, true},
	{"messages API",
		`{"id":"msg_1","type":"message","usage":{"input_tokens":8,"cache_read_input_tokens":32,"output_tokens":3}}`,
		Usage{InputTokens: 8, CacheReadInputTokens: 32, OutputTokens: 3}, true},
	{"whitespace and order",
		"{ \"usage\" : { \"total_tokens\" : 3 , \"prompt_tokens\":2,\n\"completion_tokens\":1 } , \"choices\": [] }",
		Usage{PromptTokens: 2, CompletionTokens: 1, TotalTokens: 3}, true},
	{"null usage", `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, Usage{}, false},
	{"absent", `{"choices":[{"delta":{"content":"x"}}]}`, Usage{}, false},
	{"usage in content is not usage",
		`{"choices":[{"delta":{"content":"\"usage\":{\"prompt_tokens\":9}"}}],"usage":null}`, Usage{}, false},
	{"nested usage key is not top level",
		`{"choices":[{"usage":{"prompt_tokens":9}}],"x":{"usage":{"total_tokens":9}}}`, Usage{}, false},
	{"details null",
		`{"usage":{"prompt_tokens":5,"prompt_tokens_details":null,"total_tokens":5}}`,
		Usage{PromptTokens: 5, TotalTokens: 5}, true},
	{"empty usage", `{"usage":{}}`, Usage{}, true},
	{"malformed", `{"usage":{"prompt_tokens":5,`, Usage{}, false},
	{"not an object", `["usage"]`, Usage{}, false},
	{"usage not object", `{"usage":5}`, Usage{}, false},
	{"escaped quote before", `{"a":"x\\","usage":{"total_tokens":4}}`, Usage{TotalTokens: 4}, true},
	{"unterminated string", `{"a":"x\",usage":{"total_tokens":4}}`, Usage{}, false},
}

func TestParseUsage(t *testing.T) {
	for _, c := range usageCases {
		got, ok := ParseUsage([]byte(c.data))
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
	deep := `{"a":` + strings.Repeat("[", 100000) + `,"usage":{}}`
	if _, ok := ParseUsage([]byte(deep)); ok {
		t.Error("deep nesting: usage found inside unterminated array")
	}
}

func TestParseUsageDoesNotAllocate(t *testing.T) {
	data := []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":1}}}`)
	if n := testing.AllocsPerRun(100, func() { ParseUsage(data) }); n != 0 {
		t.Fatalf("ParseUsage allocates %v times", n)
	}
}

func TestParseMemberUsage(t *testing.T) {
	u, ok := ParseMemberUsage([]byte(`{"type":"response.completed","sequence_number":9,"response":{"id":"r","usage":{"input_tokens":4,"output_tokens":2}}}`), "response")
	if !ok || u.InputTokens != 4 || u.OutputTokens != 2 {
		t.Fatalf("response.completed: %+v %v", u, ok)
	}
	u, ok = ParseMemberUsage([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":3,"cache_read_input_tokens":5,"output_tokens":1}}}`), "message")
	if !ok || u.InputTokens != 3 || u.CacheReadInputTokens != 5 {
		t.Fatalf("message_start: %+v %v", u, ok)
	}
	if _, ok := ParseMemberUsage([]byte(`{"usage":{"input_tokens":3},"message":{}}`), "message"); ok {
		t.Fatal("a top-level usage is not the member's")
	}
}
