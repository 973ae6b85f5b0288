package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// chatRecorder is an upstream that streams a reply naming the request it answers (with a
// quote to escape) and keeps every request body.
type chatRecorder struct {
	mu     sync.Mutex
	name   string
	n      int
	bodies []string
}

func (c *chatRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.n++
	reply := fmt.Sprintf(`%s said "%d"`, c.name, c.n)
	c.bodies = append(c.bodies, string(b))
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, part := range []string{reply[:3], reply[3:]} {
		chunk, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": part}}}})
		fmt.Fprintf(w, "data: %s\n\n", chunk)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// With an alternate target, each connection's requests go to the two targets in turn; with
// echo replies, each turn of a conversation carries the previous reply verbatim (its JSON
// escapes kept) as the assistant message.
func TestMultiTurnAlternatesAndEchoesReplies(t *testing.T) {
	a, b := &chatRecorder{name: "a"}, &chatRecorder{name: "b"}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	t.Cleanup(sa.Close)
	t.Cleanup(sb.Close)
	res, err := Run(context.Background(), Options{
		Target: sa.URL, AltTarget: sb.URL, Workload: WorkloadMultiTurn, Concurrency: 1, Turns: 4,
		EchoReplies: true, Duration: 300 * time.Millisecond, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK < 8 || res.Errors != 0 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.ErrorsByKind)
	}
	a.mu.Lock()
	b.mu.Lock()
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	if d := a.n - b.n; d < 0 || d > 1 {
		t.Fatalf("requests not alternating: %d to a, %d to b", a.n, b.n)
	}
	// Request k went to a when k is even: its reply names a and its count.
	for k := 1; k < min(len(a.bodies), len(b.bodies))*2-1; k++ {
		prev, body := k-1, ""
		if k%2 == 0 {
			body = a.bodies[k/2]
		} else {
			body = b.bodies[k/2]
		}
		var req struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("request %d: %v: %s", k, err, body)
		}
		if k%4 == 0 {
			if len(req.Messages) != 2 {
				t.Fatalf("request %d starts a conversation: %d messages", k, len(req.Messages))
			}
			continue
		}
		last := req.Messages[len(req.Messages)-2]
		want := fmt.Sprintf(`%s said "%d"`, map[bool]string{true: "a", false: "b"}[prev%2 == 0], prev/2+1)
		if last.Role != "assistant" || last.Content != want {
			t.Fatalf("request %d: assistant message %q %q, want the reply %q", k, last.Role, last.Content, want)
		}
	}
	if !strings.Contains(a.bodies[1], `\"`) {
		t.Fatalf("the reply's escapes are kept: %s", a.bodies[1])
	}
}

func TestContentValue(t *testing.T) {
	for in, want := range map[string]string{
		`{"choices":[{"delta":{"content":"hi \"x\" \\ y"}}]}`:       `hi \"x\" \\ y`,
		`{"choices":[{"delta":{"role":"assistant","content":""}}]}`: ``,
		`{"content" : "a"}`:      `a`,
		`{"usage":{"total":3}}`:  ``,
		`{"content":"unfinished`: ``,
	} {
		if got := string(contentValue([]byte(in))); got != want {
			t.Errorf("contentValue(%s) = %q, want %q", in, got, want)
		}
	}
}
