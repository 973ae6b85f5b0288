package llmsim

import (
	"encoding/binary"

	json "github.com/goccy/go-json"
)

// BytesPerToken is the simulator's tokenizer: a text of n bytes is ceil(n / 4) tokens
// (roughly what BPE tokenizers give for English). KV cache blocks are BlockSize × 4 bytes.
const BytesPerToken = 4

// CountTokens returns the token count of a text of n bytes: ceil(n / BytesPerToken).
func CountTokens(n int) int { return (n + BytesPerToken - 1) / BytesPerToken }

// chatMessage is one OpenAI chat message; Content is a string or an array of parts.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// IncludeObfuscation is accepted and has no effect: the padding it controls only
	// hides token lengths from network observers.
	IncludeObfuscation *bool `json:"include_obfuscation"`
}

// inferRequest is the union of the chat, completions and embeddings request fields the
// simulator reads (honoured, validated or refused: docs/llmsim.md lists which); unknown
// fields are ignored as vLLM and SGLang do.
type inferRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *wholeInt       `json:"max_tokens"`
	MaxCompletionTokens *wholeInt       `json:"max_completion_tokens"`
	N                   *wholeInt       `json:"n"`
	Tools               json.RawMessage `json:"tools"`
	Seed                *wholeInt       `json:"seed"`
	Dimensions          *wholeInt       `json:"dimensions"`
	EncodingFormat      *string         `json:"encoding_format"`
	CacheSalt           string          `json:"cache_salt"`
	Stop                json.RawMessage `json:"stop"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	Logprobs            json.RawMessage `json:"logprobs"` // chat: bool; completions: integer
	TopLogprobs         *wholeInt       `json:"top_logprobs"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	FunctionCall        json.RawMessage `json:"function_call"`
	Modalities          []string        `json:"modalities"`
	Audio               json.RawMessage `json:"audio"`
	WebSearchOptions    json.RawMessage `json:"web_search_options"`
	Echo                *bool           `json:"echo"`
	BestOf              *wholeInt       `json:"best_of"`
	Suffix              *string         `json:"suffix"`
}

// appendChatPrompt serialises messages (and tools, echoed first like a system prompt) into
// the text the simulator tokenises and hashes: "<|tools|>JSON\n" then "<|role|>content\n" per
// message, then the generation prompt "<|assistant|>". The serialisation is prefix-stable:
// a conversation extended by more messages shares its whole earlier prompt, and a reply the
// simulator produced, sent back as the assistant message, continues the cached blocks.
// The Responses and Messages APIs serialise their turns the same way (appendTurn), so one
// conversation has one prompt, and one cache entry, whichever API carries it.
func appendChatPrompt(dst []byte, msgs []chatMessage, tools json.RawMessage) []byte {
	dst = appendTools(dst, tools)
	for i := range msgs {
		m := &msgs[i]
		dst = appendTurnStart(dst, m.Role)
		dst = appendContent(dst, m.Content)
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			dst = append(dst, m.ToolCalls...)
		}
		dst = append(dst, '\n')
	}
	return appendGenerationPrompt(dst)
}

// appendTools appends "<|tools|>JSON\n" when tools are given (tools are part of the prompt).
func appendTools(dst []byte, tools json.RawMessage) []byte {
	if len(tools) == 0 || string(tools) == "null" || string(tools) == "[]" {
		return dst
	}
	dst = append(dst, "<|tools|>"...)
	dst = append(dst, tools...)
	return append(dst, '\n')
}

// appendTurnStart appends "<|role|>", the start of one message; its content and "\n" follow.
func appendTurnStart(dst []byte, role string) []byte {
	dst = append(dst, "<|"...)
	dst = append(dst, role...)
	return append(dst, "|>"...)
}

// appendTurn appends one whole message of text content: "<|role|>text\n".
func appendTurn(dst []byte, role, text string) []byte {
	dst = appendTurnStart(dst, role)
	dst = append(dst, text...)
	return append(dst, '\n')
}

// appendGenerationPrompt appends "<|assistant|>", where the reply starts.
func appendGenerationPrompt(dst []byte) []byte { return append(dst, "<|assistant|>"...) }

// contentPart is one element of a content array: a text part of any API ("text",
// "input_text", "output_text") or another part (an image, a tool result) kept as JSON.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// isTextPart reports whether a part of type typ with a text field is plain text in the prompt.
func isTextPart(typ string) bool {
	return typ == "text" || typ == "input_text" || typ == "output_text"
}

// appendContent appends a message's content: a JSON string's text; for an array of parts,
// the text of each text part and the raw JSON of any other part (an image is in the prompt
// as its JSON), so that text sent as a string or as text parts is the same prompt; the raw
// JSON of any other value.
func appendContent(dst []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return dst
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return append(dst, s...)
		}
	case '[':
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) == nil {
			for _, part := range parts {
				var cp contentPart
				if json.Unmarshal(part, &cp) == nil && cp.Text != nil && isTextPart(cp.Type) {
					dst = append(dst, *cp.Text...)
				} else {
					dst = append(dst, part...)
				}
			}
			return dst
		}
	}
	return append(dst, raw...)
}

// appendTextInput appends a completions prompt or embeddings input: a string, or an array of
// strings joined by "\n"; other JSON (token arrays) is appended raw. ok is false when raw
// is absent or an empty string/array.
func appendTextInput(dst []byte, raw json.RawMessage) ([]byte, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return dst, false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			return dst, false
		}
		return append(dst, s...), true
	case '[':
		var ss []string
		if json.Unmarshal(raw, &ss) == nil {
			if len(ss) == 0 {
				return dst, false
			}
			for i, s := range ss {
				if i > 0 {
					dst = append(dst, '\n')
				}
				dst = append(dst, s...)
			}
			return dst, true
		}
		if string(raw) == "[]" {
			return dst, false
		}
		return append(dst, raw...), true
	}
	return dst, false
}

// hash64 is a fast deterministic 64-bit hash (FNV-style over 8-byte words, finished with
// a splitmix64 mix): stable across processes so that handles and outputs agree fleet-wide.
func hash64(h uint64, b []byte) uint64 {
	const prime = 0x100000001b3
	h ^= 0xcbf29ce484222325
	for len(b) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * prime
		h ^= h >> 29
		b = b[8:]
	}
	for _, c := range b {
		h = (h ^ uint64(c)) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ (h >> 31)
}

// appendBlockHashes appends the chained hashes of the prompt's full KV blocks: block i
// covers bytes [i×B, (i+1)×B) with B = blockTokens × BytesPerToken, and its hash covers the
// previous block's hash (seed for the first) and its own bytes, so equal hashes mean equal whole prefixes (as in
// vLLM's prefix caching).
func appendBlockHashes(dst []uint64, prompt []byte, blockTokens int, seed uint64) []uint64 {
	bb := blockTokens * BytesPerToken
	prev := seed
	for off := 0; off+bb <= len(prompt); off += bb {
		prev = hash64(prev, prompt[off:off+bb])
		dst = append(dst, prev)
	}
	return dst
}

// saltHash scopes a prompt's block hashes by a prompt cache key or cache salt ("" → 0: the
// shared, unscoped cache).
func saltHash(salt string) uint64 {
	if salt == "" {
		return 0
	}
	return hash64(0x5a17, []byte(salt))
}

// promptHash hashes a whole prompt (binds P/D handles to their request).
func promptHash(prompt []byte) uint64 { return hash64(0x5eed, prompt) }

// vocab is the output vocabulary: one entry per token, with multi-byte UTF-8 (accents, CJK,
// emoji with modifiers and ZWJ sequences) so that a relay that splits UTF-8 sequences at
// read boundaries corrupts visible text.
var vocab = [...]string{
	" the", " model", " token", " stream", " cache", " route", " gateway", " prefix",
	" latency", " batch", " decode", " prefill", " edge", " upstream", " answer", ".",
	",", " and", " of", " to", " is", " in", " a", " fast",
	" café", " naïve", " über", " señor", " 你好", " 世界", " 模型", " 缓存",
	" 東京", " 한국어", " Ελλάδα", " привет", " 🚀", " ✨", " 👍🏽", " 👩‍💻",
	" 🇯🇵", " ∑", " →", " 数据流", " émoji", " 🙂", "\n", " Ω",
}

// rng is a splitmix64 generator: deterministic, allocation-free.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// float returns a value in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// seedFor derives a request's generator from the fleet seed, the request's own seed and its
// prompt: the same request on the same seed produces the same tokens on every instance.
func seedFor(fleetSeed uint64, reqSeed *wholeInt, prompt []byte) rng {
	s := fleetSeed ^ promptHash(prompt)
	if reqSeed != nil {
		s ^= uint64(*reqSeed) * 0x9e3779b97f4a7c15
	}
	return rng(s)
}
