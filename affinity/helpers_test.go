package affinity

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/openai"
)

// chatBody returns a chat completions body of about size bytes as OpenAI SDKs send one: a
// system message, then user and assistant turns of English text with escapes (newlines,
// quotes) and some non-ASCII, a tools array, and the usual sampling fields.
func chatBody(size int) []byte {
	b := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant.\nAnswer briefly and cite sources."}`)
	turn := strconv.Quote("Could you explain how the \"prefix cache\" works in vLLM, and why a stable system prompt helps? Merci, ça m'aide beaucoup.\n")
	turn = turn[1 : len(turn)-1]
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

// chat builds a chat completions body from alternating user and assistant texts after a
// system prompt.
func chat(system string, turns ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"system","content":` + strconv.Quote(system) + `}`)
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		b.WriteString(`,{"role":"` + role + `","content":` + strconv.Quote(t) + `}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// fingerprint peeks body as openai.Peek would for the gateway and fingerprints it.
func fingerprint(t testing.TB, ep openai.Endpoint, body []byte) *Print {
	t.Helper()
	var r openai.Request
	require.NoError(t, openai.Peek(ep, body, &r))
	p := new(Print)
	require.NoError(t, Fingerprint(ep, body, r.Prompt, r.System, p))
	return p
}

// text returns n bytes of printable ASCII seeded by s, different for different seeds.
func text(s string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(s)
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(' ')
	}
	return b.String()[:n]
}
