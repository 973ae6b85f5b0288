package llmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/sse"
)

// namedEvent is one SSE event: its `event:` type ("" for none) and data.
type namedEvent struct{ typ, data string }

type eventCollector struct{ evs []namedEvent }

func (c *eventCollector) OnEvent(ev sse.Event) {
	c.evs = append(c.evs, namedEvent{string(ev.Type), string(ev.Data)})
}

// scanEvents reads an SSE body with the gateway's scanner until EOF; err is the read error
// (nil on EOF).
func scanEvents(r io.Reader) ([]namedEvent, error) {
	var s sse.Scanner
	var c eventCollector
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if ferr := s.Feed(buf[:n], &c); ferr != nil {
				return c.evs, ferr
			}
		}
		if err == io.EOF {
			return c.evs, nil
		}
		if err != nil {
			return c.evs, err
		}
	}
}

// postStream posts body to url+path, requires a 200 event stream and returns its events.
func postStream(t *testing.T, url, path, body string, hdr map[string]string) ([]namedEvent, *http.Response) {
	t.Helper()
	resp := post(t, context.Background(), newClient(), url+path, body, hdr)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		require.Failf(t, "stream refused", "status %d: %s", resp.StatusCode, b)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	evs, err := scanEvents(resp.Body)
	require.NoError(t, err)
	return evs, resp
}

// postJSON posts body and decodes the response into v (any status); it returns the response.
func postJSON(t *testing.T, url, path, body string, hdr map[string]string, v any) *http.Response {
	t.Helper()
	resp := post(t, context.Background(), newClient(), url+path, body, hdr)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if v != nil {
		require.NoErrorf(t, json.Unmarshal(b, v), "status %d: %s", resp.StatusCode, b)
	}
	return resp
}

// chatUsage is a non-streamed chat completion's text and usage.
type chatUsage struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
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

// chatWithSystem runs a non-streamed chat completion of a system and a user message.
func chatWithSystem(t *testing.T, url, system, user, extra string) chatUsage {
	t.Helper()
	s, _ := json.Marshal(system)
	u, _ := json.Marshal(user)
	body := `{"model":"m","messages":[{"role":"system","content":` + string(s) + `},{"role":"user","content":` + string(u) + `}]` + extra + `}`
	var out chatUsage
	resp := postJSON(t, url, "/v1/chat/completions", body, nil, &out)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return out
}

// types lists the events' types.
func types(evs []namedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.typ
	}
	return out
}
