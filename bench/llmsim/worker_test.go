package llmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testKey = "sekrit"

// pdFleet: 0 prefill (gen 1), 1 decode (gen 1), 2 decode (gen 1), 3 prefill (gen 2).
func pdFleet(t *testing.T) (*Fleet, []string) {
	mk := func(role Role, gen int64) InstanceConfig {
		ic := testInstance()
		ic.Role, ic.Generation = role, gen
		ic.TTFT = Duration(300 * time.Millisecond)
		ic.Tokens = 6
		return ic
	}
	f := startFleet(t, Config{Seed: 3, APIKey: testKey, Instance: []InstanceConfig{
		mk(RolePrefill, 1), mk(RoleDecode, 1), mk(RoleDecode, 1), mk(RolePrefill, 2),
	}})
	var urls []string
	for _, a := range f.Addrs() {
		urls = append(urls, "http://"+a)
	}
	return f, urls
}

// call POSTs a worker protocol body with the bearer key and decodes a JSON answer.
func call(t *testing.T, url, body string, out any) (int, string) {
	t.Helper()
	resp := post(t, context.Background(), newClient(), url, body, map[string]string{"Authorization": "Bearer " + testKey})
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

type pdTarget struct {
	Target json.RawMessage `json:"target"`
}
type pdSource struct {
	Source       json.RawMessage `json:"source"`
	CachedTokens int             `json:"cached_tokens"`
}

var pdRequest = `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("prefill me ", 60) + `"}],"stream":true,"stream_options":{"include_usage":true}}`

func prepare(t *testing.T, decodeURL, exec string) json.RawMessage {
	t.Helper()
	var tg pdTarget
	if code, body := call(t, decodeURL+"/power/v1/decode/prepare", `{"execution_id":"`+exec+`"}`, &tg); code != 200 || len(tg.Target) == 0 {
		t.Fatalf("prepare: %d %s", code, body)
	}
	return tg.Target
}

func prefill(t *testing.T, prefillURL, exec string, target json.RawMessage) pdSource {
	t.Helper()
	var src pdSource
	body := `{"execution_id":"` + exec + `","request":` + pdRequest + `,"target":` + string(target) + `}`
	if code, b := call(t, prefillURL+"/power/v1/prefill/execute", body, &src); code != 200 || len(src.Source) == 0 {
		t.Fatalf("prefill: %d %s", code, b)
	}
	return src
}

func decodeBody(exec string, source json.RawMessage) string {
	return `{"execution_id":"` + exec + `","request":` + pdRequest + `,"source":` + string(source) + `}`
}

func TestWorkerBearerKey(t *testing.T) {
	_, urls := pdFleet(t)
	c := newClient()
	for _, hdr := range []string{"", "Bearer wrong", "Basic " + testKey} {
		req, _ := http.NewRequest("GET", urls[1]+"/power/v1/observation", nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 401 {
			t.Fatalf("Authorization %q: %d", hdr, resp.StatusCode)
		}
		readAPIError(t, resp)
	}
	req, _ := http.NewRequest("GET", urls[1]+"/power/v1/observation", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("with key: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
}

func TestPrefillDecodeFlow(t *testing.T) {
	f, urls := pdFleet(t)
	target := prepare(t, urls[1], "e1")
	src := prefill(t, urls[0], "e1", target)
	if src.CachedTokens != 0 {
		t.Fatalf("first prefill cached %d", src.CachedTokens)
	}
	start := time.Now()
	resp := post(t, context.Background(), newClient(), urls[1]+"/power/v1/decode/execute", decodeBody("e1", src.Source), map[string]string{"Authorization": "Bearer " + testKey})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("decode: %d %s", resp.StatusCode, b)
	}
	evs, err := readEvents(resp.Body, nil)
	resp.Body.Close()
	if err != nil || len(evs) != 9 || evs[8].data != "[DONE]" {
		t.Fatalf("decode stream: %v, %d events", err, len(evs))
	}
	// Decode charges the KV transfer (5ms + 10µs/token), not the 300ms prefill.
	if ttft := evs[0].at.Sub(start); ttft > 200*time.Millisecond {
		t.Fatalf("decode TTFT %v: prefill charged again?", ttft)
	}
	if u := parseChunk(t, evs[7].data).Usage; u == nil || u.CompletionTokens != 6 || u.PromptTokens == 0 {
		t.Fatalf("usage %s", evs[7].data)
	}
	// The same source again: its reservation is used up.
	if code, b := call(t, urls[1]+"/power/v1/decode/execute", decodeBody("e1", src.Source), nil); code != 409 || !strings.Contains(b, "stale_handle") {
		t.Fatalf("reused source: %d %s", code, b)
	}
	// A second prefill of the same prompt on the same worker finds it cached.
	src2 := prefill(t, urls[0], "e2", prepare(t, urls[1], "e2"))
	if src2.CachedTokens == 0 {
		t.Fatal("second prefill of the same prompt found nothing cached")
	}
	if st := f.Stats(0); st.Calls.Prefill != 2 || st.FullMisses != 1 {
		t.Fatalf("prefill stats %+v", st)
	}
	if st := f.Stats(1); st.Calls.Prepare != 2 || st.Calls.Decode != 2 || st.Completed != 1 {
		t.Fatalf("decode stats %+v", st)
	}
}

func TestDecodeRefusesForeignHandles(t *testing.T) {
	_, urls := pdFleet(t)
	target := prepare(t, urls[1], "e1")
	src := prefill(t, urls[0], "e1", target)

	tampered := []byte(string(src.Source))
	i := strings.Index(string(tampered), `"llmsim":"`) + 12
	tampered[i] ^= 1
	otherPrompt := strings.Replace(decodeBody("e1", src.Source), "prefill me", "prefill it", 1)
	for _, tc := range []struct {
		name, url, body string
		status          int
	}{
		{"another decode worker", urls[2], decodeBody("e1", src.Source), 400},
		{"a prefill worker", urls[0], decodeBody("e1", src.Source), 409},
		{"tampered", urls[1], decodeBody("e1", tampered), 400},
		{"target passed as source", urls[1], decodeBody("e1", target), 400},
		{"another execution", urls[1], decodeBody("e9", src.Source), 400},
		{"another prompt", urls[1], otherPrompt, 400},
		{"garbage", urls[1], decodeBody("e1", json.RawMessage(`{"x":1}`)), 400},
	} {
		code, body := call(t, tc.url+"/power/v1/decode/execute", tc.body, nil)
		if code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.status)
			continue
		}
		var e apiError
		if json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" {
			t.Errorf("%s: not an OpenAI error: %s", tc.name, body)
		}
	}
	// After all those refusals the genuine handle still works.
	if code, b := call(t, urls[1]+"/power/v1/decode/execute", decodeBody("e1", src.Source), nil); code != 200 {
		t.Fatalf("genuine handle refused: %d %s", code, b)
	}
	// A prefill worker of another generation refuses the target.
	t2 := prepare(t, urls[1], "e3")
	body := `{"execution_id":"e3","request":` + pdRequest + `,"target":` + string(t2) + `}`
	if code, b := call(t, urls[3]+"/power/v1/prefill/execute", body, nil); code != 409 || !strings.Contains(b, "generation") {
		t.Fatalf("generation mismatch: %d %s", code, b)
	}
}

func TestDecodeRefusesHandleAfterRestart(t *testing.T) {
	f, urls := pdFleet(t)
	src := prefill(t, urls[0], "e1", prepare(t, urls[1], "e1"))
	if err := f.Crash(1, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "decode restarted", 5*time.Second, func() bool {
		resp, err := newClient().Get(urls[1] + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if code, b := call(t, urls[1]+"/power/v1/decode/execute", decodeBody("e1", src.Source), nil); code != 409 {
		t.Fatalf("handle from before the restart: %d %s", code, b)
	}
}

func TestPrepareBatchAndAbort(t *testing.T) {
	f, urls := pdFleet(t)
	var out struct {
		Items []struct {
			Target json.RawMessage `json:"target"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"items"`
	}
	code, b := call(t, urls[1]+"/power/v1/decode/prepare:batch", `{"items":[{"execution_id":"a"},{"execution_id":"b"},{}]}`, &out)
	if code != 200 || len(out.Items) != 3 || out.Items[0].Target == nil || out.Items[1].Target == nil || out.Items[2].Error == nil {
		t.Fatalf("batch: %d %s", code, b)
	}
	// Abort drops the reservation: the decode that follows is refused.
	src := prefill(t, urls[0], "a", out.Items[0].Target)
	var ab struct{ Aborted bool }
	if code, b := call(t, urls[1]+"/power/v1/abort", `{"execution_id":"a"}`, &ab); code != 200 || !ab.Aborted {
		t.Fatalf("abort: %d %s", code, b)
	}
	if code, b := call(t, urls[1]+"/power/v1/decode/execute", decodeBody("a", src.Source), nil); code != 409 {
		t.Fatalf("decode after abort: %d %s", code, b)
	}
	// Abort of a running decode stops its stream.
	src = prefill(t, urls[0], "b", out.Items[1].Target)
	long := strings.Replace(decodeBody("b", src.Source), `"stream":true`, `"stream":true,"max_tokens":100000`, 1)
	// the prompt is unchanged, only the output cap differs
	resp := post(t, context.Background(), newClient(), urls[1]+"/power/v1/decode/execute", long, map[string]string{"Authorization": "Bearer " + testKey})
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("decode b: %d %s", resp.StatusCode, b)
	}
	waitFor(t, "decode running", 5*time.Second, func() bool { return f.Stats(1).Running == 1 })
	if code, b := call(t, urls[1]+"/power/v1/abort", `{"execution_id":"b"}`, &ab); code != 200 || !ab.Aborted {
		t.Fatalf("abort running: %d %s", code, b)
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, resp.Body); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("aborted decode stream did not end")
	}
	resp.Body.Close()
	waitFor(t, "abort counted", 5*time.Second, func() bool { return f.Stats(1).Aborted == 1 && f.Stats(1).Running == 0 })
	if code, b := call(t, urls[1]+"/power/v1/abort", `{"execution_id":"zzz"}`, &ab); code != 200 || ab.Aborted {
		t.Fatalf("abort unknown: %d %s", code, b)
	}
	if st := f.Stats(1); st.Calls.PrepareBatch != 1 || st.Calls.Abort != 3 {
		t.Fatalf("calls %+v", st.Calls)
	}
}

// The workers refuse a forwarded request as the aggregated endpoint refuses it (n other than
// 1, logprobs, out-of-range sampling, ...): the same status and body, from the prefill worker
// before it prefills and from the decode worker before it uses its reservation.
func TestPDWorkersRefuseWhatTheEndpointRefuses(t *testing.T) {
	_, urls := pdFleet(t)
	_, whole := startOne(t, nil)
	target := prepare(t, urls[1], "e1")
	src := prefill(t, urls[0], "e1", target)
	for _, tc := range refusedFields {
		inner := refusedRequest(tc.path, tc.body)
		resp := post(t, context.Background(), newClient(), whole+tc.path, inner, nil)
		want, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", inner, want)

		code, body := call(t, urls[0]+"/power/v1/prefill/execute", `{"execution_id":"e1","request":`+inner+`,"target":`+string(target)+`}`, nil)
		require.Equal(t, http.StatusBadRequest, code, "prefill of %s: %s", inner, body)
		require.Equal(t, string(want), body, "prefill of %s", inner)
		code, body = call(t, urls[1]+"/power/v1/decode/execute", `{"execution_id":"e1","request":`+inner+`,"source":`+string(src.Source)+`}`, nil)
		require.Equal(t, http.StatusBadRequest, code, "decode of %s: %s", inner, body)
		require.Equal(t, string(want), body, "decode of %s", inner)
	}
	// The reservation is still there for the request it was prefilled for.
	code, body := call(t, urls[1]+"/power/v1/decode/execute", decodeBody("e1", src.Source), nil)
	require.Equal(t, 200, code, body)
}
