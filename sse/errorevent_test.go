package sse

import (
	"encoding/json"
	"testing"
)

func TestAppendErrorEvent(t *testing.T) {
	got := string(AppendErrorEvent([]byte("x"), "upstream reset", "upstream_error", "upstream_reset"))
	want := "x" + "event: error\ndata: {\"error\":{\"message\":\"upstream reset\",\"type\":\"upstream_error\",\"param\":null,\"code\":\"upstream_reset\"}}\n\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := string(AppendErrorEvent(nil, "m", "t", "")); got != "event: error\ndata: {\"error\":{\"message\":\"m\",\"type\":\"t\",\"param\":null,\"code\":null}}\n\n" {
		t.Fatalf("empty code: %q", got)
	}
}

// TestAppendErrorEventEscaping checks that hostile messages stay one valid
// JSON data line and round-trip through a JSON decoder and the Scanner.
func TestAppendErrorEventEscaping(t *testing.T) {
	msg := "line1\nline2\r\"quoted\" \\ back\ttab \x00\x1f ünïcode \u2028 bad\xff end"
	ev := AppendErrorEvent(nil, msg, "server_error", "c\"ode")
	var s Scanner
	var data []byte
	h := handlerFunc(func(e Event) {
		if string(e.Type) != "error" {
			t.Errorf("type %q", e.Type)
		}
		data = append([]byte(nil), e.Data...)
	})
	if err := s.Feed(ev, h); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("%v in %q", err, data)
	}
	wantMsg := "line1\nline2\r\"quoted\" \\ back\ttab \x00\x1f ünïcode \u2028 bad\ufffd end"
	if body.Error.Message != wantMsg || body.Error.Type != "server_error" || body.Error.Code != "c\"ode" || body.Error.Param != nil {
		t.Fatalf("decoded %+v", body.Error)
	}
}

type handlerFunc func(Event)

func (f handlerFunc) OnEvent(e Event) { f(e) }
