package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// sseEvent is one `data:` line of a stream and the time it was read.
type sseEvent struct {
	data string
	at   time.Time
}

// readSSE reads `data:` lines from r until EOF or `[DONE]` (included).
func readSSE(r io.Reader) ([]sseEvent, error) {
	var evs []sseEvent
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data:") {
			d := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			evs = append(evs, sseEvent{data: d, at: time.Now()})
			if d == "[DONE]" {
				return evs, nil
			}
		}
		if err != nil {
			return evs, err
		}
	}
}

func postChat(t *testing.T, origin, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(origin+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	return resp
}

// TestLlamaServer runs the real inference engine (node-llama-cpp serving the fixture model
// through bench/node/llama-server.mjs) and both real OpenAI clients against it directly. One
// server is shared by the subtests (it serves one request at a time).
func TestLlamaServer(t *testing.T) {
	start := time.Now()
	ls := StartLlamaServerWith(t, LlamaServerOptions{})
	t.Logf("llama-server up at %s in %v", ls.Origin, time.Since(start).Round(time.Millisecond))

	t.Run("StreamsTokens", func(t *testing.T) {
		const maxTokens = 48
		sent := time.Now()
		resp := postChat(t, ls.Origin, fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`, maxTokens))
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %s, content-type %q: %s", resp.Status, resp.Header.Get("Content-Type"), b)
		}
		if resp.ContentLength != -1 {
			t.Fatalf("stream has Content-Length %d; want unknown length (chunked)", resp.ContentLength)
		}
		evs, err := readSSE(resp.Body)
		if err != nil {
			t.Fatalf("read stream: %v (after %d events)", err, len(evs))
		}
		if n := len(evs); n < 4 || evs[n-1].data != "[DONE]" {
			t.Fatalf("stream: %d events, last %q; want several then [DONE]", n, evs[len(evs)-1].data)
		}
		var content strings.Builder
		contentEvents, finish := 0, ""
		var usage *struct{ PromptTokens, CompletionTokens, TotalTokens int }
		for i, ev := range evs[:len(evs)-1] {
			var c struct {
				Object  string `json:"object"`
				Choices []struct {
					Delta struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
					TotalTokens      int `json:"total_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil || c.Object != "chat.completion.chunk" {
				t.Fatalf("event %d %q: %v", i, ev.data, err)
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != "" {
					contentEvents++
					content.WriteString(ch.Delta.Content)
				}
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
			}
			if c.Usage != nil {
				u := struct{ PromptTokens, CompletionTokens, TotalTokens int }{c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens}
				usage = &u
			}
		}
		// One event per generated token (a token that ends inside a UTF-8 sequence is held back and
		// sent with the next), so nearly maxTokens content events.
		if contentEvents < maxTokens/2 || content.Len() == 0 {
			t.Fatalf("%d content events (%q), want about %d", contentEvents, content.String(), maxTokens)
		}
		if finish != "length" {
			t.Fatalf("finish_reason %q, want length (the fixture always runs to max_tokens)", finish)
		}
		if usage == nil || usage.CompletionTokens != maxTokens || usage.PromptTokens <= 0 || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
			t.Fatalf("usage %+v, want completion_tokens %d", usage, maxTokens)
		}
		t.Logf("%d events, %d content, TTFT %v, stream %v, usage %+v", len(evs), contentEvents,
			evs[1].at.Sub(sent).Round(time.Microsecond), evs[len(evs)-1].at.Sub(sent).Round(time.Microsecond), *usage)
	})

	t.Run("NonStream", func(t *testing.T) {
		resp := postChat(t, ls.Origin, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":8}`)
		defer resp.Body.Close()
		var c struct {
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Message      struct{ Role, Content string } `json:"message"`
				FinishReason string                         `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %s: %v", resp.Status, err)
		}
		if c.Object != "chat.completion" || c.Model != "m" || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" ||
			c.Choices[0].Message.Role != "assistant" || c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 8 {
			t.Fatalf("bad completion: %+v", c)
		}
	})

	t.Run("ModelsAndHealth", func(t *testing.T) {
		resp, err := http.Get(ls.Origin + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l struct {
			Object string `json:"object"`
			Data   []struct{ ID, Object string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || l.Object != "list" || len(l.Data) != 1 || l.Data[0].ID != LlamaModel {
			t.Fatalf("models: %+v %v", l, err)
		}
	})

	t.Run("BadInputIs400", func(t *testing.T) {
		cases := map[string]string{
			"not json":         `{"model":`,
			"array body":       `[]`,
			"no model":         `{"messages":[{"role":"user","content":"hi"}]}`,
			"no messages":      `{"model":"m"}`,
			"empty messages":   `{"model":"m","messages":[]}`,
			"bad role":         `{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`,
			"bad content":      `{"model":"m","messages":[{"role":"user","content":42}]}`,
			"image part":       `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			"zero max_tokens":  `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`,
			"float max_tokens": `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`,
			"huge max_tokens":  `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100000}`,
			"stream string":    `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`,
			"n=2":              `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2}`,
			"options no strm":  `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`,
			"temperature 9":    `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":9}`,
		}
		for name, body := range cases {
			resp := postChat(t, ls.Origin, body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			err := json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != 400 || err != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
				t.Errorf("%s: status %d, error %+v (%v)", name, resp.StatusCode, e.Error, err)
			}
		}
		resp, err := http.Get(ls.Origin + "/v2/nothing")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("unknown path: %d, want 404", resp.StatusCode)
		}
	})

	t.Run("AbortOnDisconnect", func(t *testing.T) {
		// A stream asked for 2000 tokens (seconds of work), dropped after a few events: the one
		// sequence must be free again at once, so a short request right after completes quickly.
		conn, err := net.Dial("tcp", strings.TrimPrefix(ls.Origin, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","messages":[{"role":"user","content":"long"}],"max_tokens":2000,"stream":true}`
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		br := bufio.NewReader(conn)
		for events := 0; events < 5; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if strings.HasPrefix(line, "data:") {
				events++
			}
		}
		conn.Close()
		dropped := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ls.Origin+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request after a dropped stream: %v (generation not aborted on disconnect?)", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %s", resp.Status)
		}
		t.Logf("next request done %v after the disconnect", time.Since(dropped).Round(time.Microsecond))
	})

	t.Run("OpenAINodeSDK", func(t *testing.T) {
		RunOpenAINodeCheck(t, ls.BaseURL, ls.Model)
	})

	t.Run("OpenAIGoSDK", func(t *testing.T) {
		RunOpenAIGoCheck(t, ls.BaseURL, ls.Model)
	})
}

// TestChecksRejectStreamWithoutDone proves that both client checks are strict: a stream that
// ends (cleanly, at the end of a chunked body) without `data: [DONE]` fails them.
func TestChecksRejectStreamWithoutDone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		usage := `{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}`
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"finish_reason":"length"}],"usage":%s}`, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`,
			`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}`,
			`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":` + usage + `}`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := OpenAIGoCheck(ctx, srv.URL+"/v1", "m"); err == nil || !strings.Contains(err.Error(), "[DONE]") {
		t.Errorf("openai-go check passed a stream without [DONE]: %v", err)
	}
	NodeDir(t)
	if _, err := OpenAINodeCheck(ctx, srv.URL+"/v1", "m"); err == nil || !strings.Contains(err.Error(), "[DONE]") {
		t.Errorf("openai node check passed a stream without [DONE]: %v", err)
	}
}
