package llmsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testInstance is a fast instance for tests: ms-scale timings on a free port.
func testInstance() InstanceConfig {
	ic := DefaultInstance()
	ic.Listen = "127.0.0.1:0"
	ic.TTFT = Duration(20 * time.Millisecond)
	ic.PerUncachedToken = Duration(0)
	ic.ITL = Duration(5 * time.Millisecond)
	ic.ITLPerRunning = 0
	ic.Tokens = 8
	return ic
}

// startFleet starts cfg (or n copies of ic) and closes it when the test ends.
func startFleet(t testing.TB, cfg Config) *Fleet {
	t.Helper()
	f, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func startOne(t testing.TB, mod func(*InstanceConfig)) (*Fleet, string) {
	ic := testInstance()
	if mod != nil {
		mod(&ic)
	}
	f := startFleet(t, Config{Seed: 7, Instance: []InstanceConfig{ic}})
	return f, "http://" + f.Addrs()[0]
}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableCompression:  true,
		MaxIdleConnsPerHost: 64,
	}}
}

func chatBody(content string, stream bool, extra string) string {
	b, _ := json.Marshal(content)
	s := `{"model":"m","messages":[{"role":"user","content":` + string(b) + `}]`
	if stream {
		s += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func post(t testing.TB, ctx context.Context, c *http.Client, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	resp, err := tryPost(ctx, c, url, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// tryPost is post returning the error that left it without a response, for goroutines other
// than the test's.
func tryPost(ctx context.Context, c *http.Client, url, body string, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	return resp, nil
}

// sseEvent is one received `data:` payload and when it arrived.
type sseEvent struct {
	data string
	at   time.Time
}

// readEvents reads SSE data events until EOF or error; err is the read error (nil on EOF).
func readEvents(r io.Reader, onEvent func(sseEvent)) ([]sseEvent, error) {
	br := bufio.NewReader(r)
	var out []sseEvent
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data: ") && strings.HasSuffix(line, "\n") {
			ev := sseEvent{data: strings.TrimSuffix(strings.TrimPrefix(line, "data: "), "\n"), at: time.Now()}
			out = append(out, ev)
			if onEvent != nil {
				onEvent(ev)
			}
		}
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
	}
}

type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func parseChunk(t testing.TB, data string) chunk {
	t.Helper()
	var c chunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk %q: %v", data, err)
	}
	return c
}

// content concatenates the content deltas of chat chunks.
func content(t testing.TB, evs []sseEvent) string {
	var sb strings.Builder
	for _, e := range evs {
		if e.data == "[DONE]" {
			continue
		}
		c := parseChunk(t, e.data)
		for _, ch := range c.Choices {
			sb.WriteString(ch.Delta.Content)
			sb.WriteString(ch.Text)
		}
	}
	return sb.String()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ttftOf streams a chat request and returns the time from sending to the first event, the
// events and the response.
func ttftOf(t testing.TB, c *http.Client, url, body string) (time.Duration, []sseEvent, *http.Response) {
	t.Helper()
	start := time.Now()
	resp := post(t, context.Background(), c, url+"/v1/chat/completions", body, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	evs, err := readEvents(resp.Body, nil)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs[0].at.Sub(start), evs, resp
}

func getJSON(t testing.TB, c *http.Client, url string, v any) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func readAPIError(t testing.TB, resp *http.Response) apiError {
	t.Helper()
	defer resp.Body.Close()
	var e apiError
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("status %d: not an OpenAI error body: %s", resp.StatusCode, b)
	}
	return e
}
