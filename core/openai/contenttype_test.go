package openai

import "testing"

func TestJSONContentType(t *testing.T) {
	for _, tc := range []struct {
		v       string
		present bool
		want    bool
	}{
		{"application/json", true, true},
		{"application/json; charset=utf-8", true, true},
		{"APPLICATION/JSON;charset=UTF-8", true, true},
		{"  application/json  ", true, true},
		{"application/vnd.example+json", true, true},
		{"application/problem+JSON; q=1", true, true},
		{"", false, false},
		{"", true, false},
		{"text/plain", true, false},
		{"text/plain;charset=UTF-8", true, false},
		{"application/x-www-form-urlencoded", true, false},
		{"multipart/form-data; boundary=x", true, false},
		{"application/jsonx", true, false},
		{"application/+json", true, false},
		{"text/json", true, false},
		{"json", true, false},
		{"application/json-patch", true, false},
	} {
		if got := JSONContentType([]byte(tc.v), tc.present); got != tc.want {
			t.Errorf("JSONContentType(%q, %v) = %v, want %v", tc.v, tc.present, got, tc.want)
		}
	}
}
