package llmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestChatStreamFlushesEachEvent(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) {
		ic.TTFT = Duration(300 * time.Millisecond)
		ic.ITL = Duration(15 * time.Millisecond)
	})
	c := newClient()
	start := time.Now()
	resp := post(t, context.Background(), c, url+"/v1/chat/completions", chatBody("hello", true, ""), nil)
	headersAt := time.Now()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	if len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("Transfer-Encoding %v, want chunked", resp.TransferEncoding)
	}
	evs, err := readEvents(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 8 tokens + finish + usage + [DONE]
	if len(evs) != 11 {
		t.Fatalf("%d events, want 11", len(evs))
	}
	if evs[0].at.Sub(headersAt) < 150*time.Millisecond || evs[0].at.Sub(start) < 300*time.Millisecond {
		t.Fatalf("headers at %v, first event at %v: headers must come before the TTFT", headersAt.Sub(start), evs[0].at.Sub(start))
	}
	// Events arrive one by one, spread over the ITL schedule (not in one burst): at least half
	// of it, as a reader on a loaded machine may stamp the first event late.
	if spread := evs[7].at.Sub(evs[0].at); spread < 7*15*time.Millisecond/2 {
		t.Fatalf("8 tokens arrived within %v; want them about 15ms apart", spread)
	}
	first := parseChunk(t, evs[0].data)
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %s", evs[0].data)
	}
	fin := parseChunk(t, evs[8].data)
	if fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" {
		t.Fatalf("finish chunk %s", evs[8].data)
	}
	u := parseChunk(t, evs[9].data)
	if u.Usage == nil || u.Usage.CompletionTokens != 8 || u.Usage.PromptTokens == 0 || len(u.Choices) != 0 {
		t.Fatalf("usage chunk %s", evs[9].data)
	}
	if u.Usage.TotalTokens != u.Usage.PromptTokens+8 {
		t.Fatalf("total_tokens %d", u.Usage.TotalTokens)
	}
	if evs[10].data != "[DONE]" {
		t.Fatalf("last event %q", evs[10].data)
	}
	if !utf8.ValidString(content(t, evs)) {
		t.Fatal("content is not valid UTF-8")
	}
}

func TestChatStreamWithoutUsage(t *testing.T) {
	_, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`, nil)
	defer resp.Body.Close()
	evs, err := readEvents(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 10 || evs[9].data != "[DONE]" {
		t.Fatalf("%d events, last %q; want 8 tokens + finish + [DONE]", len(evs), evs[len(evs)-1].data)
	}
	for _, e := range evs[:9] {
		if strings.Contains(e.data, `"usage"`) {
			t.Fatalf("usage without include_usage: %s", e.data)
		}
	}
}

type completion struct {
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func doCompletion(t *testing.T, c *http.Client, url, path, body string) completion {
	t.Helper()
	resp := post(t, context.Background(), c, url+path, body, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out completion
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out
}

func TestChatNonStreamAndMaxTokens(t *testing.T) {
	_, url := startOne(t, nil)
	c := newClient()
	for _, tc := range []struct {
		extra  string
		tokens int
		finish string
	}{
		{"", 8, "stop"},
		{`"max_tokens":3`, 3, "length"},
		{`"max_completion_tokens":2,"max_tokens":5`, 2, "length"},
		{`"max_tokens":100`, 8, "stop"},
	} {
		out := doCompletion(t, c, url, "/v1/chat/completions", chatBody("hi", false, tc.extra))
		if out.Object != "chat.completion" || out.Usage.CompletionTokens != tc.tokens ||
			out.Choices[0].FinishReason != tc.finish || out.Choices[0].Message.Role != "assistant" {
			t.Fatalf("%s: %+v", tc.extra, out)
		}
	}
}

func TestOutputDeterministicForSeed(t *testing.T) {
	_, url1 := startOne(t, nil)
	_, url2 := startOne(t, nil)
	c := newClient()
	body := chatBody("same prompt", false, `"max_tokens":8`)
	a := doCompletion(t, c, url1, "/v1/chat/completions", body).Choices[0].Message.Content
	b := doCompletion(t, c, url2, "/v1/chat/completions", body).Choices[0].Message.Content
	if a != b || a == "" {
		t.Fatalf("same seed and request gave %q and %q", a, b)
	}
	d := doCompletion(t, c, url1, "/v1/chat/completions", chatBody("another prompt", false, "")).Choices[0].Message.Content
	if d == a {
		t.Fatalf("different prompts gave the same output %q", a)
	}
	// Over enough tokens the vocabulary's multi-byte entries appear.
	ic := testInstance()
	ic.Tokens = 200
	ic.ITL = 0
	f := startFleet(t, Config{Seed: 7, Instance: []InstanceConfig{ic}})
	long := doCompletion(t, c, "http://"+f.Addrs()[0], "/v1/chat/completions", chatBody("long", false, "")).Choices[0].Message.Content
	if utf8.RuneCountInString(long) == len(long) {
		t.Fatal("200 tokens without a multi-byte UTF-8 character")
	}
}

func TestOpenAIErrors(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.Models = []string{"m"} })
	c := newClient()
	for _, tc := range []struct {
		name, body string
		status     int
		param      string
	}{
		{"bad json", `{"model":`, 400, ""},
		{"empty body", ``, 400, ""},
		{"no messages", `{"model":"m","messages":[]}`, 400, "messages"},
		{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "model"},
		{"n=2", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, 400, "n"},
		{"max_tokens 0", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens"},
	} {
		resp := post(t, context.Background(), c, url+"/v1/chat/completions", tc.body, nil)
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		e := readAPIError(t, resp)
		if strings.ContainsRune(e.Error.Message, 0) || strings.Contains(e.Error.Message, `\u0000`) {
			t.Fatalf("%s: message %q names a NUL the client never sent", tc.name, e.Error.Message)
		}
		if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
			t.Fatalf("%s: param %v, want %s", tc.name, e.Error.Param, tc.param)
		}
	}
	resp, err := c.Get(url + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 405 {
		t.Fatalf("GET chat: %d", resp.StatusCode)
	}
	readAPIError(t, resp)
	resp, err = c.Get(url + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 404 {
		t.Fatalf("GET /nope: %d", resp.StatusCode)
	}
	readAPIError(t, resp)
}

func TestSideEndpoints(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.Models = []string{"m", "m2"} })
	c := newClient()
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if getJSON(t, c, url+"/v1/models", &models) != 200 || len(models.Data) != 2 || models.Data[1].ID != "m2" {
		t.Fatalf("models %+v", models)
	}
	var ver struct{ Version string }
	if getJSON(t, c, url+"/api/version", &ver) != 200 || ver.Version == "" {
		t.Fatal("api/version")
	}
	if getJSON(t, c, url+"/health", nil) != 200 {
		t.Fatal("health")
	}
	cmp := doCompletion(t, c, url, "/v1/completions", `{"model":"m","prompt":"once upon","max_tokens":4}`)
	if cmp.Object != "text_completion" || cmp.Usage.CompletionTokens != 4 || cmp.Choices[0].Text == "" {
		t.Fatalf("completion %+v", cmp)
	}
	resp := post(t, context.Background(), c, url+"/v1/completions", `{"model":"m","prompt":["a","b"],"stream":true}`, nil)
	evs, err := readEvents(resp.Body, nil)
	resp.Body.Close()
	if err != nil || len(evs) != 10 || !strings.Contains(evs[0].data, `"text_completion"`) {
		t.Fatalf("streamed completion: %v %d events", err, len(evs))
	}
	resp = post(t, context.Background(), c, url+"/v1/embeddings", `{"model":"m","input":["a","bb"],"dimensions":8}`, nil)
	var emb struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&emb)
	resp.Body.Close()
	if len(emb.Data) != 2 || len(emb.Data[0].Embedding) != 8 || emb.Usage.PromptTokens != 2 {
		t.Fatalf("embeddings %+v", emb)
	}
	mresp, err := c.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, name := range []string{"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:gpu_cache_usage_perc{", "vllm:prefix_cache_hits_total{", "vllm:prefix_cache_queries_total{"} {
		if !strings.Contains(string(mb), name) {
			t.Fatalf("metrics lack %s:\n%s", name, mb)
		}
	}
}
