package openai

import (
	"encoding/json"
	"strconv"
	"testing"

	gojson "github.com/goccy/go-json"
)

// chatBody returns a chat completions body of about size bytes as OpenAI SDKs send one: a
// system message, then user and assistant turns of English text with escapes (newlines,
// quotes) and some non-ASCII, a tools array, and the usual sampling fields.
func chatBody(size int) []byte {
	b := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant.\nAnswer briefly and cite sources."}`)
	turn := strconv.Quote("Could you explain how the \"prefix cache\" works in vLLM, and why a stable system prompt helps? Merci, ça m'aide beaucoup.\n")
	turn = turn[1 : len(turn)-1] // the JSON string's body: \" and \n escaped, UTF-8 kept
	for i := 0; len(b) < size-400; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		b = append(b, `,{"role":"`+role+`","content":"`...)
		for n := 0; n < 1+i%3 && len(b) < size-400; n++ {
			b = append(b, turn...)
		}
		b = append(b, `"}`...)
	}
	b = append(b, `],"tools":[{"type":"function","function":{"name":"search","description":"Search the web","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}],"tool_choice":"auto","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":512,"temperature":0.7,"top_p":0.95,"user":"user-1234","prompt_cache_key":"tenant-a"}`...)
	return b
}

func benchPeek(b *testing.B, size int) {
	body := chatBody(size)
	var r Request
	if err := Peek(ChatCompletions, body, &r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Peek(ChatCompletions, body, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPeekChat1KiB(b *testing.B)  { benchPeek(b, 1<<10) }
func BenchmarkPeekChat4KiB(b *testing.B)  { benchPeek(b, 4<<10) }
func BenchmarkPeekChat64KiB(b *testing.B) { benchPeek(b, 64<<10) }

// fixedChat is the decode-into-a-struct alternative to Peek the package was measured
// against: the fields Peek reads, the bulky ones as raw JSON.
type fixedChat struct {
	Model         string          `json:"model"`
	Stream        *bool           `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
	MaxTokens     *int64          `json:"max_tokens"`
	Messages      json.RawMessage `json:"messages"`
	Temperature   *float64        `json:"temperature"`
	User          *string         `json:"user"`
}

func benchStruct(b *testing.B, size int, unmarshal func([]byte, any) error) {
	body := chatBody(size)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var v fixedChat
		if err := unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGoccyStructChat1KiB(b *testing.B)  { benchStruct(b, 1<<10, gojson.Unmarshal) }
func BenchmarkGoccyStructChat64KiB(b *testing.B) { benchStruct(b, 64<<10, gojson.Unmarshal) }
func BenchmarkGoccyUnmarshalOfChat1KiB(b *testing.B) {
	benchStruct(b, 1<<10, func(d []byte, v any) error { return gojson.UnmarshalOf(d, v.(*fixedChat)) })
}
func BenchmarkStdStructChat1KiB(b *testing.B)  { benchStruct(b, 1<<10, json.Unmarshal) }
func BenchmarkStdStructChat64KiB(b *testing.B) { benchStruct(b, 64<<10, json.Unmarshal) }
