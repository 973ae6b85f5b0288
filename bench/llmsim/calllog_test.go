package llmsim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The call log records each protocol call with its execution, in arrival order, also at
// GET /llmsim/calls; prepare:batch items appear one by one with the batch size; a prefill
// records its prompt cache key and whether its forwarded request carried one.
func TestCallLogRecordsProtocolCalls(t *testing.T) {
	f, urls := pdFleet(t)
	target := prepare(t, urls[1], "x1")
	if code, body := call(t, urls[1]+"/power/v1/decode/prepare:batch", `{"items":[{"execution_id":"b1"},{"execution_id":"b2"}]}`, nil); code != 200 {
		t.Fatalf("prepare:batch: %d %s", code, body)
	}
	req := strings.Replace(pdRequest, `"stream":true`, `"stream":true,"prompt_cache_key":"raw"`, 1)
	var src pdSource
	body := `{"execution_id":"x1","request":` + req + `,"target":` + string(target) + `,"prompt_cache_key":"aster-gw-pcache-v1:00"}`
	if code, b := call(t, urls[0]+"/power/v1/prefill/execute", body, &src); code != 200 {
		t.Fatalf("prefill: %d %s", code, b)
	}
	call(t, urls[1]+"/power/v1/abort", `{"execution_id":"b2"}`, nil)

	d := f.Calls(1)
	want := []Call{{Call: "prepare", ExecutionID: "x1"}, {Call: "prepare", ExecutionID: "b1", Batch: 2},
		{Call: "prepare", ExecutionID: "b2", Batch: 2}, {Call: "abort", ExecutionID: "b2"}}
	if len(d) != len(want) {
		t.Fatalf("decode worker calls: %+v", d)
	}
	for i, w := range want {
		if d[i].Call != w.Call || d[i].ExecutionID != w.ExecutionID || d[i].Batch != w.Batch {
			t.Errorf("call %d: got %+v, want %+v", i, d[i], w)
		}
		if i > 0 && d[i].At.Before(d[i-1].At) {
			t.Errorf("call %d arrived before call %d", i, i-1)
		}
	}
	p := f.Calls(0)
	if len(p) != 1 || p[0].Call != "prefill" || p[0].PromptCacheKey != "aster-gw-pcache-v1:00" || p[0].RequestCacheKey != "raw" {
		t.Fatalf("prefill worker calls: %+v", p)
	}
	resp, err := http.Get(urls[1] + "/llmsim/calls")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var served []Call
	if err := json.Unmarshal(b, &served); err != nil || len(served) != len(want) || served[3].Call != "abort" {
		t.Fatalf("GET /llmsim/calls: %v %s", err, b)
	}
}

// The call log keeps the last maxCallLog calls, oldest first.
func TestCallLogIsBounded(t *testing.T) {
	var l callLog
	t0 := time.Now()
	for i := range maxCallLog + 10 {
		l.add(Call{Call: "abort", At: t0.Add(time.Duration(i))})
	}
	got := l.snapshot()
	if len(got) != maxCallLog || !got[0].At.Equal(t0.Add(10)) || !got[len(got)-1].At.Equal(t0.Add(maxCallLog+9)) {
		t.Fatalf("len %d, first %v, last %v", len(got), got[0].At.Sub(t0), got[len(got)-1].At.Sub(t0))
	}
}

// decode/execute honours the forwarded request's stream: false gives one chat.completion.
func TestDecodeExecuteWithoutStream(t *testing.T) {
	_, urls := pdFleet(t)
	target := prepare(t, urls[1], "ns1")
	req := strings.Replace(pdRequest, `"stream":true,"stream_options":{"include_usage":true}`, `"stream":false`, 1)
	var src pdSource
	if code, b := call(t, urls[0]+"/power/v1/prefill/execute", `{"execution_id":"ns1","request":`+req+`,"target":`+string(target)+`}`, &src); code != 200 {
		t.Fatalf("prefill: %d %s", code, b)
	}
	var out struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	code, b := call(t, urls[1]+"/power/v1/decode/execute", `{"execution_id":"ns1","request":`+req+`,"source":`+string(src.Source)+`}`, &out)
	if code != 200 || out.Object != "chat.completion" || len(out.Choices) != 1 || out.Choices[0].Message.Content == "" {
		t.Fatalf("decode: %d %s", code, b)
	}
}
