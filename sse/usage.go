package sse

import (
	"bytes"

	"github.com/sluice-gw/sluice/internal/steps"
)

// done is the data of the event that ends an OpenAI stream.
var done = []byte("[DONE]")

// IsDone reports whether data, an event's Data, is the OpenAI stream
// terminator "[DONE]" (exact bytes, as OpenAI-compatible servers send it).
func IsDone(data []byte) bool { return bytes.Equal(data, done) }

// Usage is the token accounting of an OpenAI chat completion (the "usage"
// object of a chat.completion or of the last chat.completion.chunk when the
// request sets stream_options.include_usage). All counts are in tokens;
// fields absent from the object are 0.
type Usage struct {
	PromptTokens     int64 // "prompt_tokens"
	CompletionTokens int64 // "completion_tokens"
	TotalTokens      int64 // "total_tokens"
	CachedTokens     int64 // "prompt_tokens_details"."cached_tokens": prompt tokens served from the prefix (KV) cache
	ReasoningTokens  int64 // "completion_tokens_details"."reasoning_tokens"

	// The names of the OpenAI Responses API and the Anthropic Messages API.
	InputTokens          int64 // "input_tokens" (Anthropic: the prompt tokens not read from the cache)
	OutputTokens         int64 // "output_tokens"
	CacheReadInputTokens int64 // "cache_read_input_tokens" (Anthropic)

	// CachedKnown reports that the usage had an integer "cached_tokens" (in
	// "prompt_tokens_details" or "input_tokens_details"), so that a 0 in CachedTokens is a
	// count (no prompt token came from the cache) and not a server that does not report it.
	CachedKnown bool
}

// ParseUsage extracts the top-level "usage" object from a JSON object such
// as a chat.completion.chunk's data, without decoding the rest: it skips
// other members (strings, nested objects and arrays) and reads only the
// integer fields of Usage. It returns ok=false when data is not a JSON
// object, has no top-level "usage" member, the member is null or not an
// object, or the object is malformed. It does not allocate.
func ParseUsage(data []byte) (u Usage, ok bool) {
	// Most chunks carry no usage or "usage":null: a vectorised search for
	// `"usage"` followed by an object rules them out before any walk.
	if !mayHaveUsageObject(data) {
		return Usage{}, false
	}
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return Usage{}, false
	}
	i++
	for {
		key, vs, next, more, good := nextMember(data, i)
		if !good || !more {
			return Usage{}, false
		}
		if string(key) == "usage" {
			if vs >= len(data) || data[vs] != '{' {
				return Usage{}, false
			}
			return parseUsageObject(data, vs)
		}
		i = next
	}
}

// ParseMemberUsage is ParseUsage of the object that is the top-level member named member of
// data: the usage of a Responses API "response.completed" event ({"response":{…,"usage":…}})
// or of an Anthropic "message_start" event ({"message":{…,"usage":…}}). It does not allocate.
func ParseMemberUsage(data []byte, member string) (u Usage, ok bool) {
	if !mayHaveUsageObject(data) {
		return Usage{}, false
	}
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return Usage{}, false
	}
	i++
	for {
		key, vs, next, more, good := nextMember(data, i)
		if !good || !more {
			return Usage{}, false
		}
		if string(key) == member {
			if vs >= len(data) || data[vs] != '{' {
				return Usage{}, false
			}
			return ParseUsage(data[vs:valueEnd(data, vs, next)])
		}
		i = next
	}
}

var usageKey = []byte(`"usage"`)

// mayHaveUsageObject reports whether `"usage"`, white space, ':', white
// space and '{' occur anywhere in data (at any depth: the walk in
// ParseUsage decides whether it is the top-level member).
func mayHaveUsageObject(data []byte) bool {
	for {
		i := bytes.Index(data, usageKey)
		if i < 0 {
			steps.Add(len(data) + 1)
			return false
		}
		steps.Add(i + len(usageKey))
		data = data[i+len(usageKey):]
		j := skipWS(data, 0)
		if j < len(data) && data[j] == ':' {
			if k := skipWS(data, j+1); k < len(data) && data[k] == '{' {
				return true
			}
		}
	}
}

// parseUsageObject reads the usage object starting at data[i] == '{'.
func parseUsageObject(data []byte, i int) (u Usage, ok bool) {
	i++
	for {
		key, vs, next, more, good := nextMember(data, i)
		if !good {
			return Usage{}, false
		}
		if !more {
			return u, true
		}
		val := data[vs:valueEnd(data, vs, next)]
		switch string(key) {
		case "prompt_tokens":
			u.PromptTokens = parseInt(val)
		case "completion_tokens":
			u.CompletionTokens = parseInt(val)
		case "total_tokens":
			u.TotalTokens = parseInt(val)
		case "prompt_tokens_details", "input_tokens_details":
			u.CachedTokens, u.CachedKnown = detailInt(data, vs, "cached_tokens")
		case "completion_tokens_details", "output_tokens_details":
			u.ReasoningTokens = detailField(data, vs, "reasoning_tokens")
		case "input_tokens":
			u.InputTokens = parseInt(val)
		case "output_tokens":
			u.OutputTokens = parseInt(val)
		case "cache_read_input_tokens":
			u.CacheReadInputTokens = parseInt(val)
		}
		i = next
	}
}

// detailField returns the integer member name of the object at data[i], or
// 0 when data[i] is not an object (for example null) or has no such member.
func detailField(data []byte, i int, name string) int64 {
	n, _ := detailInt(data, i, name)
	return n
}

// detailInt is detailField that also reports whether the member was there with an integer
// value.
func detailInt(data []byte, i int, name string) (int64, bool) {
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	i++
	for {
		key, vs, next, more, good := nextMember(data, i)
		if !good || !more {
			return 0, false
		}
		if string(key) == name {
			v := data[vs:valueEnd(data, vs, next)]
			return parseInt(v), isInt(v)
		}
		i = next
	}
}

// isInt reports whether b is a JSON integer (an optional minus, then digits).
func isInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// nextMember reads one member of an object whose body starts at i (just
// after '{' or after the previous member). It returns the raw key bytes
// (escapes not decoded), the index of the value's first byte, the index to
// continue from, more=false at the closing '}', and good=false on malformed
// input.
func nextMember(data []byte, i int) (key []byte, valueStart, next int, more, good bool) {
	i = skipWS(data, i)
	if i < len(data) && data[i] == ',' {
		i = skipWS(data, i+1)
	}
	if i >= len(data) {
		return nil, 0, 0, false, false
	}
	if data[i] == '}' {
		return nil, 0, i + 1, false, true
	}
	if data[i] != '"' {
		return nil, 0, 0, false, false
	}
	end := skipString(data, i)
	if end < 0 {
		return nil, 0, 0, false, false
	}
	key = data[i+1 : end-1]
	i = skipWS(data, end)
	if i >= len(data) || data[i] != ':' {
		return nil, 0, 0, false, false
	}
	vs := skipWS(data, i+1)
	ve := skipValue(data, vs)
	if ve < 0 {
		return nil, 0, 0, false, false
	}
	return key, vs, ve, true, true
}

// valueEnd trims trailing white space from a scalar value ending before next.
func valueEnd(data []byte, vs, next int) int {
	for next > vs && isWS(data[next-1]) {
		next--
	}
	return next
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(data []byte, i int) int {
	start := i
	for i < len(data) && isWS(data[i]) {
		i++
	}
	steps.Add(i - start + 1)
	return i
}

// skipString returns the index just past the JSON string starting at
// data[i] == '"', or -1 if it is not terminated.
func skipString(data []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(data[i:], '"')
		if j < 0 {
			steps.Add(len(data) - i + 1)
			return -1
		}
		k := i + j
		// The quote is escaped if preceded by an odd number of backslashes.
		n := 0
		for k-1-n >= i && data[k-1-n] == '\\' {
			n++
		}
		steps.Add(j + 1 + n)
		if n%2 == 0 {
			return k + 1
		}
		i = k + 1
	}
}

// skipValue returns the index just past the JSON value starting at data[i],
// or -1 if it is malformed or unterminated. Objects and arrays are skipped
// iteratively (bracket depth counted, strings skipped), so nesting depth
// cannot exhaust the stack; brackets are not checked for matching kind.
func skipValue(data []byte, i int) int {
	end := scanValue(data, i)
	if end < 0 {
		steps.Add(len(data) - i + 1) // what a failed scan may have looked at
	} else {
		steps.Add(end - i + 1)
	}
	return end
}

func scanValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				if i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	case '}', ']', ',', ':':
		return -1
	}
	// Number, true, false, null: up to the next delimiter.
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// parseInt parses a JSON integer (optionally with a zero fraction or
// exponent-free decimal point ignored); anything else gives 0. Token
// counts are never negative, so a sign gives 0 too.
func parseInt(b []byte) int64 {
	var n int64
	for i, c := range b {
		if c == '.' && i > 0 {
			break
		}
		if c < '0' || c > '9' || n > (1<<63-1)/10-1 {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
