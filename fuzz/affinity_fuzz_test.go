package fuzz

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-gw/sluice/affinity"
	"github.com/sluice-gw/sluice/core/openai"
)

var affinityEndpoints = [...]openai.Endpoint{openai.ChatCompletions, openai.Responses, openai.Messages}

// FuzzAffinityCanonical checks the prefix fingerprint's normaliser. affinity.Fingerprint never
// panics, and its checkpoints are within bounds. For a body encoding/json reads, the same
// body re-encoded by encoding/json (keys sorted, white space dropped, strings re-escaped) and
// indented gives the same result: the same error, or the same canonical stream, checkpoints
// and conversation key; so does the body with every number spelled otherwise as Python reads
// it alike (a float in exponent form, -0 as 0: integers and floats stay apart, as the Python
// engines render 1 and 1.0 differently). When openai.Peek accepts the body, the spans it found
// change nothing either.
func FuzzAffinityCanonical(f *testing.F) {
	for _, s := range []struct {
		ep   uint8
		body string
	}{
		{0, `{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief.\n"},{"role":"user","content":[{"type":"text","text":"h\u0069 \/ \ud83d\ude00"}],"name":"bob"}],"temperature":0.5,"prompt_cache_key":"k"}`},
		{0, `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"1e2"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","maximum":1.5E+3}}}}}]}`},
		{0, `{"model":"m","messages":[{"content":"x","role":"user","role":"assistant"}],"x":[1,{"a":[true,false,null,-0.5e-3]}]}`},
		{0, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"enum":[1,1.0,-0,-0.0,1e0,1E400,-1e400,12345678901234567890123,0.00001,1e16,9007199254740993.0]}}}]}`},
		{1, `{"model":"r","input":[{"type":"message","id":"m1","status":"completed","role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call_output","call_id":"c","output":"1"}],"instructions":"be brief","previous_response_id":"resp_1"}`},
		{1, `{"model":"r","input":"hello \u00e9","instructions":null}`},
		{1, `{"model":"r","input":[{"id":"msg_1"},{"type":"item_reference","id":"msg_2"},{"id":"msg_3","type":null,"role":null},{"role":"user","content":"x"}]}`},
		{2, `{"model":"c","max_tokens":64,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}],"tools":[{"name":"t","input_schema":{}}]}`},
		{0, `{"model":"m","messages":[{"role":"user","content":"\u0000\u001f\u007f\u2028"}]}`},
		{0, `{"messages":[]}`},
		{0, `[]`},
		{0, ``},
	} {
		f.Add([]byte(s.body), s.ep)
	}
	// Objects nested to affinity.MaxDepth, where the walk's work per byte is highest.
	deep := `{"messages":[{"role":"user","content":[{"type":"x"` + strings.Repeat(`,"a":{"b":[1,2]`, affinity.MaxDepth-4) +
		strings.Repeat(`}`, affinity.MaxDepth-4) + `}]}]}`
	f.Add([]byte(deep), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, epIndex uint8) {
		ep := affinityEndpoints[int(epIndex)%len(affinityEndpoints)]
		checkCost(t, affinityCost(body), body, func(body []byte) {
			var p affinity.Print
			_ = affinity.Fingerprint(ep, body, openai.Span{}, openai.Span{}, &p)
		})
		var p affinity.Print
		err := affinity.Fingerprint(ep, body, openai.Span{}, openai.Span{}, &p)
		checkPrint(t, &p, err)

		var r openai.Request
		if openai.Peek(ep, body, &r) == nil {
			var q affinity.Print
			qerr := affinity.Fingerprint(ep, body, r.Prompt, r.System, &q)
			samePrint(t, "with Peek's spans", &p, err, &q, qerr)
		}

		var v any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber() // numbers keep their literal: whether it is an integer matters
		if !utf8.Valid(body) || dec.Decode(&v) != nil || dec.InputOffset() != int64(len(bytes.TrimRight(body, " \t\r\n"))) {
			return // encoding/json would change invalid UTF-8, or refuse the body
		}
		for _, enc := range []func(any) ([]byte, error){
			json.Marshal,
			func(v any) ([]byte, error) { return json.MarshalIndent(v, " ", "\t") },
			func(v any) ([]byte, error) { return json.Marshal(respell(v)) },
		} {
			again, merr := enc(v)
			if merr != nil {
				t.Fatalf("re-encoding: %v", merr)
			}
			var q affinity.Print
			qerr := affinity.Fingerprint(ep, again, openai.Span{}, openai.Span{}, &q)
			samePrint(t, "re-encoded as "+string(again), &p, err, &q, qerr)
		}
	})
}

// respell returns v, decoded with json.Decoder.UseNumber, with every number spelled
// otherwise but read alike by Python's json module: a float in exponent form with an upper-case
// E (one beyond float64's range as 1e999), an integer -0 as 0; integers keep their digits.
func respell(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = respell(e)
		}
	case []any:
		for i, e := range x {
			x[i] = respell(e)
		}
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if s == "-0" {
				return json.Number("0")
			}
			return x
		}
		f, err := strconv.ParseFloat(s, 64)
		switch {
		case math.IsInf(f, 0) && f > 0:
			return json.Number("1e999")
		case math.IsInf(f, 0):
			return json.Number("-1e999")
		case err != nil:
			return x
		}
		return json.Number(strings.Replace(strconv.FormatFloat(f, 'e', -1, 64), "e", "E", 1))
	}
	return v
}

// affinityCost bounds the work of fingerprinting body. An object's members are sorted before
// they are written, so the walk finds where each member's value ends before it writes any:
// every byte is scanned once by each object around it. The walk counts each object's and
// array's span, each string and the canonical stream it hashes, so the bound is linear in the
// body with a factor of its nesting, which affinity.MaxDepth caps at 64. (On bodies larger
// than a fuzz input, the walk's budget caps the factor: affinity.ErrTooCostly.)
func affinityCost(body []byte) linearCost {
	return linearCost{PerByte: 8 + 2*int64(nesting(body)), Fixed: 256}
}

// nesting is how deeply brackets nest in body outside strings (a JSON body's depth; the
// deepest point of anything else).
func nesting(body []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case (c == '}' || c == ']') && depth > 0:
			depth--
		}
	}
	return deepest
}

func checkPrint(t *testing.T, p *affinity.Print, err error) {
	t.Helper()
	if err != nil {
		if p.Scanned != 0 || len(p.Checkpoints) != 0 {
			t.Fatalf("error %v with a print", err)
		}
		return
	}
	if p.Scanned > affinity.MaxScanBytes || p.Scanned != len(p.Canonical()) {
		t.Fatalf("scanned %d of %d canonical bytes", p.Scanned, len(p.Canonical()))
	}
	if len(p.Checkpoints) > affinity.MaxCheckpoints {
		t.Fatalf("%d checkpoints", len(p.Checkpoints))
	}
	if p.ConversationPrefix < 0 || p.ConversationPrefix > p.Scanned {
		t.Fatalf("conversation key over %d of %d bytes", p.ConversationPrefix, p.Scanned)
	}
	prev := 0
	for _, cp := range p.Checkpoints {
		if cp.Prefix < affinity.MinPrefixBytes || cp.Prefix > p.Scanned || cp.Prefix <= prev {
			t.Fatalf("checkpoint at %d after %d in %d bytes", cp.Prefix, prev, p.Scanned)
		}
		prev = cp.Prefix
	}
}

func samePrint(t *testing.T, what string, p *affinity.Print, perr error, q *affinity.Print, qerr error) {
	t.Helper()
	if errors.Is(perr, affinity.ErrTooCostly) || errors.Is(qerr, affinity.ErrTooCostly) {
		return // the budget counts white space, which re-encoding changes
	}
	if perr != qerr {
		t.Fatalf("%s: error %v, want %v", what, qerr, perr)
	}
	if string(p.Canonical()) != string(q.Canonical()) {
		t.Fatalf("%s: canonical stream\n%s\nwant\n%s", what, q.Canonical(), p.Canonical())
	}
	if len(p.Checkpoints) != len(q.Checkpoints) || p.Conversation != q.Conversation || p.ConversationPrefix != q.ConversationPrefix {
		t.Fatalf("%s: %d checkpoints, conversation %x; want %d, %x", what,
			len(q.Checkpoints), q.Conversation, len(p.Checkpoints), p.Conversation)
	}
	for k := range p.Checkpoints {
		if p.Checkpoints[k] != q.Checkpoints[k] {
			t.Fatalf("%s: checkpoint %d is %+v, want %+v", what, k, q.Checkpoints[k], p.Checkpoints[k])
		}
	}
}
