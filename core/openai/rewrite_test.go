package openai

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// rewrite peeks body, rewrites its model to newModel and checks that only the model's token
// changed: the bytes before and after it are the body's, and the result decodes to the body's
// object with "model" replaced.
func rewrite(t *testing.T, ep Endpoint, body, newModel, wantModel string) []byte {
	t.Helper()
	var r Request
	require.NoError(t, Peek(ep, []byte(body), &r))
	out := RewriteModel([]byte(body), &r, newModel, nil)
	s := r.ModelSpan
	require.Equal(t, body[:s.Start], string(out[:s.Start]), "bytes before the model")
	require.Equal(t, body[s.End:], string(out[len(out)-(len(body)-s.End):]), "bytes after the model")

	var before, after map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &before))
	require.NoError(t, json.Unmarshal(out, &after))
	require.Equal(t, wantModel, after["model"])
	after["model"] = before["model"]
	require.Equal(t, before, after)

	var r2 Request
	require.NoError(t, Peek(ep, out, &r2), "the rewritten body is accepted")
	require.Equal(t, wantModel, string(r2.Model))
	return out
}

func TestRewriteModel(t *testing.T) {
	out := rewrite(t, ChatCompletions, `{"model":"fast","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")
	require.Equal(t, `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"stream":true}`, string(out))

	// White space around the value and a model last in the body.
	out = rewrite(t, ChatCompletions, "{\n  \"messages\" : [ {\"role\":\"user\",\"content\":\"hi\"} ] ,\n  \"model\"\t:  \"fast\"  \n}\n", "m2", "m2")
	require.Equal(t, "{\n  \"messages\" : [ {\"role\":\"user\",\"content\":\"hi\"} ] ,\n  \"model\"\t:  \"m2\"  \n}\n", string(out))

	// A key written with escapes is the model: its value is the one replaced.
	out = rewrite(t, Messages, `{"mod\u0065l":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "up", "up")
	require.Equal(t, `{"mod\u0065l":"up","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, string(out))

	// An escaped value is replaced whole.
	out = rewrite(t, Embeddings, `{"model":"org\/fa\u0073t","input":"x"}`, "org/fast-v2", "org/fast-v2")
	require.Equal(t, `{"model":"org/fast-v2","input":"x"}`, string(out))

	// "model" strings deeper in the body are not the model.
	out = rewrite(t, Responses, `{"input":[{"role":"user","content":"\"model\":\"x\""}],"metadata":{"model":"y"},"model":"a"}`, "b", "b")
	require.Equal(t, `{"input":[{"role":"user","content":"\"model\":\"x\""}],"metadata":{"model":"y"},"model":"b"}`, string(out))
}

func TestRewriteModelEscaping(t *testing.T) {
	const body = `{"model":"a","prompt":"p"}`
	for _, c := range []struct{ newModel, token, decoded string }{
		{`q"uote`, `"q\"uote"`, `q"uote`},
		{`back\slash`, `"back\\slash"`, `back\slash`},
		{"line\nbreak\ttab\x01", `"line\nbreak\ttab\u0001"`, "line\nbreak\ttab\x01"},
		{"modèle-日本-😀", `"modèle-日本-😀"`, "modèle-日本-😀"},
		{"sep\u2028", `"sep\u2028"`, "sep\u2028"},
		{"bad\xffutf8", `"bad\ufffdutf8"`, "bad\uFFFDutf8"},
		{"", `""`, ""},
	} {
		var r Request
		require.NoError(t, Peek(Completions, []byte(body), &r))
		out := RewriteModel([]byte(body), &r, c.newModel, nil)
		require.Equal(t, `{"model":`+c.token+`,"prompt":"p"}`, string(out), "model %q", c.newModel)
		var v map[string]any
		require.NoError(t, json.Unmarshal(out, &v))
		require.Equal(t, c.decoded, v["model"])
	}
}

func TestRewriteModelAppends(t *testing.T) {
	body := []byte(`{"model":"a","prompt":"p"}`)
	var r Request
	require.NoError(t, Peek(Completions, body, &r))
	dst := make([]byte, 0, 256)
	dst = append(dst, "HEAD"...)
	out := RewriteModel(body, &r, "bb", dst)
	require.Equal(t, `HEAD{"model":"bb","prompt":"p"}`, string(out))
	require.Equal(t, &dst[:1][0], &out[0], "appended in place")
	require.Zero(t, testing.AllocsPerRun(100, func() { RewriteModel(body, &r, "upstream/model-id", dst[:0]) }))

	// Without a model span the body is copied unchanged.
	require.Equal(t, string(body), string(RewriteModel(body, &Request{}, "x", nil)))
}

func BenchmarkRewriteModel1KiB(b *testing.B) {
	body := chatBody(1 << 10)
	var r Request
	if err := Peek(ChatCompletions, body, &r); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 2<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		dst = RewriteModel(body, &r, "meta-llama/Llama-3.1-8B-Instruct", dst[:0])
	}
}
