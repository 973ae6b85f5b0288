package fuzz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-gw/sluice/core/openai"
)

var openaiEndpoints = [...]openai.Endpoint{openai.ChatCompletions, openai.Completions,
	openai.Embeddings, openai.Responses, openai.Messages}

// promptParam names the parameter whose span is Request.Prompt on each endpoint.
func promptParam(ep openai.Endpoint) string {
	switch ep {
	case openai.ChatCompletions, openai.Messages:
		return "messages"
	case openai.Completions:
		return "prompt"
	}
	return "input"
}

// stdString is s as encoding/json reads it back after encoding: each invalid UTF-8 byte
// becomes U+FFFD.
func stdString(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

// FuzzOpenAIPeek checks openai.Peek and openai.RewriteModel against encoding/json. Peek never
// panics and its errors are well-formed; a body it calls malformed, encoding/json refuses too
// (unless it holds invalid UTF-8, which encoding/json replaces, or nests deeper than Peek
// allows), and a body it refuses for another reason is valid JSON. For a body it accepts, the
// model, stream, include_usage, max_tokens, user and prompt it read are what encoding/json
// decodes into a map, and what a Go server decoding into a struct (case-insensitive keys)
// reads as model and stream; the rewritten body decodes to the same object with only "model"
// changed, and its bytes outside the model's token are the body's.
func FuzzOpenAIPeek(f *testing.F) {
	for _, s := range []struct {
		ep   uint8
		body string
	}{
		{0, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5}`},
		{0, `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]},{"role":"tool","content":[{"type":"text","text":"x"}]}],"user":"u\ud800"}`},
		{0, `{"mod\u0065l":"a\/b","messages":[{"role":"user","content":"x"}],"temperature":1.5,"n":1}`},
		{0, `{"model":"a","model":"b","messages":[{"role":"user","content":"x"}]}`},
		{0, `{"model":"a","Model":"b","messages":[{"role":"user","content":"x"}]}`},
		{0, `{"model":"a","ſtream":true,"messages":[{"role":"user","content":"x"}]}`},
		{1, `{"model":"m","prompt":["a","b"],"max_tokens":7,"stream":false}`},
		{1, `{"model":"m","prompt":[[1,2],[3]],"echo":true}`},
		{1, `{"model":"m","prompt":null,"max_tokens":3.0,"n":1e0}`},
		{0, `{"model":"m","messages":[{"role":"assistant","refusal":"no"},{"role":"assistant","content":null,"audio":{"id":"a"}}],"max_tokens":2.5}`},
		{0, "\xef\xbb\xbf{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}"},
		{2, `{"model":"e","input":[1,2,3],"encoding_format":"float"}`},
		{3, `{"model":"r","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call_output","output":"1"}],"instructions":"be brief","max_output_tokens":16}`},
		{4, `{"model":"c","max_tokens":64,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{4, `{"model":"c","max_tokens":null,"messages":[]}`},
		{0, `{"model":"m","messages":[{"role":"user","content":"x"}],"x":[1,{"a":[true,false,null,-0.5e+3]}]}`},
		{0, "{\"model\":\"\xff\",\"messages\":[]}"},
		{0, `[{"model":"m"}]`},
		{0, ``},
	} {
		f.Add([]byte(s.body), s.ep, "upstream/model-v2")
	}
	f.Add([]byte(`{"model":"m","prompt":"p"}`), uint8(1), "q\"\\\n\u2028\xff😀")

	f.Fuzz(func(t *testing.T, body []byte, epIndex uint8, newModel string) {
		checkPeek(t, openaiEndpoints[int(epIndex)%len(openaiEndpoints)], body, newModel)
	})
}

// FuzzOpenAIPeekMembers runs the checks of FuzzOpenAIPeek on bodies built around two fuzzed
// members, each key and value written raw, so that the fuzzer explores key spellings
// (escapes, case, look-alike letters) and values beside a valid request rather than spending
// its time on bodies that are not JSON.
func FuzzOpenAIPeekMembers(f *testing.F) {
	for _, s := range [][4]string{
		{`model`, `"b"`, `stream`, `true`},
		{`mod\u0065l`, `"b"`, `Stream`, `true`},
		{`MODEL`, `"b"`, `ſtream`, `false`},
		{`stream`, `null`, `stream_options`, `{"include_usage":true}`},
		{`max_tokens`, `1`, `max_to\u212aens`, `2`},
		{`\u006d\u006f\u0064\u0065\u006c`, `"a\ud800"`, `user`, `"\u0000"`},
		{`messages`, `[]`, `prompt`, `[[1,2]]`},
		{`input`, `[{"type":"function_call"}]`, `temperature`, `1e-400`},
		{`stream`, `true`, `x`, `[1,{"model":"c"}]`},
	} {
		f.Add(s[0], s[1], s[2], s[3], uint8(0), "up")
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, epIndex uint8, newModel string) {
		ep := openaiEndpoints[int(epIndex)%len(openaiEndpoints)]
		var head string
		switch ep {
		case openai.ChatCompletions:
			head = `"messages":[{"role":"user","content":"hi"}]`
		case openai.Completions:
			head = `"prompt":"hi"`
		case openai.Embeddings, openai.Responses:
			head = `"input":"hi"`
		case openai.Messages:
			head = `"max_tokens":8,"messages":[{"role":"user","content":"hi"}]`
		}
		body := `{"model":"a",` + head + `,"` + k1 + `":` + v1 + `,"` + k2 + `":` + v2 + `}`
		checkPeek(t, ep, []byte(body), newModel)
	})
}

// peekCost bounds the work of peeking a body and rewriting its model.
var peekCost = linearCost{PerByte: 16, Fixed: 256}

// checkPeek peeks body as a request to ep and checks the result against encoding/json, as
// FuzzOpenAIPeek describes, and checks that the work grows linearly with the body.
func checkPeek(t *testing.T, ep openai.Endpoint, body []byte, newModel string) {
	t.Helper()
	checkCost(t, peekCost, body, func(body []byte) {
		var r openai.Request
		if openai.Peek(ep, body, &r) == nil {
			openai.RewriteModel(body, &r, newModel, nil)
		}
	})
	orig := bytes.Clone(body)
	var r openai.Request
	err := openai.Peek(ep, body, &r)
	if !bytes.Equal(body, orig) {
		t.Fatal("Peek modified the body")
	}
	if err != nil {
		var ve *openai.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
		}
		if ve.Status != 400 || ve.Code == "" || ve.Message == "" || !strings.HasPrefix(ve.Message, ve.Param) {
			t.Fatalf("malformed error %+v", ve)
		}
		if ve.Code == openai.CodeInvalidJSON {
			if ve.Offset < 0 || ve.Offset > len(body) || ve.Param != "" {
				t.Fatalf("syntax error %+v for a %d-byte body", ve, len(body))
			}
			if utf8.Valid(body) && !strings.Contains(ve.Message, "nesting") && json.Valid(body) {
				t.Fatalf("Peek calls a body encoding/json accepts malformed: %v", ve)
			}
		} else if ve.Offset != -1 || !json.Valid(body) {
			t.Fatalf("semantic error %+v for a body that is not valid JSON", ve)
		}
		return
	}

	var m map[string]any
	if err := decodeJSON(body, &m); err != nil {
		t.Fatalf("Peek accepted a body encoding/json refuses: %v", err)
	}
	if model, ok := m["model"].(string); !ok || model != string(r.Model) {
		t.Fatalf("Peek read model %q, encoding/json %#v", r.Model, m["model"])
	}
	if stream, _ := m["stream"].(bool); stream != r.Stream {
		t.Fatalf("Peek read stream %v, encoding/json %#v", r.Stream, m["stream"])
	}
	// What a Go server decoding into a struct reads: keys match case-insensitively.
	var goServer struct {
		Model  string `json:"model"`
		Stream *bool  `json:"stream"`
	}
	if err := json.Unmarshal(body, &goServer); err != nil {
		t.Fatalf("a struct decode fails on an accepted body: %v", err)
	}
	if goServer.Model != string(r.Model) || (goServer.Stream != nil && *goServer.Stream) != r.Stream {
		t.Fatalf("a Go server reads model %q stream %v, Peek %q %v", goServer.Model, goServer.Stream, r.Model, r.Stream)
	}
	if ep != openai.Embeddings && ep != openai.Messages {
		so, _ := m["stream_options"].(map[string]any)
		if iu, _ := so["include_usage"].(bool); iu != r.IncludeUsage {
			t.Fatalf("Peek read include_usage %v, encoding/json %#v", r.IncludeUsage, m["stream_options"])
		}
	}
	if ep != openai.Embeddings && ep != openai.Responses {
		mt := 0.0
		if n, ok := m["max_tokens"].(json.Number); ok {
			var err error
			if mt, err = n.Float64(); err != nil {
				t.Fatalf("Peek accepted max_tokens %s: %v", n, err)
			}
		}
		if mt != float64(r.MaxTokens) {
			t.Fatalf("Peek read max_tokens %d, encoding/json %#v", r.MaxTokens, m["max_tokens"])
		}
	}
	if ep != openai.Messages {
		if u, _ := m["user"].(string); u != string(r.User) || (m["user"] == nil) != (r.User == nil) {
			t.Fatalf("Peek read user %q, encoding/json %#v", r.User, m["user"])
		}
	}
	want := m[promptParam(ep)]
	if r.Prompt.Present() {
		var got any
		if err := decodeJSON(r.Prompt.Of(body), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Prompt span %q is not %s %#v (%v)", r.Prompt.Of(body), promptParam(ep), want, err)
		}
	} else if want != nil {
		t.Fatalf("no Prompt span, but %s is %#v", promptParam(ep), want)
	}

	out := openai.RewriteModel(body, &r, newModel, nil)
	s := r.ModelSpan
	if !bytes.Equal(out[:s.Start], body[:s.Start]) || !bytes.Equal(out[len(out)-(len(body)-s.End):], body[s.End:]) {
		t.Fatalf("RewriteModel changed bytes outside the model: %q -> %q", body, out)
	}
	var m2 map[string]any
	if err := decodeJSON(out, &m2); err != nil {
		t.Fatalf("RewriteModel output %q does not decode: %v", out, err)
	}
	if m2["model"] != stdString(newModel) {
		t.Fatalf("rewritten model %#v, want %q", m2["model"], stdString(newModel))
	}
	m2["model"] = m["model"]
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("RewriteModel changed more than the model: %q -> %q", body, out)
	}
}

// decodeJSON is json.Unmarshal with numbers kept as json.Number: JSON (RFC 8259 §6) puts no
// bound on a number's magnitude, and a value such as 1e400, which a float64 cannot hold, is
// still valid JSON that the gateway passes through to the upstream.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("data after the top-level value (%v)", err)
	}
	return nil
}
